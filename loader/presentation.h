// What `stats`, /metrics and the lab show of the maps, decided once: which
// QPs count as the worst, what each per-QP field is called (in JSON and as a
// Prometheus family), and how addresses and interfaces are written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "maps.h"

namespace rg {

// Retransmits plus estimated losses over both directions: what the QP lost
// to the network.
uint64_t qp_badness(const rg_qp_state& s);
uint64_t qp_packets(const rg_qp_state& s);

// The ranking order: more badness first; ties (often all zero) by more
// traffic, then by key, so the same QPs stay selected from one read to the
// next.
bool qp_ranks_before(const QpRow& a, const QpRow& b);

// Keeps the top worst QPs of qps, worst first.
void keep_worst_qps(std::vector<QpRow>& qps, size_t top);

// One per-direction QP field: its JSON key and, where it is exported, its
// Prometheus family. Fields sharing a family are told apart by label.
struct QpField {
  std::string_view name;
  uint64_t (*value)(const rg_qp_dir&);
  std::string_view metric = {};  // full family name; empty: JSON only
  std::string_view help = {};
  std::string_view label = {};
  std::string_view label_value = {};
};

// Every field of rg_qp_dir, in the order they are shown.
const std::vector<QpField>& qp_fields();

nlohmann::json qp_dir_json(const rg_qp_dir& d);

// "192.0.2.1" or "2001:db8::1" for a map key's address.
std::string address_text(uint32_t family, const uint8_t* addr);

// Interface names by ifindex, for counters taken in another network
// namespace (the lab's gateways), where if_indextoname() here would name an
// unrelated interface.
using InterfaceNames = std::map<uint32_t, std::string>;

// The interface's name from names, else from this namespace, else the
// ifindex as a number: a deleted interface keeps its counters.
std::string interface_name(uint32_t ifindex, const InterfaceNames& names = {});

// One counter row as JSON: interface, ifindex, direction and per-event
// packets/bytes; events that are zero only when with_zero.
nlohmann::json counter_row_json(const CounterRow& row, const std::string& ifname, bool with_zero);

}  // namespace rg
