#include "cli.h"

namespace rg {

void add_lab_command(CLI::App& app) { (void)app; }

}  // namespace rg
