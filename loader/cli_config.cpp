#include "cli.h"

namespace rg {

void add_config_commands(CLI::App& app) { (void)app; }

}  // namespace rg
