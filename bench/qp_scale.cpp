// Scale of the per-QP table: ns per packet with 1 k, 64 k and 1 M tracked
// QPs, and the kernel memory one tracked QP costs.
//
// For each size the object is loaded with rg_qp sized to exactly that many
// entries and the LRU table is filled from userspace with the keys the
// programs derive from the packets (egress: source, destination, DestQP).
// Each measured run is one BPF_PROG_TEST_RUN (repeat = 1, fresh input) of a
// RoCE packet for a QP drawn at random from the filled ones, so lookups
// spread over the whole table as they would with that many active QPs and
// the CPU caches see the table's real footprint. qp_created counting up
// during the run would mean misses: it is reported so a wrong key layout
// cannot pass unnoticed. Memory is what the kernel charges the map
// (memlock, as `bpftool map show` prints it); an LRU hash preallocates every
// entry, so it does not depend on the fill.
//
//   bench_qp_scale [--sizes 1024,65536,1048576] [--rounds N] [--calls N] [--json FILE]
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <iostream>
#include <memory>
#include <random>

#include "bench_util.h"
#include "empty.skel.h"
#include "maps.h"
#include "roceguard.skel.h"

namespace {

using namespace rg::bench;
using rg::test::Bytes;
using rg::test::PacketBuilder;

Bytes roce_frame(uint8_t tos) {
  rg::test::Bth bth;
  return PacketBuilder().ipv4(kHost4, kRemoteHost4).tos(tos).udp(49152, rg::test::kRoceV2Port).bth(bth).payload(1024).build();
}

struct Size {
  uint32_t entries;
  std::unique_ptr<Object> obj;
  std::vector<double> tc_ns, xdp_ns;
  uint64_t memlock = 0;
  uint64_t qp_new_during_runs = 0;
  double fill_s = 0;
  std::array<std::vector<uint32_t>, 2> psn;  // per hook: each direction in order
};

uint64_t qp_new(const Object& o) {
  rg::MapReader r(bpf_map__fd(o.skel()->maps.rg_counters), bpf_map__fd(o.skel()->maps.rg_qp));
  auto rows = r.counters();
  return rg::sum_packets(rows, RG_DIR_EGRESS, RG_EV_QP_NEW) + rg::sum_packets(rows, RG_DIR_INGRESS, RG_EV_QP_NEW);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"roceguard per-packet cost against the number of tracked QPs"};
  std::vector<uint32_t> sizes{1024, 65536, 1048576};
  unsigned rounds = 10, calls = 5000;
  std::string json_path = "qp_scale.json";
  app.add_option("--sizes", sizes, "tracked QPs (rg_qp entries)")->delimiter(',');
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1u, 1000u));
  app.add_option("--calls", calls, "test runs per size and round")->check(CLI::Range(10u, 1000000u));
  app.add_option("--json", json_path, "JSON output");
  CLI11_PARSE(app, argc, argv);

  try {
    quiet_libbpf();
    const int ifindex = enter_private_netns();
    std::unique_ptr<empty, decltype(&empty__destroy)> floor(empty__open_and_load(), empty__destroy);
    if (!floor) throw std::runtime_error("empty.bpf.o: load failed");
    std::vector<Size> runs;
    std::mt19937 rng(42);
    for (uint32_t n : sizes) {
      Size s;
      s.entries = n;
      s.obj = std::make_unique<Object>(config(RG_CFG_F_REMARK | RG_CFG_F_REPAIR | RG_CFG_F_ACCOUNT), n);
      const int qp_fd = bpf_map__fd(s.obj->skel()->maps.rg_qp);
      // The key rg_tc_egress and rg_xdp_ingress build for kHost4 -> kRemoteHost4.
      rg_qp_key k{};
      inet_pton(AF_INET, kHost4, k.src);
      inet_pton(AF_INET, kRemoteHost4, k.dst);
      k.family = AF_INET;
      rg_qp_state v{};
      const auto t0 = std::chrono::steady_clock::now();
      for (uint32_t q = 0; q < n; ++q) {
        k.dest_qp = q;
        if (bpf_map_update_elem(qp_fd, &k, &v, BPF_ANY))
          throw std::runtime_error("filling rg_qp: " + std::string(std::strerror(errno)));
      }
      s.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      s.memlock = map_memlock(qp_fd);
      for (auto& p : s.psn) p.assign(n, 0);
      runs.push_back(std::move(s));
    }

    Bytes egress = roce_frame(26 << 2 | 2), ingress = roce_frame(0);
    const size_t bth = bth_offset(false);
    std::vector<double> floor_tc, floor_xdp;
    for (auto& s : runs) s.qp_new_during_runs = qp_new(*s.obj);
    for (unsigned r = 0; r < rounds; ++r) {
      for (unsigned i = 0; i < calls; ++i) {
        floor_tc.push_back(test_run_tc(bpf_program__fd(floor->progs.empty_tc), ifindex, egress).duration_ns);
        floor_xdp.push_back(test_run_xdp(bpf_program__fd(floor->progs.empty_xdp), ifindex, ingress).duration_ns);
      }
      // Each program gets its own random sequence: were the XDP run to
      // follow the TC run on the same QP, it would find the entry already
      // in the CPU cache and hide the table's real cost.
      for (auto& s : runs) {
        std::uniform_int_distribution<uint32_t> pick(0, s.entries - 1);
        for (int hook = 0; hook < 2; ++hook) {
          Bytes& f = hook == 0 ? egress : ingress;
          for (unsigned i = 0; i < calls; ++i) {
            const uint32_t q = pick(rng);
            set_dest_qp(f, bth, q);
            uint32_t& psn = s.psn[hook][q];
            set_psn(f, bth, psn);
            psn = (psn + 1) & RG_PSN_MASK;
            if (hook == 0) s.tc_ns.push_back(test_run_tc(s.obj->tc_fd(), ifindex, f).duration_ns);
            else s.xdp_ns.push_back(test_run_xdp(s.obj->xdp_fd(), ifindex, f).duration_ns);
          }
        }
      }
    }
    for (auto& s : runs) s.qp_new_during_runs = qp_new(*s.obj) - s.qp_new_during_runs;

    const double ftc = trimmed_mean(floor_tc), fxdp = trimmed_mean(floor_xdp);
    std::cout << "random QP per packet, BPF_PROG_TEST_RUN repeat=1, " << rounds << " rounds x " << calls
              << " packets per size; floor (empty program) tc " << ftc << " ns, xdp " << fxdp << " ns\n\n";
    Table t({"tracked QPs", "tc egress ns", "net", "x 1k", "xdp ingress ns", "net", "x 1k", "memlock MiB",
             "bytes/QP", "misses"});
    nlohmann::json out = nlohmann::json::array();
    const double base_tc = trimmed_mean(runs.front().tc_ns) - ftc, base_xdp = trimmed_mean(runs.front().xdp_ns) - fxdp;
    for (const auto& s : runs) {
      const double tc = trimmed_mean(s.tc_ns), xdp = trimmed_mean(s.xdp_ns);
      const double per_qp = static_cast<double>(s.memlock) / s.entries;
      t.row({std::to_string(s.entries), fmt("%.0f", tc), fmt("%.0f", tc - ftc), fmt("%.2f", (tc - ftc) / base_tc),
             fmt("%.0f", xdp), fmt("%.0f", xdp - fxdp), fmt("%.2f", (xdp - fxdp) / base_xdp),
             fmt("%.1f", s.memlock / 1048576.0), fmt("%.0f", per_qp), std::to_string(s.qp_new_during_runs)});
      out.push_back({{"entries", s.entries},
                     {"tc_ns_median", tc},
                     {"tc_net_ns", tc - ftc},
                     {"tc_net_ratio_to_first", (tc - ftc) / base_tc},
                     {"tc_total_ratio_to_first", tc / trimmed_mean(runs.front().tc_ns)},
                     {"xdp_ns_median", xdp},
                     {"xdp_net_ns", xdp - fxdp},
                     {"xdp_net_ratio_to_first", (xdp - fxdp) / base_xdp},
                     {"xdp_total_ratio_to_first", xdp / trimmed_mean(runs.front().xdp_ns)},
                     {"memlock_bytes", s.memlock},
                     {"bytes_per_qp", per_qp},
                     {"key_bytes", sizeof(rg_qp_key)},
                     {"value_bytes", sizeof(rg_qp_state)},
                     {"fill_seconds", s.fill_s},
                     {"qp_created_during_runs", s.qp_new_during_runs}});
    }
    t.print();
    write_json(json_path, {{"benchmark", "qp_scale"},
                           {"floor_tc_ns", ftc},
                           {"floor_xdp_ns", fxdp},
                           {"rounds", rounds},
                           {"calls", calls},
                           {"results", out}});
  } catch (const std::exception& e) {
    std::cerr << "bench_qp_scale: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
