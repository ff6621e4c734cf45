// `roceguard doctor`: what will and will not work on this host, each finding
// with its fix. Only reads: probes load tiny BPF programs and run them with
// BPF_PROG_TEST_RUN, nothing is attached, mounted or written.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace rg {

enum class Verdict { kOk, kInfo, kWarn, kFail };

struct Finding {
  std::string check;    // "bpffs", "kernel.btf", "interface"
  std::string subject;  // the interface or device, "" for the host
  Verdict verdict = Verdict::kOk;
  std::string what;     // what was found, in plain words
  std::string fix;      // what to do, "" when nothing
};

struct DoctorInput {
  Config config;                 // defaults when no file was given
  bool interfaces_given = false; // else every interface but lo is looked at
  bool config_given = false;     // else the NIC profile is the running configuration's, if any
  std::string pin_path;
  std::string nic_state_dir;
};

std::vector<Finding> run_doctor(const DoctorInput& in);

std::string_view verdict_name(Verdict v);
nlohmann::json findings_json(const std::vector<Finding>& findings);
// kExitUnhealthy when a finding failed, else 0.
int doctor_exit_code(const std::vector<Finding>& findings);

}  // namespace rg
