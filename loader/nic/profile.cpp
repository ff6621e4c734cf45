#include "nic/profile.h"

namespace rg::nic {

std::vector<std::string> validate_nic_table(const toml::table&) { return {}; }

}  // namespace rg::nic
