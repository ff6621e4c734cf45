#include "metrics/process.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace rg {

std::optional<ProcessStats> read_process_stats(const std::string& proc_root) {
  std::ifstream stat_file(proc_root + "/self/stat");
  std::string stat;
  if (!std::getline(stat_file, stat)) return std::nullopt;
  // The command name, field 2, is in parentheses and may hold spaces: the
  // fields are counted from after its closing one (field 3 on).
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::vector<std::string> f(2);  // field n at index n - 1; pid and comm are not needed
  for (std::string s; rest >> s;) f.push_back(s);
  if (f.size() < 25) return std::nullopt;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  ProcessStats p;
  try {
    p.cpu_seconds = (std::stod(f[13]) + std::stod(f[14])) / ticks;  // utime, stime
    p.virtual_bytes = std::stod(f[22]);                             // vsize
    p.resident_bytes = std::stod(f[23]) * page;                     // rss, in pages
    // starttime is in ticks since boot; btime of /proc/stat is the boot.
    std::ifstream kstat(proc_root + "/stat");
    double boot = -1;
    for (std::string line; std::getline(kstat, line);)
      if (line.rfind("btime ", 0) == 0) boot = std::stod(line.substr(6));
    if (boot < 0) return std::nullopt;
    p.start_time_seconds = boot + std::stod(f[21]) / ticks;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::error_code ec;
  size_t fds = 0;
  for (std::filesystem::directory_iterator it(proc_root + "/self/fd", ec), end; !ec && it != end; it.increment(ec))
    ++fds;
  if (ec) return std::nullopt;
  p.open_fds = static_cast<double>(fds);
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0) return std::nullopt;
  p.max_fds = static_cast<double>(nofile.rlim_cur);
  return p;
}

}  // namespace rg
