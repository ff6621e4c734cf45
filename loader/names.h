// The one enum -> name table for counter events and directions. Used by the
// CLI, the exporter and the tests (which check it covers every enum value).
#pragma once

#include <optional>
#include <string_view>

#include "roceguard/roceguard.h"

namespace rg {

struct EventName {
  rg_event event;
  std::string_view name;         // snake_case, used in JSON and as a label value
  std::string_view metric;       // Prometheus metric family (without prefix)
  std::string_view help;
};

// Indexed by rg_event; size RG_EV_MAX.
const EventName& event_name(rg_event ev);
std::optional<rg_event> event_from_name(std::string_view name);
std::string_view direction_name(rg_direction dir);

}  // namespace rg
