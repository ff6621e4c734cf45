#include "nic/sysfs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>

namespace rg::nic {

namespace fs = std::filesystem;

std::optional<std::string> read_attr(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::optional<uint64_t> read_u64_attr(const fs::path& p) {
  auto line = read_attr(p);
  if (!line || line->empty() || !std::isdigit(static_cast<unsigned char>(line->front())))
    return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(line->c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return v;
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string ib_device_driver(const fs::path& dev_dir) {
  std::error_code ec;
  const fs::path drv = fs::read_symlink(dev_dir / "device" / "driver", ec);
  if (!ec) return drv.filename().string();
  if (dev_dir.filename().string().rfind("rxe", 0) == 0 || fs::exists(dev_dir / "parent", ec))
    return "rxe";
  return "";
}

}  // namespace rg::nic
