#include "metrics/presentation.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <net/if.h>
#include <sys/socket.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "common/text.h"
#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "dataplane/state.h"

namespace rg {

uint64_t qp_badness(const QpState& s) {
  uint64_t n = 0;
  for (const auto& d : s.dir) n += uint64_t{d.retransmits} + d.lost;  // 32-bit counts, summed in 64
  return n;
}

uint64_t qp_packets(const QpState& s) {
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
      {"max_psn", [](const rg_qp_dir& d) -> uint64_t { return d.max_psn; }},
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
  if (auto it = names.find(ifindex); it != names.end()) return printable(it->second);
  char buf[IF_NAMESIZE] = {};
  return if_indextoname(ifindex, buf) ? printable(buf) : std::to_string(ifindex);
}

uint64_t tunnel_window_holes(const rg_tunnel_stream& s) {
  uint64_t arrived = 0;
  for (uint64_t w : s.window) arrived += static_cast<uint64_t>(std::popcount(w));
  return RG_TUNNEL_WINDOW - arrived;
}

uint64_t tunnel_stream_lost(const rg_tunnel_stream& s, uint64_t now_ns) {
  const bool settled = s.received && now_ns > s.last_ns && now_ns - s.last_ns >= RG_TUNNEL_SETTLE_NS;
  return s.lost + (settled ? tunnel_window_holes(s) : 0);
}

TunnelShield tunnel_shield(const TunnelPeer& t) {
  TunnelShield s;
  s.copies = t.ev[RG_PEER_EV_SHIELD_COPIES].packets;
  s.extra_wan_bytes = t.ev[RG_PEER_EV_SHIELD_COPIES].bytes;
  s.eliminated = t.ev[RG_PEER_EV_SHIELD_ELIMINATED].packets;
  s.copy_errors = t.ev[RG_PEER_EV_SHIELD_COPY_ERROR].packets;
  s.uncopied = t.ev[RG_PEER_EV_SHIELD_UNCOPIED].packets;
  s.residual_lost = t.lost;
  return s;
}

double tunnel_delay_bucket_le(size_t k) { return static_cast<double>(uint64_t{1} << k) * 1e-6; }

uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

// The configuration in the attach record, null when there is none.
nlohmann::json recorded_config(const std::string& pin_path) {
  std::optional<State> st;
  try {
    st = read_state(pin_path);
  } catch (const std::exception&) {
    return nullptr;  // `status` names the problem; counters still show by slot
  }
  if (!st || !st->config.is_object()) return nullptr;
  return st->config;
}

}  // namespace

std::vector<std::string> peer_names(const std::string& pin_path) {
  std::vector<std::string> names;
  const nlohmann::json config = recorded_config(pin_path);
  if (!config.is_object()) return names;
  const auto tunnel = config.find("tunnel");
  if (tunnel == config.end() || !tunnel->is_object()) return names;
  const auto peers = tunnel->find("peer");
  if (peers == tunnel->end() || !peers->is_array()) return names;
  std::vector<rg_peer> ids;
  for (const auto& p : *peers) {
    const auto name = p.is_object() ? p.find("name") : p.end();
    names.push_back(p.is_object() && name != p.end() && name->is_string() ? name->get<std::string>() : "");
    rg_peer id{};
    const auto remote = p.is_object() ? p.find("remote") : p.end();
    const auto vni = p.is_object() ? p.find("vni") : p.end();
    // The recorded address as the loader wrote it: IPv4 in the first 4 bytes.
    if (remote != p.end() && remote->is_string() && vni != p.end() && vni->is_number_integer()) {
      const std::string text = remote->get<std::string>();
      if (inet_pton(AF_INET, text.c_str(), id.remote) == 1)
        id.family = AF_INET;
      else if (inet_pton(AF_INET6, text.c_str(), id.remote) == 1)
        id.family = AF_INET6;
      id.vni = vni->get<uint32_t>();
    }
    ids.push_back(id);
  }
  // A peer's slot follows its identity (same_peer), which rg_peers holds;
  // without that map, or a record that names no identity (written before
  // slots followed it), slots are named in order.
  const bool identified = std::any_of(ids.begin(), ids.end(), [](const rg_peer& id) { return id.family != 0; });
  if (!identified) return names;
  const int fd = bpf_obj_get((pin_path + "/" + kMapPeers).c_str());
  if (fd < 0) return names;
  std::vector<std::string> by_slot;
  for (uint32_t slot = 0; slot < RG_MAX_PEERS; ++slot) {
    rg_peer v{};
    if (bpf_map_lookup_elem(fd, &slot, &v) != 0 || !v.family) continue;
    for (size_t i = 0; i < ids.size(); ++i)
      if (same_peer(v, ids[i])) {
        by_slot.resize(std::max<size_t>(by_slot.size(), slot + 1));
        by_slot[slot] = names[i];
      }
  }
  close(fd);
  return by_slot;
}

std::vector<std::string> recorded_shielded_peers(const std::string& pin_path) {
  std::vector<std::string> out;
  const nlohmann::json config = recorded_config(pin_path);
  if (!config.is_object() || !config.contains("tunnel") || !config["tunnel"].is_object()) return out;
  const nlohmann::json& tunnel = config["tunnel"];
  const std::string fallback = tunnel.value("shield", nlohmann::json("off")).is_string()
                                   ? tunnel.value("shield", std::string("off"))
                                   : "off";
  const auto peers = tunnel.find("peer");
  if (peers == tunnel.end() || !peers->is_array()) return out;
  for (const auto& p : *peers) {
    if (!p.is_object()) continue;
    const auto own = p.find("shield");
    const std::string shield = own != p.end() && own->is_string() ? own->get<std::string>() : fallback;
    if (shield != "off") out.push_back(p.value("name", std::string()));
  }
  return out;
}

std::vector<std::pair<std::string, bool>> recorded_auto_shield_peers(const std::string& pin_path) {
  std::vector<std::pair<std::string, bool>> out;
  const nlohmann::json config = recorded_config(pin_path);
  if (!config.is_object() || !config.contains("tunnel") || !config["tunnel"].is_object()) return out;
  const nlohmann::json& tunnel = config["tunnel"];
  const auto peers = tunnel.find("peer");
  if (peers == tunnel.end() || !peers->is_array()) return out;
  for (const auto& p : *peers) {
    if (!p.is_object()) continue;
    const auto shield = p.find("shield");
    if (shield == p.end() || !shield->is_string() || *shield != "auto") continue;
    const auto key = p.find("key_file");
    out.emplace_back(p.value("name", std::string()), key != p.end() && key->is_string());
  }
  return out;
}

std::optional<nic::Profile> recorded_nic_profile(const std::string& pin_path) {
  const nlohmann::json config = recorded_config(pin_path);
  if (!config.is_object()) return std::nullopt;
  const auto table = config.find("nic");
  if (table == config.end() || !table->is_object()) return std::nullopt;
  nic::Profile p;
  bool any = false;
  for (const auto& [key, v] : table->items()) {
    nic::Value value;
    if (v.is_number_integer())
      value = v.get<int64_t>();
    else if (v.is_string())
      value = v.get<std::string>();
    else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_string(); }))
      value = v.get<std::vector<std::string>>();
    else
      continue;  // an unset option (null)
    // The record was validated when it was written; a key this roceguard
    // does not know keeps its default.
    if (!nic::set(p, key, value)) any = true;
  }
  if (!any) return std::nullopt;
  return p;
}

std::vector<TunnelPeer> tunnel_peers(const std::vector<PeerStatsRow>& stats,
                                     const std::vector<TunnelStreamRow>& streams,
                                     const std::vector<std::string>& names, uint64_t now_ns) {
  std::map<uint32_t, TunnelPeer> by_slot;
  auto peer = [&](uint32_t slot) -> TunnelPeer& {
    auto [it, fresh] = by_slot.try_emplace(slot);
    if (fresh) {
      it->second.slot = slot;
      it->second.name = slot < names.size() && !names[slot].empty() ? names[slot] : std::to_string(slot);
    }
    return it->second;
  };
  for (const auto& row : stats) {
    TunnelPeer& t = peer(row.slot);
    t.ev = row.ev;
    // Evicted streams count on as they were.
    const rg_tunnel_retired& r = row.retired;
    t.evicted = r.evicted;
    t.received += r.received;
    t.lost += r.lost;
    t.reordered += r.reordered;
    t.duplicated += r.duplicated;
    t.resyncs += r.resyncs;
    for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) t.delay[k] += r.delay[k];
    t.delay_sum_ns += r.delay_sum_ns;
    for (size_t k = 0; k < RG_TUNNEL_RUN_BUCKETS; ++k) t.loss_runs[k] += r.loss_runs[k];
    // Each copied number of an untracked stream reaches the host once per
    // copy that arrives: half of those arrivals are second copies (all of
    // them when no copy was lost).
    t.duplicates_delivered += r.duplicates_delivered + row.guard.untracked_copied / 2;
    t.auth_bad = row.guard.auth_bad;
    t.auth_missing = row.guard.auth_missing;
    t.auth_next = row.guard.auth_next;
    t.pq = row.pq;
    t.pq_backlog_ns = row.pq.empty_at_ns > now_ns ? row.pq.empty_at_ns - now_ns : 0;
  }
  for (const auto& row : streams) {
    TunnelPeer& t = peer(row.key.peer);
    const rg_tunnel_stream& s = row.state;
    const uint64_t lost = tunnel_stream_lost(s, now_ns);
    ++t.streams;
    t.received += s.received;
    t.lost += lost;
    t.unsettled += s.lost + tunnel_window_holes(s) - lost;
    t.reordered += s.reordered;
    t.duplicated += s.duplicated;
    t.resyncs += s.resyncs;
    TunnelPeer one;
    for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) one.delay[k] = s.delay[k];
    one.delay_sum_ns = s.delay_sum_ns;
    if (s.delay_floor_at) {
      one.floor_streams = 1;
      one.floor_min_us = one.floor_max_us = s.delay_floor_us;
    }
    add_tunnel_delays(t, one);
    for (size_t k = 0; k < RG_TUNNEL_RUN_BUCKETS; ++k) t.loss_runs[k] += s.loss_runs[k];
    if (s.epoch)
      ++t.epoch_streams;
    else
      t.duplicates_delivered += s.duplicated;
  }
  std::vector<TunnelPeer> out;
  for (auto& [slot, t] : by_slot) out.push_back(std::move(t));
  return out;
}

std::string tunnel_loss_run_label(size_t k) {
  const uint64_t lo = uint64_t{1} << k;
  if (k + 1 >= RG_TUNNEL_RUN_BUCKETS) return std::to_string(lo) + "+";
  return k == 0 ? "1" : std::to_string(lo) + "-" + std::to_string((lo << 1) - 1);
}

uint64_t tunnel_delay_count(const TunnelPeer& t) {
  uint64_t n = 0;
  for (uint64_t c : t.delay) n += c;
  return n;
}

std::optional<double> tunnel_delay_quantile_us(const TunnelPeer& t, double q) {
  const uint64_t count = tunnel_delay_count(t);
  if (!count) return std::nullopt;
  const double rank = q * static_cast<double>(count);
  uint64_t below = 0;
  for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) {
    const uint64_t in = t.delay[k];
    if (!in || static_cast<double>(below + in) < rank) {
      below += in;
      continue;
    }
    const double lo = k ? tunnel_delay_bucket_le(k - 1) * 1e6 : 0;
    if (k + 1 == RG_TUNNEL_DELAY_BUCKETS) return lo;
    const double hi = tunnel_delay_bucket_le(k) * 1e6;
    return lo + (hi - lo) * (rank - static_cast<double>(below)) / static_cast<double>(in);
  }
  return tunnel_delay_bucket_le(RG_TUNNEL_DELAY_BUCKETS - 2) * 1e6;  // not reached: q <= 1
}

void add_tunnel_delays(TunnelPeer& sum, const TunnelPeer& t) {
  for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) sum.delay[k] += t.delay[k];
  sum.delay_sum_ns += t.delay_sum_ns;
  if (!t.floor_streams) return;
  sum.floor_min_us = sum.floor_streams ? std::min(sum.floor_min_us, t.floor_min_us) : t.floor_min_us;
  sum.floor_max_us = sum.floor_streams ? std::max(sum.floor_max_us, t.floor_max_us) : t.floor_max_us;
  sum.floor_streams += t.floor_streams;
}

// Streams without a floor were written by a build before floors, whose
// histogram holds the one-way delay itself: a floor of 0 reads them so.
std::optional<double> tunnel_one_way_mean_us(const TunnelPeer& t) {
  const uint64_t count = tunnel_delay_count(t);
  if (!count || tunnel_clocks(t) == TunnelClocks::kNotComparable) return std::nullopt;
  return static_cast<double>(t.floor_min_us) + static_cast<double>(t.delay_sum_ns) / 1e3 / static_cast<double>(count);
}

TunnelClocks tunnel_clocks(const TunnelPeer& t, std::string* why) {
  if (!t.floor_streams) return TunnelClocks::kUnknown;
  auto seconds = [](int64_t us) { return fmt::format("{:.6f} s", static_cast<double>(us) * 1e-6); };
  if (t.floor_min_us < 0) {
    if (why)
      *why = "stamps from the peer arrive " + seconds(-t.floor_min_us) +
             " before they were sent: its clock is ahead of this gateway's";
    return TunnelClocks::kNotComparable;
  }
  if (t.floor_max_us > kTunnelFloorPlausibleUs) {
    if (why)
      *why = "the one-way delay's floor is " + seconds(t.floor_max_us) +
             ", longer than any path: the peer's clock is behind this gateway's";
    return TunnelClocks::kNotComparable;
  }
  return TunnelClocks::kComparable;
}

std::optional<double> tunnel_rtt_us(const TunnelPeer& t) {
  const auto queueing = tunnel_delay_quantile_us(t, kTunnelRttQuantile);
  if (!queueing || tunnel_clocks(t) == TunnelClocks::kNotComparable) return std::nullopt;
  return 2 * (static_cast<double>(t.floor_max_us) + *queueing);
}

nlohmann::json tunnel_peer_json(const TunnelPeer& t) {
  nlohmann::json events = nlohmann::json::object();
  for (size_t e = 0; e < RG_PEER_EV_MAX; ++e)
    events[std::string(peer_event_name(static_cast<rg_peer_event>(e)).name)] = {{"packets", t.ev[e].packets},
                                                                                {"bytes", t.ev[e].bytes}};
  nlohmann::json buckets = nlohmann::json::array();
  uint64_t cumulative = 0;
  for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) {
    cumulative += t.delay[k];
    buckets.push_back({{"le", k + 1 < RG_TUNNEL_DELAY_BUCKETS ? nlohmann::json(tunnel_delay_bucket_le(k))
                                                                : nlohmann::json("+Inf")},
                       {"count", cumulative}});
  }
  // The round trip and the ACK timeout fitting it; null without delays or
  // comparable clocks.
  nlohmann::json p99 = nullptr, rtt = nullptr, fit = nullptr, floor = nullptr, clocks_why = nullptr;
  std::string why;
  const TunnelClocks clocks = tunnel_clocks(t, &why);
  nlohmann::json clocks_json = nullptr;
  if (clocks == TunnelClocks::kComparable) clocks_json = "comparable";
  if (clocks == TunnelClocks::kNotComparable) {
    clocks_json = "not comparable";
    clocks_why = why;
  }
  if (t.floor_streams)
    floor = {{"min_seconds", static_cast<double>(t.floor_min_us) * 1e-6},
             {"max_seconds", static_cast<double>(t.floor_max_us) * 1e-6}};
  if (const auto q = tunnel_delay_quantile_us(t, kTunnelRttQuantile)) p99 = *q * 1e-6;
  if (const auto r = tunnel_rtt_us(t)) {
    rtt = *r * 1e-6;
    if (const auto a = nic::ack_timeout_for_rtt(*r))
      fit = {{"exponent", a->exponent}, {"seconds", a->effective_us * 1e-6}};
  }
  nlohmann::json runs = nlohmann::json::array();
  for (size_t k = 0; k < RG_TUNNEL_RUN_BUCKETS; ++k)
    runs.push_back({{"length", tunnel_loss_run_label(k)}, {"count", t.loss_runs[k]}});
  const TunnelShield shield = tunnel_shield(t);
  return {{"peer", t.name},
          {"slot", t.slot},
          {"events", events},
          {"shield", {{"copies", shield.copies},
                      {"extra_wan_bytes", shield.extra_wan_bytes},
                      {"eliminated", shield.eliminated},
                      {"copy_errors", shield.copy_errors},
                      {"uncopied", shield.uncopied},
                      {"residual_lost", shield.residual_lost}}},
          {"congestion", {{"queued_packets", t.pq.packets},
                          {"queued_bytes", t.pq.bytes},
                          {"marked", t.pq.marked},
                          {"unmarkable", t.pq.not_ect},
                          {"capped", t.pq.capped},
                          {"cnps_sent", t.pq.cnps},
                          {"cnps_refused", t.pq.cnp_errors},
                          {"backlog_us", t.pq_backlog_ns / 1000}}},
          {"streams", t.streams},
          {"streams_evicted", t.evicted},
          {"auth", {{"bad_mac", t.auth_bad}, {"no_mac", t.auth_missing}, {"next_key", t.auth_next}}},
          {"received", t.received},
          {"lost", t.lost},
          {"unsettled", t.unsettled},
          {"reordered", t.reordered},
          {"duplicated", t.duplicated},
          {"resyncs", t.resyncs},
          {"loss_runs", runs},
          {"peer_eliminates", t.epoch_streams > 0},
          {"duplicates_delivered", t.duplicates_delivered},
          {"delay", {{"count", cumulative}, {"sum_seconds", static_cast<double>(t.delay_sum_ns) * 1e-9},
                     {"buckets", buckets}, {"p99_seconds", p99}, {"floor", floor},
                     {"clocks", clocks_json}, {"clocks_why", clocks_why}}},
          {"rtt_estimate_seconds", rtt},
          {"ack_timeout_fit", fit}};
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
