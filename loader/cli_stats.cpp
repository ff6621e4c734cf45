#include "cli.h"

namespace rg {

void add_stats_commands(CLI::App& app) { (void)app; }

}  // namespace rg
