// What `stats`, /metrics and the lab show of the maps, decided once: which
// QPs count as the worst, what each per-QP field is called (in JSON and as a
// Prometheus family), how addresses and interfaces are written, and what a
// tunnel peer's sequence streams add up to.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataplane/maps.h"
#include "nic/profile.h"

namespace rg {

// Retransmits plus estimated losses over both directions: what the QP lost
// to the network.
uint64_t qp_badness(const QpState& s);
uint64_t qp_packets(const QpState& s);

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
// ifindex as a number: a deleted interface keeps its counters. Written as
// text (common/text.h): a byte of a name that is not UTF-8 shows as \xNN.
std::string interface_name(uint32_t ifindex, const InterfaceNames& names = {});

// One tunnel peer as a gateway sees it: its counters (both directions) and
// the sequence streams it receives from the peer, summed.
struct TunnelPeer {
  uint32_t slot = 0;
  std::string name;  // the configured name, else the slot number
  std::array<rg_counter, RG_PEER_EV_MAX> ev{};
  uint64_t streams = 0;
  uint64_t evicted = 0;  // streams evicted idle; their counts stay in the rest
  uint64_t received = 0;
  uint64_t lost = 0;       // settled, and holes of streams silent RG_TUNNEL_SETTLE_NS
  uint64_t unsettled = 0;  // holes of the other streams: late, or lost once settled
  uint64_t reordered = 0;
  uint64_t duplicated = 0;
  uint64_t resyncs = 0;
  // The queueing delay (the one-way delay above its stream's floor), per
  // bucket, not cumulative, and summed.
  std::array<uint64_t, RG_TUNNEL_DELAY_BUCKETS> delay{};
  uint64_t delay_sum_ns = 0;
  // The floors of the streams that have one (floor_streams): the one-way
  // delay plus the offset between the two gateways' clocks, lowest and
  // highest, in microseconds.
  uint64_t floor_streams = 0;
  int64_t floor_min_us = 0;
  int64_t floor_max_us = 0;
  std::array<uint64_t, RG_TUNNEL_RUN_BUCKETS> loss_runs{};  // gaps by length as they opened
  // Streams the peer numbers in an epoch: a roceguard that knows the loss
  // shield, and so drops the second copy of what this gateway sends it.
  uint64_t epoch_streams = 0;
  // Duplicates that reached the host behind this gateway, not eliminated:
  // of streams without an epoch, and second copies of streams the table
  // had no room for.
  uint64_t duplicates_delivered = 0;
  // Options of a peer with a key that were ignored (rg_peer_guard): a MAC
  // no key gives, no MAC; and those the second key verified (a rotation).
  uint64_t auth_bad = 0;
  uint64_t auth_missing = 0;
  uint64_t auth_next = 0;
  // The congestion loop's phantom queue towards the peer (rg_peer_pq), and
  // its backlog in time when read: how far its end lies ahead of the clock,
  // with pacing how far ahead of now the next frame to the peer may leave.
  rg_peer_pq pq{};
  uint64_t pq_backlog_ns = 0;
};

// The lengths bucket k of TunnelPeer::loss_runs counts: "1", "2-3", ..., "128+".
std::string tunnel_loss_run_label(size_t k);

// What the loss shield did on one peer's tunnel, as stats and the exporter
// show it. The sending gateway counts the copies, the receiving one the
// copies it dropped; what still went missing there is the residual loss:
// the sequence numbers of which both copies were lost (the streams' lost).
struct TunnelShield {
  uint64_t copies = 0;
  uint64_t extra_wan_bytes = 0;
  uint64_t eliminated = 0;
  uint64_t copy_errors = 0;
  uint64_t uncopied = 0;
  uint64_t residual_lost = 0;
  // Any shield counter moved: this gateway shields towards the peer, or
  // the peer shields towards it.
  bool active() const { return copies || eliminated || copy_errors || uncopied; }
};
TunnelShield tunnel_shield(const TunnelPeer& t);

// Holes in a stream's window (RG_TUNNEL_WINDOW numbers behind its newest).
uint64_t tunnel_window_holes(const rg_tunnel_stream& s);
// What the stream lost by now (CLOCK_MONOTONIC ns): what the data path
// settled, and its window's holes once the stream was silent long enough
// that the data path would count them too on the next arrival.
uint64_t tunnel_stream_lost(const rg_tunnel_stream& s, uint64_t now_ns);
// Upper bound of delay bucket k in seconds; the last bucket has none (+Inf).
double tunnel_delay_bucket_le(size_t k);

// Stamped arrivals from the peer (the queueing delay histogram's count).
uint64_t tunnel_delay_count(const TunnelPeer& t);

// Whether the peer's send stamps and this gateway's clock can be compared,
// so that the floor is the path's one-way delay: not when a stamp arrived
// before it was sent (a negative floor), nor when the floor is longer than
// any path (kTunnelFloorPlausibleUs): the two clocks differ (a TAI offset
// set on one gateway only, CLOCK_MONOTONIC on kernels before 6.1). The
// queueing delay is a difference and holds either way; the one-way delay,
// the round trip and the ACK timeout advice from it do not.
enum class TunnelClocks { kUnknown, kComparable, kNotComparable };
inline constexpr int64_t kTunnelFloorPlausibleUs = 1'000'000;
// why: for kNotComparable, what shows it, with the floor.
TunnelClocks tunnel_clocks(const TunnelPeer& t, std::string* why = nullptr);

// The q-quantile (0 < q <= 1) of the queueing delay from the peer, in
// microseconds, read from the histogram as Prometheus's histogram_quantile
// reads one: linearly within the bucket the rank falls in (bucket k spans
// 2^(k-1) to 2^k us, bucket 0 from 0); in the last bucket, its lower bound.
// nullopt when no delay arrived.
std::optional<double> tunnel_delay_quantile_us(const TunnelPeer& t, double q);
// The mean one-way delay from the peer, in microseconds: the lowest floor
// plus the mean queueing delay. nullopt when no delay arrived or the clocks
// are not comparable.
std::optional<double> tunnel_one_way_mean_us(const TunnelPeer& t);
// t's delays (histogram, sum and floors) added to sum's: several peers as one.
void add_tunnel_delays(TunnelPeer& sum, const TunnelPeer& t);
// The round trip of the path through the tunnel, for fitting the NIC's ACK
// timeout to it (nic::ack_timeout_for_rtt): twice the 99th percentile of the
// one-way delay from the peer, the highest floor plus the 99th percentile of
// the queueing delay. A gateway measures only the way in, so the way back is
// taken to be as long; a high percentile rather than the mean, since a
// timeout must cover the slow ACKs, not the typical one. nullopt when no
// delay arrived or the clocks are not comparable (tunnel_clocks). Without a
// floor (streams of a build before floors) the histogram is the one-way delay.
inline constexpr double kTunnelRttQuantile = 0.99;
std::optional<double> tunnel_rtt_us(const TunnelPeer& t);

// The configured peer names by slot: the attach record's peers under
// pin_path, each at the rg_peers slot that holds its identity (empty when
// there is no record).
std::vector<std::string> peer_names(const std::string& pin_path);

// Peers with any counter or stream, by slot; now_ns is CLOCK_MONOTONIC.
std::vector<TunnelPeer> tunnel_peers(const std::vector<PeerStatsRow>& stats,
                                     const std::vector<TunnelStreamRow>& streams,
                                     const std::vector<std::string>& names, uint64_t now_ns);
uint64_t monotonic_now_ns();

// The [nic] profile of the configuration in the attach record under
// pin_path: the defaults with the record's nic keys on top. nullopt when
// there is no record or it has no [nic] keys.
std::optional<nic::Profile> recorded_nic_profile(const std::string& pin_path);
// The running configuration's peers (the attach record) whose loss shield
// is on, by name.
std::vector<std::string> recorded_shielded_peers(const std::string& pin_path);
// The peers of the running configuration shielded "auto", each with
// whether it has a key_file.
std::vector<std::pair<std::string, bool>> recorded_auto_shield_peers(const std::string& pin_path);

nlohmann::json tunnel_peer_json(const TunnelPeer& t);

// One counter row as JSON: interface, ifindex, direction and per-event
// packets/bytes; events that are zero only when with_zero.
nlohmann::json counter_row_json(const CounterRow& row, const std::string& ifname, bool with_zero);

}  // namespace rg
