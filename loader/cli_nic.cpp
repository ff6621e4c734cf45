#include "cli.h"

namespace rg {

void add_nic_commands(CLI::App& app) { (void)app; }

}  // namespace rg
