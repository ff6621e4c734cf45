// Per-program cost: nanoseconds per packet for each path of roceguard's TC
// and XDP programs, next to an empty program of the same type (the floor).
//
// Method. BPF_PROG_TEST_RUN with repeat > 1 runs the program again on the
// same buffer: an skb encapsulated in the first round would be
// re-encapsulated in the second, a decapsulated XDP frame would be parsed
// as the inner frame, a re-marked DSCP would already be 46. So every
// measured run is a separate BPF_PROG_TEST_RUN with repeat = 1 on a fresh
// copy of the input (the PSN advancing as on the wire), and the figure is
// the kernel's own duration of that run. It includes the test-run timer and
// dispatch, which the empty program pays too: subtracting the floor leaves
// the program's own cost. Cases are interleaved round by round so a noisy
// neighbour hits all of them alike.
//
// BPF_F_TEST_XDP_LIVE_FRAMES is not used: it is meant for redirecting
// programs (traffic generators); roceguard answers XDP_PASS, and live frames
// passed on are injected into the stack, whose cost would then be measured.
// The XDP fast path's rows do redirect: without live frames the run ends at
// the verdict, so they time the program up to its bpf_redirect_map and not
// the transmit that follows (bench_veth_throughput's geneve-fwd has it all).
//
//   bench_prog_cost [--rounds N] [--calls N] [--json FILE]
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <cstring>
#include <memory>

#include "bench_util.h"
#include "dataplane/maps.h"
#include "dataplane/names.h"
#include "dataplane/nexthop_lease.h"
#include "dataplane/tunnel_auth.h"
#include "empty.skel.h"
#include "lab/proc.h"
#include "roceguard.skel.h"

namespace {

using namespace rg::bench;
using rg::test::Bytes;
using rg::test::PacketBuilder;

Bytes roce_frame(uint8_t tos, size_t payload) {
  rg::test::Bth bth;
  bth.opcode = rg::test::kOpSendOnly;
  bth.dest_qp = 0x000201;
  // From a host on kDev's LAN to kDev, as a gateway receives it.
  return PacketBuilder()
      .eth(kDevMac, kHostMac)
      .ipv4(kHost4, kRemoteHost4)
      .tos(tos)
      .udp(49152, rg::test::kRoceV2Port)
      .bth(bth)
      .payload(payload)
      .build();
}

// The key of the rows that authenticate the option.
constexpr rg::TunnelKey kBenchKey{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// The MAC the bench peer (kPeer4 to kLocal4) gives number seq of stream.
uint64_t bench_peer_mac(uint32_t stream, uint32_t seq) {
  const auto src = rg::parse_address(kPeer4)->bytes, dst = rg::parse_address(kLocal4)->bytes;
  return rg::tunnel_option_mac(kBenchKey, src.data(), dst.data(), kVni, stream, seq, std::nullopt);
}

// With seq_option, the tunnel sequence option as gateway A writes it (its
// number is advanced per run like the PSN), in stream (epoch, CPU, lane);
// with mac, signed with kBenchKey.
Bytes geneve_frame(uint8_t inner_tos, size_t payload, bool seq_option = false, uint32_t stream = 0,
                   bool mac = false) {
  rg::test::Bth bth;
  bth.dest_qp = 0x000201;
  Bytes inner = PacketBuilder()
                    .ipv4(kHost4, kRemoteHost4)
                    .tos(inner_tos)
                    .udp(49152, rg::test::kRoceV2Port)
                    .bth(bth)
                    .payload(payload)
                    .build();
  return PacketBuilder()
      .ipv4(kPeer4, kLocal4)
      .udp(50000, rg::test::kGenevePort)
      .geneve(kVni, seq_option ? rg::test::tunnel_seq_option(
                                     stream, 0, std::nullopt, RG_TUNNEL_OPT_CLASS_DEFAULT, RG_TUNNEL_OPT_TYPE_DEFAULT,
                                     mac ? std::optional<uint64_t>(bench_peer_mac(stream, 0)) : std::nullopt)
                             : Bytes{})
      .payload(inner)
      .build();
}

Bytes other_udp_frame(size_t payload) {
  return PacketBuilder().ipv4(kHost4, kRemoteHost4).udp(40000, 53).payload(payload).build();
}

struct Case {
  std::string name;
  std::string hook;  // "tc" or "xdp"
  int prog_fd;
  Bytes frame;
  bool roce;
  bool geneve;
  int size_change;  // expected data_size_out - data_size_in
  bool floor = false;
  std::vector<double> kernel_ns, wall_ns;
  uint32_t psn = 0;
  double repeat_ns = -1;  // repeat > 1, only where the input is not modified
  size_t seq_at = 0;      // offset of the tunnel sequence number in frame, if any
  bool seq_fixed = false;  // every run the same number: after the first, each is a second copy
  bool seq_mac = false;    // the option's MAC follows the number (kBenchKey), made anew for each
  std::function<void()> before;  // before each run, untimed

  Case(std::string n, std::string h, int fd, Bytes f, bool is_roce, bool is_geneve, int change, bool is_floor = false)
      : name(std::move(n)), hook(std::move(h)), prog_fd(fd), frame(std::move(f)), roce(is_roce), geneve(is_geneve),
        size_change(change), floor(is_floor) {}
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"roceguard per-program cost via BPF_PROG_TEST_RUN"};
  unsigned rounds = 20, calls = 2000;
  size_t payload = 1024;
  std::string json_path = "prog_cost.json";
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1u, 1000u));
  app.add_option("--calls", calls, "test runs per case and round")->check(CLI::Range(10u, 1000000u));
  app.add_option("--payload", payload, "RoCE payload bytes")->check(CLI::Range(0, 4096));
  app.add_option("--json", json_path, "JSON output");
  CLI11_PARSE(app, argc, argv);

  try {
    quiet_libbpf();
    const int ifindex = enter_private_netns();
    Object remark(config(RG_CFG_F_REMARK));
    Object remark_account(config(RG_CFG_F_REMARK | RG_CFG_F_ACCOUNT));
    Object full(config(RG_CFG_F_DEFAULT));
    Object full_seq(config(RG_CFG_F_DEFAULT | RG_CFG_F_TUNNEL_SEQ));
    // The same, with every number carrying the option's extension (20
    // bytes, as every packet did before the option shrank to 12): each
    // run starts the lanes' numbering again at 0, a number that has it.
    Object full_seq_ext(config(RG_CFG_F_DEFAULT | RG_CFG_F_TUNNEL_SEQ));
    auto restart_numbering = [&full_seq_ext] {
      static std::vector<rg_peer_stats> zero(static_cast<size_t>(libbpf_num_possible_cpus()));
      const uint32_t slot = 0;
      if (bpf_map__update_elem(full_seq_ext.skel()->maps.rg_peer_stats, &slot, sizeof(slot), zero.data(),
                               zero.size() * sizeof(rg_peer_stats), 0))
        throw std::runtime_error("rg_peer_stats update: " + std::string(std::strerror(errno)));
    };
    // The option authenticated: the bench peer's tunnel has a key (kBenchKey).
    Object full_seq_key(config(RG_CFG_F_DEFAULT | RG_CFG_F_TUNNEL_SEQ | RG_CFG_F_TUNNEL_AUTH));
    {
      const uint32_t slot = 0;
      rg_peer p{};
      if (bpf_map__lookup_elem(full_seq_key.skel()->maps.rg_peers, &slot, sizeof(slot), &p, sizeof(p), 0))
        throw std::runtime_error("rg_peers lookup: " + std::string(std::strerror(errno)));
      const rg_peer_auth a = rg::peer_auth_of(p.local, p.remote, p.vni, {kBenchKey});
      if (bpf_map__update_elem(full_seq_key.skel()->maps.rg_peer_auth, &slot, sizeof(slot), &a, sizeof(a), 0))
        throw std::runtime_error("rg_peer_auth update: " + std::string(std::strerror(errno)));
    }
    // The loss shield: every RoCE packet copied (bpf_clone_redirect, the
    // copy sent through the device for real), and the receiving side's
    // elimination of the second copy.
    Object shielded(config(RG_CFG_F_DEFAULT | RG_CFG_F_TUNNEL_SEQ));
    {
      const uint32_t slot = 0;
      rg_peer p{};
      if (bpf_map__lookup_elem(shielded.skel()->maps.rg_peers, &slot, sizeof(slot), &p, sizeof(p), 0))
        throw std::runtime_error("rg_peers lookup: " + std::string(std::strerror(errno)));
      p.flags |= RG_PEER_F_SHIELD_ALL;
      if (bpf_map__update_elem(shielded.skel()->maps.rg_peers, &slot, sizeof(slot), &p, sizeof(p), 0))
        throw std::runtime_error("rg_peers update: " + std::string(std::strerror(errno)));
    }
    // The congestion loop: each encapsulated frame through the peer's
    // phantom queue, drained at 50 Mbit/s, so the backlog stands above the
    // marking threshold and every frame (ECT(0)) is marked CE.
    Object congested(config(RG_CFG_F_DEFAULT | RG_CFG_F_TUNNEL_SEQ | RG_CFG_F_CONGESTION));
    // And the same on the XDP fast path (below), without the option.
    Object forward_congested(config(RG_CFG_F_DEFAULT | RG_CFG_F_XDP_FORWARD | RG_CFG_F_CONGESTION));
    for (const Object* o : {&congested, &forward_congested}) {
      const uint32_t slot = 0;
      rg_peer_cc cc{};
      cc.until_ns = UINT64_MAX;
      cc.ps_per_byte = 160'000;  // 8 bits at 50 Mbit/s
      cc.mark_min_ns = 200'000;
      cc.mark_max_ns = 2'000'000;
      cc.mark_scale = static_cast<uint32_t>((1ull << 32) / (cc.mark_max_ns - cc.mark_min_ns));
      cc.cap_ns = 20'000'000;
      cc.flags = RG_CC_F_MARK_CE;
      if (bpf_map__update_elem(o->skel()->maps.rg_peer_cc, &slot, sizeof(slot), &cc, sizeof(cc), 0))
        throw std::runtime_error("rg_peer_cc update: " + std::string(std::strerror(errno)));
    }
    // The same program with the next-hop cache leased, as `roceguard run`
    // grants it (the benchmark renews it every round, as the daemon does).
    Object cached(config(RG_CFG_F_DEFAULT));
    rg::PeerConfig bench_peer;
    bench_peer.local = *rg::parse_address(kLocal4);
    bench_peer.remote = *rg::parse_address(kPeer4);
    rg::NexthopLeases leases(bpf_map__fd(cached.skel()->maps.rg_nh_leases), {bench_peer});
    leases.invalidate();
    if (leases.granted() != 1) throw std::runtime_error("the route to the bench peer got no next-hop lease");
    Object account(config(RG_CFG_F_ACCOUNT));
    // The XDP fast path (dataplane.xdp_forward): the frame arrives from a
    // RoCE host and the kernel would forward it to the peer's prefix out of
    // the same device, which is the fast path's one target; with and
    // without a next-hop lease.
    rg::lab::run_checked({"ip", "route", "add", "203.0.113.0/24", "via", kPeer4, "dev", kDev});
    Object forward(config(RG_CFG_F_DEFAULT | RG_CFG_F_XDP_FORWARD));
    Object forward_cached(config(RG_CFG_F_DEFAULT | RG_CFG_F_XDP_FORWARD));
    for (const Object* o : {&forward, &forward_cached, &forward_congested}) {
      const uint32_t target = static_cast<uint32_t>(ifindex);
      if (bpf_map__update_elem(o->skel()->maps.rg_xdp_tx, &target, sizeof(target), &target, sizeof(target), 0))
        throw std::runtime_error("rg_xdp_tx update: " + std::string(std::strerror(errno)));
    }
    rg::NexthopLeases forward_leases(bpf_map__fd(forward_cached.skel()->maps.rg_nh_leases), {bench_peer});
    forward_leases.invalidate();
    if (forward_leases.granted() != 1) throw std::runtime_error("the fast path's bench peer got no next-hop lease");
    std::unique_ptr<empty, decltype(&empty__destroy)> floor(empty__open_and_load(), empty__destroy);
    if (!floor) throw std::runtime_error("empty.bpf.o: load failed");
    const int empty_tc = bpf_program__fd(floor->progs.empty_tc);
    const int empty_xdp = bpf_program__fd(floor->progs.empty_xdp);

    const uint8_t host_tos = 26 << 2 | 2;  // AF31 + ECT(0)
    std::vector<Case> cases = {
        {"tc egress: empty program (floor)", "tc", empty_tc, roce_frame(host_tos, payload), true, false, 0, true},
        {"tc egress: DSCP re-mark only", "tc", remark.tc_fd(), roce_frame(host_tos, payload), true, false, 0},
        {"tc egress: DSCP + per-QP accounting", "tc", remark_account.tc_fd(), roce_frame(host_tos, payload), true, false, 0},
        {"tc egress: DSCP + accounting + Geneve encap", "tc", full.tc_fd(), roce_frame(host_tos, payload), true, false, 50},
        {"tc egress: DSCP + accounting + Geneve encap, cached next hop", "tc", cached.tc_fd(),
         roce_frame(host_tos, payload), true, false, 50},
        {"tc egress: non-RoCE pass-through", "tc", full.tc_fd(), other_udp_frame(payload), false, false, 0},
        {"xdp ingress: empty program (floor)", "xdp", empty_xdp, geneve_frame(0, payload), true, true, 0, true},
        {"xdp ingress: Geneve decap + DSCP repair + accounting", "xdp", full.xdp_fd(), geneve_frame(0, payload), true, true, -50},
        {"xdp ingress: accounting only", "xdp", account.xdp_fd(), roce_frame(RG_DEFAULT_DSCP << 2, payload), true, false, 0},
        {"xdp ingress: non-RoCE pass-through", "xdp", full.xdp_fd(), other_udp_frame(payload), false, false, 0},
        // The fast path's own cost is each of these minus "xdp ingress: accounting only".
        {"xdp fast path: forwarded + DSCP + accounting + Geneve encap", "xdp", forward.xdp_fd(),
         roce_frame(host_tos, payload), true, false, 50},
        {"xdp fast path: forwarded + DSCP + accounting + Geneve encap, cached next hop", "xdp",
         forward_cached.xdp_fd(), roce_frame(host_tos, payload), true, false, 50},
        // The sequence option's cost is each of these minus its row without it.
        {"tc egress: DSCP + accounting + Geneve encap + sequence option", "tc", full_seq.tc_fd(),
         roce_frame(host_tos, payload), true, false, 50 + static_cast<int>(sizeof(rg_tunnel_opt))},
        {"tc egress: DSCP + accounting + Geneve encap + sequence option, every number extended (20 B)", "tc",
         full_seq_ext.tc_fd(), roce_frame(host_tos, payload), true, false,
         50 + static_cast<int>(sizeof(rg_tunnel_opt) + sizeof(rg_tunnel_opt_ext))},
        {"xdp ingress: Geneve decap (sequence option tracked) + DSCP repair + accounting", "xdp", full_seq.xdp_fd(),
         geneve_frame(0, payload, true), true, true, -50 - static_cast<int>(sizeof(rg_tunnel_opt))},
    };
    // The sequence number: after UDP, the Geneve base header, and the
    // option's class/type/length and stream words.
    cases.back().seq_at = rg::test::parse(cases.back().frame).l4 + 8 + 8 + 8;
    for (auto& c : cases)
      if (c.prog_fd == full_seq_ext.tc_fd()) c.before = restart_numbering;
    // The MAC's rows: each minus its row without a key above.
    cases.push_back({"tc egress: DSCP + accounting + Geneve encap + sequence option + MAC (key)", "tc",
                     full_seq_key.tc_fd(), roce_frame(host_tos, payload), true, false,
                     50 + static_cast<int>(sizeof(rg_tunnel_opt) + sizeof(rg_tunnel_opt_mac))});
    cases.push_back({"xdp ingress: Geneve decap (sequence option tracked, MAC checked) + DSCP repair + accounting",
                     "xdp", full_seq_key.xdp_fd(), geneve_frame(0, payload, true, 0, true), true, true,
                     -50 - static_cast<int>(sizeof(rg_tunnel_opt) + sizeof(rg_tunnel_opt_mac))});
    cases.back().seq_at = rg::test::parse(cases.back().frame).l4 + 8 + 8 + 8;
    cases.back().seq_mac = true;
    // The shield's rows: each minus its row without the shield above.
    cases.push_back({"tc egress: DSCP + accounting + Geneve encap + sequence option + shield copy (all)", "tc",
                     shielded.tc_fd(), roce_frame(host_tos, payload), true, false,
                     50 + static_cast<int>(sizeof(rg_tunnel_opt))});
    // The congestion loop's rows: minus the sequence option's row above,
    // and minus the fast path's row without it.
    cases.push_back({"tc egress: DSCP + accounting + Geneve encap + sequence option + congestion loop (CE marked)",
                     "tc", congested.tc_fd(), roce_frame(host_tos, payload), true, false,
                     50 + static_cast<int>(sizeof(rg_tunnel_opt))});
    cases.push_back({"xdp fast path: forwarded + DSCP + accounting + Geneve encap + congestion loop (CE marked)",
                     "xdp", forward_congested.xdp_fd(), roce_frame(host_tos, payload), true, false, 50});
    const uint32_t stream = 1u << RG_TUNNEL_EPOCH_SHIFT;  // a sender with epochs: eliminated
    cases.push_back({"xdp ingress: Geneve (sequence option) second copy eliminated", "xdp", shielded.xdp_fd(),
                     geneve_frame(0, payload, true, stream), true, true,
                     -50 - static_cast<int>(sizeof(rg_tunnel_opt))});
    cases.back().seq_at = rg::test::parse(cases.back().frame).l4 + 8 + 8 + 8;
    cases.back().seq_fixed = true;

    auto run_once = [&](Case& c) {
      if (c.before) c.before();
      if (c.seq_at && !c.seq_fixed)
        for (int b = 0; b < 4; ++b) c.frame[c.seq_at + b] = static_cast<uint8_t>(c.psn >> (24 - 8 * b));
      if (c.seq_mac) {
        const uint64_t mac = bench_peer_mac(0, c.psn);
        for (int b = 0; b < 8; ++b) c.frame[c.seq_at + 4 + b] = static_cast<uint8_t>(mac >> (56 - 8 * b));
      }
      const size_t options = c.seq_at ? sizeof(rg_tunnel_opt) + (c.seq_mac ? sizeof(rg_tunnel_opt_mac) : 0) : 0;
      if (c.roce) set_psn(c.frame, bth_offset(c.geneve) + options, c.psn++ & RG_PSN_MASK);
      return c.hook == "tc" ? test_run_tc(c.prog_fd, ifindex, c.frame) : test_run_xdp(c.prog_fd, ifindex, c.frame);
    };
    // Each path does what its name says before it is timed.
    for (auto& c : cases) {
      RunResult r = run_once(c);
      const int change = static_cast<int>(r.size_out) - static_cast<int>(c.frame.size());
      // A numbering sender adds the option's extension to one number in RG_TUNNEL_EXT_EVERY.
      const bool numbered = c.hook == "tc" && c.size_change > 50;
      if (change != c.size_change &&
          !(numbered && change == c.size_change + static_cast<int>(sizeof(rg_tunnel_opt_ext)))) {
        std::string events;
        for (const Object* o : {&remark, &remark_account, &full, &account})
          for (const auto& row : rg::MapReader(bpf_map__fd(o->skel()->maps.rg_counters)).counters())
            for (size_t i = 0; i < RG_EV_MAX; ++i)
              if (row.ev[i].packets)
                events += " " + std::string(rg::event_name(static_cast<rg_event>(i)).name) + "=" +
                          std::to_string(row.ev[i].packets);
        throw std::runtime_error(c.name + ": output size changed by " + std::to_string(change) + ", expected " +
                                 std::to_string(c.size_change) + "; counters:" + events);
      }
    }
    // The shield's rows: copies sent, second copies dropped.
    for (auto& c : cases)
      if (c.seq_fixed && run_once(c).retval != XDP_DROP)
        throw std::runtime_error(c.name + ": the second copy was not dropped");
    uint64_t copies = 0;
    for (const auto& row : rg::read_peer_stats(bpf_map__fd(shielded.skel()->maps.rg_peer_stats)))
      copies += row.ev[RG_PEER_EV_SHIELD_COPIES].packets;
    if (copies == 0) throw std::runtime_error("the shielded encapsulation sent no copy");
    // The MAC's rows: the option taken, not ignored.
    for (const auto& row : rg::read_peer_stats(bpf_map__fd(full_seq_key.skel()->maps.rg_peer_stats),
                                               bpf_map__fd(full_seq_key.skel()->maps.rg_peer_guard), -1))
      if (row.guard.auth_bad || row.guard.auth_missing)
        throw std::runtime_error("the keyed decapsulation refused the bench peer's MAC");
    if (rg::read_tunnel_streams(bpf_map__fd(full_seq_key.skel()->maps.rg_tunnel_streams)).empty())
      throw std::runtime_error("the keyed decapsulation tracked no stream");
    for (unsigned r = 0; r < rounds; ++r)
      for (auto& c : cases) {
        leases.renew();
        forward_leases.renew();
        for (unsigned i = 0; i < calls / 10; ++i) run_once(c);  // warm the caches for this case
        const auto t0 = std::chrono::steady_clock::now();
        for (unsigned i = 0; i < calls; ++i) c.kernel_ns.push_back(run_once(c).duration_ns);
        const std::chrono::duration<double, std::nano> dt = std::chrono::steady_clock::now() - t0;
        c.wall_ns.push_back(dt.count() / calls);
      }
    // The congestion loop's rows: the frames marked, not passed by (the
    // backlog stands above the threshold from the second frame on).
    for (const Object* o : {&congested, &forward_congested}) {
      const uint32_t slot = 0;
      rg_peer_pq pq{};
      if (bpf_map__lookup_elem(o->skel()->maps.rg_peer_pq, &slot, sizeof(slot), &pq, sizeof(pq), 0) ||
          pq.marked == 0)
        throw std::runtime_error("the congestion loop's phantom queue marked nothing");
    }
    // Where the program leaves the buffer as it was, repeat > 1 is valid:
    // a cross-check of the floor-subtracted figure.
    for (auto& c : cases)
      if (c.floor || !c.roce) {
        uint64_t sum = 0;
        for (unsigned r = 0; r < rounds; ++r)
          sum += (c.hook == "tc" ? test_run_tc(c.prog_fd, ifindex, c.frame, 100000)
                                 : test_run_xdp(c.prog_fd, ifindex, c.frame, 100000))
                     .duration_ns;
        c.repeat_ns = static_cast<double>(sum) / rounds;
      }

    std::cout << "BPF_PROG_TEST_RUN, repeat=1 on a fresh copy per run; " << rounds << " rounds x " << calls
              << " runs per case, " << payload << " B RoCE payload; ns/run = kernel duration, 10 % trimmed mean\n\n";
    Table t({"path", "ns/run", "minus floor", "x floor", "median", "syscall ns (wall)", "repeat=1e5 ns"});
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : cases) {
      const Case& fl = *std::find_if(cases.begin(), cases.end(), [&](const Case& f) { return f.floor && f.hook == c.hook; });
      const double avg = trimmed_mean(c.kernel_ns), favg = trimmed_mean(fl.kernel_ns);
      const double med = median(c.kernel_ns);
      t.row({c.name, fmt("%.1f", avg), c.floor ? "-" : fmt("%.1f", avg - favg), fmt("%.2f", avg / favg),
             fmt("%.0f", med), fmt("%.0f", median(c.wall_ns)),
             c.repeat_ns < 0 ? "n/a (modifies)" : fmt("%.1f", c.repeat_ns)});
      out.push_back({{"path", c.name},
                     {"hook", c.hook},
                     {"kernel_ns_trimmed_mean", avg},
                     {"kernel_ns_median", med},
                     {"kernel_ns_mean", mean(c.kernel_ns)},
                     {"net_ns", c.floor ? 0.0 : avg - favg},
                     {"ratio_to_floor", avg / favg},
                     {"syscall_wall_ns_median", median(c.wall_ns)},
                     {"repeat_100000_ns", c.repeat_ns < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.repeat_ns)},
                     {"frame_bytes", c.frame.size()},
                     {"size_change", c.size_change}});
    }
    t.print();
    write_json(json_path, {{"benchmark", "prog_cost"},
                           {"method", "BPF_PROG_TEST_RUN repeat=1 per fresh input, kernel duration, 10 % trimmed mean; floor = empty program of the same type"},
                           {"rounds", rounds},
                           {"calls", calls},
                           {"payload", payload},
                           {"results", out}});
  } catch (const std::exception& e) {
    std::cerr << "bench_prog_cost: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
