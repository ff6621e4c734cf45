#include "presentation.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "names.h"

namespace rg {

uint64_t qp_badness(const rg_qp_state& s) {
  uint64_t n = 0;
  for (const auto& d : s.dir) n += d.retransmits + d.lost;
  return n;
}

uint64_t qp_packets(const rg_qp_state& s) {
  uint64_t n = 0;
  for (const auto& d : s.dir) n += d.packets;
  return n;
}

bool qp_ranks_before(const QpRow& a, const QpRow& b) {
  const uint64_t ba = qp_badness(a.state), bb = qp_badness(b.state);
  if (ba != bb) return ba > bb;
  const uint64_t pa = qp_packets(a.state), pb = qp_packets(b.state);
  if (pa != pb) return pa > pb;
  return std::memcmp(&a.key, &b.key, sizeof(a.key)) < 0;
}

void keep_worst_qps(std::vector<QpRow>& qps, size_t top) {
  const size_t n = std::min(top, qps.size());
  std::partial_sort(qps.begin(), qps.begin() + static_cast<ptrdiff_t>(n), qps.end(), qp_ranks_before);
  qps.resize(n);
}

namespace {

template <auto Member>
uint64_t field(const rg_qp_dir& d) {
  return d.*Member;
}

}  // namespace

const std::vector<QpField>& qp_fields() {
  static const std::vector<QpField> fields{
      {"packets", field<&rg_qp_dir::packets>, "roceguard_qp_packets_total", "RoCE packets of the QP (top QPs only)"},
      {"bytes", field<&rg_qp_dir::bytes>, "roceguard_qp_bytes_total", "RoCE bytes of the QP (top QPs only)"},
      {"retransmits", field<&rg_qp_dir::retransmits>, "roceguard_qp_retransmitted_packets_total",
       "Packets at or behind the QP's highest PSN (top QPs only)"},
      {"gaps", field<&rg_qp_dir::gaps>, "roceguard_qp_psn_gaps_total", "Forward PSN jumps of the QP (top QPs only)"},
      {"lost", field<&rg_qp_dir::lost>, "roceguard_qp_estimated_lost_packets_total",
       "Packets missing in the QP's PSN jumps (top QPs only)"},
      {"nak_seq_err", field<&rg_qp_dir::nak_seq_err>, "roceguard_qp_naks_total",
       "AETH NAKs of the QP by type (top QPs only)", "type", "seq_err"},
      {"nak_other", field<&rg_qp_dir::nak_other>, "roceguard_qp_naks_total", "AETH NAKs of the QP by type (top QPs only)",
       "type", "other"},
      {"rnr_nak", field<&rg_qp_dir::rnr_nak>, "roceguard_qp_naks_total", "AETH NAKs of the QP by type (top QPs only)",
       "type", "rnr"},
      {"cnp", field<&rg_qp_dir::cnp>, "roceguard_qp_cnp_packets_total", "CNPs of the QP (top QPs only)"},
      {"ecn_ce", field<&rg_qp_dir::ecn_ce>, "roceguard_qp_ecn_ce_packets_total", "ECN CE packets of the QP (top QPs only)"},
      // A PSN, not a count: no counter family.
      {"max_psn", field<&rg_qp_dir::max_psn>},
  };
  return fields;
}

nlohmann::json qp_dir_json(const rg_qp_dir& d) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& f : qp_fields()) out[std::string(f.name)] = f.value(d);
  return out;
}

std::string address_text(uint32_t family, const uint8_t* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, addr, buf, sizeof(buf))) return "";
  return buf;
}

std::string interface_name(uint32_t ifindex, const InterfaceNames& names) {
  if (auto it = names.find(ifindex); it != names.end()) return it->second;
  char buf[IF_NAMESIZE] = {};
  return if_indextoname(ifindex, buf) ? std::string(buf) : std::to_string(ifindex);
}

nlohmann::json counter_row_json(const CounterRow& row, const std::string& ifname, bool with_zero) {
  nlohmann::json events = nlohmann::json::object();
  for (size_t e = 0; e < RG_EV_MAX; ++e) {
    if (!with_zero && !row.ev[e].packets && !row.ev[e].bytes) continue;
    events[std::string(event_name(static_cast<rg_event>(e)).name)] = {{"packets", row.ev[e].packets},
                                                                      {"bytes", row.ev[e].bytes}};
  }
  return {{"ifindex", row.ifindex},
          {"interface", ifname},
          {"direction", std::string(direction_name(row.direction))},
          {"events", events}};
}

}  // namespace rg
