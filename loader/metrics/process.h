// The process_* series every Prometheus client library exports
// (process_cpu_seconds_total, process_resident_memory_bytes, ...), read
// from /proc/self at scrape time.
#pragma once

#include <optional>
#include <string>

namespace rg {

struct ProcessStats {
  double cpu_seconds = 0;        // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // since the epoch
  double open_fds = 0;
  double max_fds = 0;             // the soft RLIMIT_NOFILE
};

// proc_root is /proc in production; nullopt when it cannot be read.
std::optional<ProcessStats> read_process_stats(const std::string& proc_root = "/proc");

}  // namespace rg
