// Priority flow control through DCB netlink: off, since pause frames do not
// cross the lossy network roceguard is for; and back to what it was, for
// `nic revert`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "nic/step_report.h"

namespace rg::nic {

struct PfcState {
  bool supported = false;  // the driver has DCB IEEE PFC operations
  uint8_t pfc_en = 0;      // one bit per priority
  int error = 0;           // negative errno of a failed query
};

// The kernel's IEEE PFC (RTM_GETDCB / RTM_SETDCB), or a test's stand-in.
struct Dcb {
  std::function<PfcState(const std::string& ifname)> get;
  // Sets pfc_en only (capability, MBC and delay stay the driver's); returns
  // 0 or a negative errno.
  std::function<int(const std::string& ifname, uint8_t pfc_en)> set;
  static Dcb kernel();
};

// PFC on the priorities in pfc_en (0: off) on ifname; kNotSupported when
// the driver has no DCB (IEEE PFC) operations.
StepReport set_pfc(const std::string& ifname, uint8_t pfc_en, bool dry_run, const Dcb& dcb = Dcb::kernel());
inline StepReport set_pfc_off(const std::string& ifname, bool dry_run, const Dcb& dcb = Dcb::kernel()) {
  return set_pfc(ifname, 0, dry_run, dcb);
}
// "3,4" for the bits of pfc_en, "none" for 0.
std::string pfc_priorities(uint8_t pfc_en);

}  // namespace rg::nic
