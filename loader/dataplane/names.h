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
  std::string_view metric;       // Prometheus packet-count family (no prefix, no _total)
  std::string_view help;
  // Byte-count family; empty where the event's byte count says nothing.
  std::string_view bytes_metric = {};
  // Events sharing a family are told apart by this label; empty when the
  // family has a single event.
  std::string_view label = {};
  std::string_view label_value = {};
};

// Per-peer events (rg_peer_event): each one family with a `peer` label,
// told apart by label where they share one.
struct PeerEventName {
  rg_peer_event event;
  std::string_view name;    // snake_case, used in JSON
  std::string_view metric;  // full Prometheus family name
  std::string_view help;
  std::string_view label = {};
  std::string_view label_value = {};
  // Byte-count family (full name) and its help; empty where the event's
  // byte count says nothing.
  std::string_view bytes_metric = {};
  std::string_view bytes_help = {};
};

// Indexed by rg_peer_event; size RG_PEER_EV_MAX.
const PeerEventName& peer_event_name(rg_peer_event ev);

// Indexed by rg_event; size RG_EV_MAX.
const EventName& event_name(rg_event ev);
std::optional<rg_event> event_from_name(std::string_view name);
std::string_view direction_name(rg_direction dir);

}  // namespace rg
