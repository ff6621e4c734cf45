// The NIC retransmit/QoS profile ([nic] table of the config file, or flags).
#pragma once

#include <string>
#include <vector>

#include <toml++/toml.h>

namespace rg::nic {

// Validates a [nic] table; returns one message per problem, each naming the
// key (`nic.ack_timeout: ...`). Empty when valid.
std::vector<std::string> validate_nic_table(const toml::table& nic);

}  // namespace rg::nic
