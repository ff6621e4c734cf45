// What one `nic apply` step did (or, with dry_run, would do); every channel
// (configfs, DCB, vendor tools) answers with one.
#pragma once

#include <string>
#include <vector>

namespace rg::nic {

struct StepReport {
  enum class Status { kDone, kPlanned, kSkipped, kNotSupported, kFailed };
  Status status = Status::kDone;
  std::vector<std::string> lines;  // the changes, commands and reasons
};

}  // namespace rg::nic
