#include "cli.h"

namespace rg {

void add_daemon_commands(CLI::App& app) { (void)app; }

}  // namespace rg
