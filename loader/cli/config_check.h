// The one validation run, attach and `config check` share (config_check.cpp):
// a configuration `config check` accepts is one run starts with, and the
// other way round. It sits above config/ because it also checks what the
// data plane can hold (the attach record of dataplane/state.h), which
// config/ may not call.
#pragma once

#include "config/config.h"

namespace rg {

// What run and attach need beyond a well-formed file (interfaces given, a
// metrics address this build can serve) and, unless offline, what this
// machine must have: the interfaces, each peer's local address, the
// metrics address.
void check_config(const Config& cfg, bool offline, ConfigProblems& problems);
// resolve_config + check_config; throws rg::Error listing every problem
// (kExitUsage, or kExitNotFound when only the machine lacks something).
// wait_for_interfaces (`run`): interfaces that do not exist yet are no
// problem.
Config load_config(const ConfigSources& sources, bool offline = false, bool wait_for_interfaces = false);

}  // namespace rg
