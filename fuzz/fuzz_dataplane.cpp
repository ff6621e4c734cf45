// libFuzzer target: arbitrary frames through rg_tc_egress (RG_FUZZ_TC) or
// rg_xdp_ingress (RG_FUZZ_XDP) with BPF_PROG_TEST_RUN, every run checked
// against the model (fuzz/model.h): untouched and passed when not ours;
// re-marked with ECN kept, checksum valid and the rest intact when RoCE;
// encapsulated exactly and decapsulated back to the re-marked frame when
// routed to a tunnel; only documented verdicts; counters never go down.
// A broken invariant aborts, so libFuzzer keeps the input as a crash file.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <unordered_map>

#include "dataplane.h"
#include "dataplane/names.h"
#include "frames.h"
#include "model.h"

using namespace rg::fuzz;

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

#if defined(RG_FUZZ_XDP)
constexpr Target kTarget = Target::kXdpIngress;
#elif defined(RG_FUZZ_TC)
constexpr Target kTarget = Target::kTcEgress;
#else
#error "define RG_FUZZ_TC or RG_FUZZ_XDP"
#endif

Dataplane* g_dp;
std::map<std::pair<uint32_t, uint32_t>, rg::CounterRow> g_counters;
std::unordered_map<std::string, uint16_t> g_flow_sport;
constexpr size_t kMaxFlows = 1 << 16;

[[noreturn]] void violation(const char* stage, const std::string& why, const Bytes& in,
                            const Bytes* out = nullptr, const Bytes* want = nullptr) {
  std::fprintf(stderr, "\n*** invariant broken (%s): %s\n--- input (%zu bytes)\n%s\n", stage,
               why.c_str(), in.size(), rg::test::hex(in).c_str());
  if (out) std::fprintf(stderr, "--- output\n%s\n", rg::test::hex(*out).c_str());
  if (want) std::fprintf(stderr, "--- expected\n%s\n", rg::test::hex(*want).c_str());
  std::abort();
}

using Deltas = std::array<uint64_t, RG_EV_MAX>;

// Reads every counter: none may have gone down (nor a row vanished) since
// the last read. Returns this interface's packet deltas for dir.
Deltas counters_step(rg_direction dir, const char* stage, const Bytes& in) {
  Deltas d{};
  std::map<std::pair<uint32_t, uint32_t>, rg::CounterRow> now;
  for (const auto& row : g_dp->counters()) now[{row.ifindex, row.direction}] = row;
  for (const auto& [key, old] : g_counters) {
    auto it = now.find(key);
    if (it == now.end()) violation(stage, "a counter row disappeared", in);
    for (int ev = 0; ev < RG_EV_MAX; ++ev) {
      const rg_counter &a = old.ev[ev], &b = it->second.ev[ev];
      if (b.packets < a.packets || b.bytes < a.bytes)
        violation(stage,
                  std::string("counter decreased: ") +
                      std::string(rg::event_name(static_cast<rg_event>(ev)).name),
                  in);
    }
  }
  auto it = now.find({static_cast<uint32_t>(g_dp->ifindex()), static_cast<uint32_t>(dir)});
  if (it != now.end()) {
    auto old = g_counters.find(it->first);
    for (int ev = 0; ev < RG_EV_MAX; ++ev)
      d[ev] = it->second.ev[ev].packets - (old == g_counters.end() ? 0 : old->second.ev[ev].packets);
  }
  g_counters = std::move(now);
  return d;
}

void expect_count(const Deltas& d, rg_event ev, uint64_t want, const char* stage,
                  const Bytes& in) {
  if (d[ev] != want)
    violation(stage,
              std::string(rg::event_name(ev).name) + " counted " + std::to_string(d[ev]) +
                  " times, expected " + std::to_string(want),
              in);
}

void run_tc(const Bytes& in) {
  Run r;
  if (!g_dp->tc(in, r)) return;
  const Expect e = expect_tc(g_dp->tunnels(), in);
  if (std::string why = check(g_dp->tunnels(), e, r.verdict, r.out); !why.empty())
    violation("tc egress", why, in, &r.out, &e.out);
  const Deltas d = counters_step(RG_DIR_EGRESS, "tc egress", in);
  expect_count(d, RG_EV_ROCE_PACKETS, e.roce, "tc egress", in);
  expect_count(d, RG_EV_ENCAPSULATED, e.encap_peer >= 0, "tc egress", in);
  if (e.encap_peer < 0) return;

  // One flow, one outer source port: ECMP must not reorder a QP.
  const std::string flow = flow_of(in);
  if (g_flow_sport.size() >= kMaxFlows) g_flow_sport.clear();
  auto [it, fresh] = g_flow_sport.emplace(flow, outer_sport(r.out));
  if (!fresh && it->second != outer_sport(r.out))
    violation("tc egress", "outer source port changed within one flow", in, &r.out);

  // decap(encap(p)) is the re-marked p, addressed to the receiving device
  // from the outer frame's sender.
  Run back;
  if (!g_dp->xdp(r.out, back)) violation("roundtrip", "test run refused the encapsulated frame", in);
  Bytes want(r.out.begin() + (r.out.size() - in.size()), r.out.end());
  const rg::test::Mac& dev = g_dp->tunnels().dev_mac;
  std::copy(dev.begin(), dev.end(), want.begin());
  std::copy(r.out.begin() + 6, r.out.begin() + 12, want.begin() + 6);
  if (back.verdict != kXdpPass || back.out != want)
    violation("roundtrip", "xdp(tc(p)) is not the re-marked p (verdict " +
                               std::to_string(back.verdict) + ")",
              in, &back.out, &want);
  const Deltas di = counters_step(RG_DIR_INGRESS, "roundtrip", in);
  expect_count(di, RG_EV_DECAPSULATED, 1, "roundtrip", in);
}

void run_xdp(const Bytes& in) {
  Run r;
  if (!g_dp->xdp(in, r)) return;
  const Expect e = expect_xdp(g_dp->tunnels(), in);
  if (std::string why = check(g_dp->tunnels(), e, r.verdict, r.out); !why.empty())
    violation("xdp ingress", why, in, &r.out, &e.out);
  const Deltas d = counters_step(RG_DIR_INGRESS, "xdp ingress", in);
  expect_count(d, RG_EV_ROCE_PACKETS, e.roce, "xdp ingress", in);
  expect_count(d, RG_EV_DECAPSULATED, e.decap, "xdp ingress", in);
  expect_count(d, RG_EV_ECN_DROP, r.verdict == kXdpDrop && !e.critical, "xdp ingress", in);
  expect_count(d, RG_EV_GENEVE_CRITICAL, e.critical, "xdp ingress", in);
}

// What the run exercised, for the report: how many frames took each path
// (QP entries created beyond the table's size are LRU evictions).
void print_counters() {
  for (const auto& [key, row] : g_counters)
    for (int ev = 0; ev < RG_EV_MAX; ++ev)
      if (row.ev[ev].packets)
        std::fprintf(stderr, "counter %s %s %llu\n",
                     std::string(rg::direction_name(static_cast<rg_direction>(key.second))).c_str(),
                     std::string(rg::event_name(static_cast<rg_event>(ev)).name).c_str(),
                     static_cast<unsigned long long>(row.ev[ev].packets));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  try {
    g_dp = new Dataplane();
    for (const auto& row : g_dp->counters()) g_counters[{row.ifindex, row.direction}] = row;
    std::atexit(print_counters);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz setup: %s\n", e.what());
    std::exit(1);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The kernel takes no frame shorter than an Ethernet header.
  if (size < 14 || size > kMaxFrame) return -1;
  const Bytes in(data, data + size);
  if (kTarget == Target::kTcEgress)
    run_tc(in);
  else
    run_xdp(in);
  return 0;
}

// Half the mutations are libFuzzer's own on raw bytes; the rest start from a
// valid frame (fresh, or the input when it parses) and break one field.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned seed) {
  std::mt19937 rng(seed);
  const unsigned how = rng() % 4;
  if (how < 2) return LLVMFuzzerMutate(data, size, max_size);
  Bytes f = how == 2 ? random_frame(rng, kTarget) : Bytes(data, data + size);
  break_one_field(rng, f);
  if (f.size() > max_size) f.resize(max_size);
  std::memcpy(data, f.data(), f.size());
  return f.size();
}
