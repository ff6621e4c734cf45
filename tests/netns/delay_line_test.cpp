// The lab WAN's delay line and loss models, measured through the lab's own
// path (host A -> gateway A -> WAN router -> gateway B -> host B, no
// roceguard): each datagram carries its number and send time, host B takes
// the one-way delay of each from the same clock.
//
// Bounds: a datagram never arrives before the delay asked for (exact: the
// line holds it at least that long); the median arrives within
// kMedianBound of it, what this host's timers and scheduler add (measured
// in bench/README.md, "Delay line").
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <numeric>
#include <thread>

#include "common/error.h"
#include "lab/path_probe.h"
#include "lab_fixture.h"
#include "packet.h"
#include "roceguard/roceguard.h"

namespace rg::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kMedianBound = 2'000'000;  // ns

class DelayLine : public LabTest {
 protected:
  void start(std::chrono::microseconds delay, std::chrono::microseconds jitter = 0us, double reorder_pct = 0) {
    lab::DelayLineConfig cfg;
    cfg.delay = delay;
    cfg.jitter = jitter;
    cfg.reorder_ppm = static_cast<uint32_t>(reorder_pct * 10000);
    wan_->start_delay_line({{"a_to_b", "to-a", "to-b", lab::parse_mac(topo_->mac(lab::Node::kGatewayB, "wan0"))},
                            {"b_to_a", "to-b", "to-a", lab::parse_mac(topo_->mac(lab::Node::kGatewayA, "wan0"))}},
                           cfg);
  }
  static void show(const char* what, const lab::ProbeResult& r) {
    report(what, {{"sent", r.sent},
                  {"received", r.received},
                  {"inversions", r.inversions},
                  {"delay_min_us", static_cast<uint64_t>(r.delay_quantile(0) / 1000)},
                  {"delay_p50_us", static_cast<uint64_t>(r.delay_quantile(0.5) / 1000)},
                  {"delay_p99_us", static_cast<uint64_t>(r.delay_quantile(0.99) / 1000)},
                  {"delay_max_us", static_cast<uint64_t>(r.delay_quantile(1) / 1000)}});
  }
};

TEST_F(DelayLine, HoldsEveryPacketForTheDelayAndKeepsTheirOrder) {
  const auto base = lab::probe_path(*topo_, {.count = 500, .interval = 100us});
  show("no delay line", base);
  start(5ms);
  topo_->check_path();  // both directions cross the line: replies come back through it
  const auto r = lab::probe_path(*topo_, {.count = 3000, .interval = 50us});
  show("delay 5 ms", r);
  EXPECT_EQ(r.received, r.sent);
  EXPECT_EQ(r.sent, 3000u);
  EXPECT_EQ(r.inversions, 0u);
  EXPECT_EQ(r.duplicates, 0u);
  EXPECT_GE(r.delay_quantile(0), 5'000'000) << "a datagram left the line before its time";
  EXPECT_LE(r.delay_quantile(0.5), 5'000'000 + base.delay_quantile(0.5) + kMedianBound);
  const auto st = wan_->delay_line()->stats(0);
  EXPECT_GE(st.frames, 3000u);
  EXPECT_EQ(st.reordered, 0u);
  EXPECT_EQ(st.send_errors, 0u);
  EXPECT_EQ(st.rx_dropped, 0u);
}

// Datagrams 50 us apart: the line's own stamps of each frame's arrival
// (the kernel's) and departure say whether it kept their spacing. The
// bound is the line's rule, not this host's speed: no frame leaves less
// than half its arrival gap (up to lab::kPacedGap) after the one sent before
// it, however late the line woke up. A line that stamps a batch read together with one time, or
// sends what became due while it slept back to back, closes those gaps.
TEST_F(DelayLine, KeepsTheSpacingItReceived) {
  start(2ms);
  const auto r = lab::probe_path(*topo_, {.count = 3000, .interval = 50us});
  const auto st = wan_->delay_line()->stats(0);
  auto us = [](const lab::GapHistogram& h, double q) { return static_cast<uint64_t>(h.quantile(q).count() / 1000); };
  report("spacing A->B", {{"frames", st.frames},
                          {"gap_in_p10_us", us(st.gap_in, 0.1)},
                          {"gap_in_p50_us", us(st.gap_in, 0.5)},
                          {"gap_out_p10_us", us(st.gap_out, 0.1)},
                          {"gap_out_p50_us", us(st.gap_out, 0.5)},
                          {"squeezed", st.squeezed},
                          {"late_max_us", st.late_max_ns / 1000}});
  EXPECT_EQ(r.received, r.sent);
  EXPECT_GE(st.frames, 3000u);
  // Every frame but the first has a gap on each side.
  EXPECT_EQ(st.gap_in.total(), st.frames - 1);
  EXPECT_EQ(st.gap_out.total(), st.frames - 1);
  EXPECT_EQ(st.squeezed, 0u) << "frames sent closer than half the gap they arrived with";
  // Hence each quantile of what left is at least half the same quantile of
  // what came in (of gaps up to the longest the line keeps; quantiles are
  // bucket floors, and half a gap falls in half its bucket).
  const auto kept = lab::GapHistogram::floor(lab::kPacedGap);
  for (double q : {0.01, 0.1, 0.5})
    EXPECT_GE(st.gap_out.quantile(q) * 2, std::min(st.gap_in.quantile(q), kept)) << "q " << q;
}

TEST(DelayLineGaps, BucketsAreAnEighthOfAnOctave) {
  lab::GapHistogram h;
  EXPECT_EQ(h.quantile(0.5).count(), 0);
  for (int64_t g : {3, 16, 17, 18, 82'000, 7'000}) h.add(std::chrono::nanoseconds(g));
  h.add(std::chrono::nanoseconds(-5));  // a clock's step back counts as no gap
  EXPECT_EQ(h.total(), 7u);
  EXPECT_EQ(h.count[0], 1u);
  EXPECT_EQ(h.count[3], 1u);
  EXPECT_EQ(h.count[16], 2u);  // 16 and 17: one bucket [16, 18)
  EXPECT_EQ(h.count[17], 1u);
  EXPECT_EQ(h.quantile(0).count(), 0);
  // 82 us is in [81 920, 90 112): 2^16 * 10 / 8.
  EXPECT_EQ(h.quantile(1).count(), 81'920);
  EXPECT_EQ(h.quantile(0.5).count(), 16);
  lab::GapHistogram base;
  base.add(std::chrono::nanoseconds(82'000));
  h -= base;
  EXPECT_EQ(h.total(), 6u);
  EXPECT_EQ(h.quantile(1).count(), 6'656);  // 7 000 in [6 656, 7 168)
  EXPECT_EQ(lab::GapHistogram::floor(std::chrono::microseconds(200)).count(), 196'608);
  h.add(std::chrono::hours(1));
  EXPECT_EQ(h.count[lab::GapHistogram::kBuckets - 1], 1u);
}

TEST_F(DelayLine, JitterVariesTheDelayButNeverTheOrder) {
  start(4ms, 2ms);
  const auto r = lab::probe_path(*topo_, {.count = 1500, .interval = 1ms});
  show("delay 4 ms +- 2 ms", r);
  EXPECT_EQ(r.received, r.sent);
  EXPECT_EQ(r.inversions, 0u);
  EXPECT_GE(r.delay_quantile(0), 2'000'000);
  // Uniform in 2..6 ms, each no earlier than the one ahead (1 ms ahead of
  // it): more than a millisecond between the fastest and slowest tenth.
  EXPECT_GT(r.delay_quantile(0.9) - r.delay_quantile(0.1), 1'000'000);
}

TEST_F(DelayLine, ReordersOnlyWhenAsked) {
  start(1ms, 0us, 5);
  const auto r = lab::probe_path(*topo_, {.count = 3000, .interval = 50us});
  show("reorder 5 %", r);
  EXPECT_EQ(r.received, r.sent);
  EXPECT_GT(r.inversions, 0u);
  EXPECT_GT(wan_->delay_line()->stats(0).reordered, 0u);
  EXPECT_GE(r.delay_quantile(0), 1'000'000) << "reordered by holding back, never by sending early";
}

// Loss runs per direction, with and without bursts: the WAN program alone.
struct LossRun {
  lab::ProbeResult probe;
  uint64_t dropped = 0;
  lab::LossRuns runs{};
  uint64_t mean_run_x10 = 0;  // dropped per run, times 10
};

// 20 000 datagrams host A -> host B through a WAN losing loss_pct in bursts
// of burst on average; the loss is off again on return.
LossRun lose(lab::Wan& wan, const lab::Topology& topo, const char* what, double loss_pct, double burst) {
  rg_wan_config cfg{};
  cfg.flags = RG_WAN_F_BLEACH;
  lab::set_loss(cfg, loss_pct, burst);
  wan.configure(cfg);
  LossRun r;
  r.probe = lab::probe_path(topo, {.count = 20000, .interval = 50us, .drain = 500ms});
  lab::set_loss(cfg, 0, 1);
  wan.configure(cfg);
  r.dropped = wan.stats("to-a", RG_WAN_UDP_OTHER).dropped;
  r.runs = wan.loss_runs("to-a");
  const uint64_t n = std::accumulate(r.runs.begin(), r.runs.end(), uint64_t{0});
  r.mean_run_x10 = n ? 10 * r.dropped / n : 0;
  report(what, {{"sent", r.probe.sent}, {"received", r.probe.received}, {"dropped", r.dropped},
                {"mean_run_x10", r.mean_run_x10}});
  return r;
}

TEST_F(DelayLine, BurstLossDropsInRunsOfTheMeanLength) {
  const LossRun r = lose(*wan_, *topo_, "burst 8", 5, 8);
  EXPECT_EQ(r.probe.received + r.dropped, r.probe.sent);
  // 5 % of 20000 in ~125 bursts: far inside 2.5..10 %.
  EXPECT_GT(r.dropped, 500u);
  EXPECT_LT(r.dropped, 2000u);
  EXPECT_GT(r.mean_run_x10, 30u) << "runs of 8 on average, not single drops";
  EXPECT_GT(r.runs[3] + r.runs[4] + r.runs[5] + r.runs[6] + r.runs[7], 0u) << "some runs longer than 4";
}

TEST_F(DelayLine, IndependentLossDropsAlone) {
  const LossRun r = lose(*wan_, *topo_, "independent", 5, 1);
  EXPECT_EQ(r.probe.received + r.dropped, r.probe.sent);
  EXPECT_GT(r.dropped, 500u);
  EXPECT_LT(r.dropped, 2000u);
  EXPECT_LT(r.mean_run_x10, 15u) << "5 % independent: runs average about 1.05";
}

// The WAN's count of tunnel sequence numbers every copy of which it
// dropped, against what arrived: Geneve datagrams carrying roceguard's
// sequence option, sent between the gateways' WAN addresses by plain UDP
// sockets (no roceguard), each number once or twice back to back as the
// loss shield sends it.
class WanSequence : public LabTest {
 protected:
  // stream -> copies of each number that arrived, indexed by number.
  using Arrivals = std::map<uint32_t, std::vector<unsigned>>;

  // numbers of each stream, copies of each, from one gateway's WAN address
  // to the other's Geneve port, the streams interleaved. Bounded: the
  // sends, paced, and a drain of 500 ms of silence (at most 10 s).
  Arrivals send(lab::Node from, const char* from_addr, lab::Node to, const char* to_addr,
                const std::vector<uint32_t>& streams, uint32_t numbers, unsigned copies) {
    Arrivals got;
    for (uint32_t st : streams) got[st].assign(numbers, 0);
    FdCloser rx(socket_in(to, to_addr, test::kGenevePort)), tx(socket_in(from, from_addr, 0));
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(test::kGenevePort);
    inet_pton(AF_INET, to_addr, &dst.sin_addr);
    // Geneve header and option as the UDP payload: the frame less its
    // Ethernet, IPv4 and UDP headers.
    constexpr size_t kHeaders = 14 + 20 + 8;
    auto receive = [&](int timeout_ms) {
      pollfd p{rx.fd, POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return false;
      uint8_t buf[2048];
      const ssize_t n = recv(rx.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < static_cast<ssize_t>(8 + sizeof(rg_tunnel_opt))) return true;
      uint32_t st, seq;
      std::memcpy(&st, buf + 8 + 4, 4);
      std::memcpy(&seq, buf + 8 + 8, 4);
      auto it = got.find(ntohl(st));
      if (it != got.end() && ntohl(seq) < numbers) ++it->second[ntohl(seq)];
      return true;
    };
    // On one CPU, as the gateway's copies of one stream are: the veths
    // hand each datagram to the WAN on the sending CPU, so the copies of a
    // number reach it back to back and before the next number.
    PinnedToThisCpu pinned;
    for (uint32_t n = 0; n < numbers; ++n)
      for (uint32_t st : streams) {
        const test::Bytes frame = test::PacketBuilder()
                                      .ipv4(from_addr, to_addr)
                                      .udp(50000, test::kGenevePort)
                                      // With the extension on every 16th number, as a gateway sends.
                                      .geneve(kVni, test::tunnel_seq_option(
                                                        st, n,
                                                        n % RG_TUNNEL_EXT_EVERY
                                                            ? std::nullopt
                                                            : std::optional<test::TunnelOptExt>(test::TunnelOptExt{}),
                                                        RG_TUNNEL_OPT_CLASS_DEFAULT, RG_TUNNEL_OPT_TYPE_DEFAULT))
                                      .payload(64)
                                      .build();
        const test::Bytes payload = test::slice(frame, kHeaders);
        for (unsigned c = 0; c < copies; ++c)
          EXPECT_EQ(sendto(tx.fd, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)),
                    static_cast<ssize_t>(payload.size()));
        // Paced, and read as it goes: the receiving socket never overflows.
        while (receive(0)) {
        }
        std::this_thread::sleep_for(20us);
      }
    for (int quiet = 0, i = 0; quiet < 25 && i < 500; ++i) quiet = receive(20) ? 0 : quiet + 1;
    return got;
  }

  struct Expected {
    uint64_t sent = 0, arrived = 0;
    uint64_t all_copies_dropped = 0, after_last_arrival = 0;
  };
  static Expected expected(const Arrivals& got, unsigned copies) {
    Expected e;
    for (const auto& [st, v] : got) {
      size_t after_last = v.size();
      for (size_t i = 0; i < v.size(); ++i) {
        e.sent += copies;
        e.arrived += v[i];
        if (v[i] == 0) ++e.all_copies_dropped;
        else after_last = i;
      }
      // Numbers after the stream's last arrival (all of them when none came).
      e.after_last_arrival += after_last == v.size() ? v.size() : v.size() - 1 - after_last;
    }
    return e;
  }

 private:
  static constexpr uint32_t kVni = 4242;
  class PinnedToThisCpu {
   public:
    PinnedToThisCpu() {
      if (sched_getaffinity(0, sizeof(old_), &old_) != 0) throw Error("sched_getaffinity: " + errno_text(errno));
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(sched_getcpu(), &one);
      if (sched_setaffinity(0, sizeof(one), &one) != 0) throw Error("sched_setaffinity: " + errno_text(errno));
    }
    ~PinnedToThisCpu() { sched_setaffinity(0, sizeof(old_), &old_); }
    PinnedToThisCpu(const PinnedToThisCpu&) = delete;
    PinnedToThisCpu& operator=(const PinnedToThisCpu&) = delete;

   private:
    cpu_set_t old_{};
  };
  struct FdCloser {
    int fd;
    explicit FdCloser(int f) : fd(f) {}
    ~FdCloser() { close(fd); }
    FdCloser(const FdCloser&) = delete;
    FdCloser& operator=(const FdCloser&) = delete;
  };
  int socket_in(lab::Node node, const char* addr, uint16_t port) {
    lab::NetnsGuard in(topo_->netns(node));
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error("socket: " + errno_text(errno));
    int buf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, port ? SO_RCVBUFFORCE : SO_SNDBUFFORCE, &buf, sizeof(buf));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      const int err = errno;
      close(fd);
      throw Error(std::string("bind ") + addr + ": " + errno_text(err));
    }
    return fd;
  }
};

TEST_F(WanSequence, CountsTheNumbersEveryCopyOfWhichItDropped) {
  // 20 % independent loss: about 4 % of the numbers sent twice lose both copies.
  rg_wan_config cfg{};
  cfg.flags = RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY;
  cfg.seq_opt_class = RG_TUNNEL_OPT_CLASS_DEFAULT;
  cfg.seq_opt_type = RG_TUNNEL_OPT_TYPE_DEFAULT;
  lab::set_loss(cfg, 20, 1);
  wan_->configure(cfg);
  const auto& a = topo_->addr();

  // Gateway A to B, every number twice, three streams: two epochs, CPUs
  // and lanes (the option's whole stream field names a stream).
  const std::vector<uint32_t> streams{1u << 16 | 0u << 4 | 0u, 1u << 16 | 1u << 4 | 3u, 2u << 16 | 0u << 4 | 0u};
  const Expected twice = expected(send(lab::Node::kGatewayA, a.gw_a_wan4, lab::Node::kGatewayB, a.gw_b_wan4,
                                       streams, 800, 2),
                                  2);
  // Gateway B to A, every number once: what the WAN drops of them.
  const Expected once = expected(send(lab::Node::kGatewayB, a.gw_b_wan4, lab::Node::kGatewayA, a.gw_a_wan4,
                                      {1u << 16 | 5u << 4 | 1u}, 2000, 1),
                                 1);
  lab::set_loss(cfg, 0, 1);
  wan_->configure(cfg);

  const lab::WanStats geneve_ab = wan_->stats("to-a", RG_WAN_GENEVE), geneve_ba = wan_->stats("to-b", RG_WAN_GENEVE);
  const lab::WanSeqLoss ab = wan_->seq_loss("to-a"), ba = wan_->seq_loss("to-b");
  report("shielded A->B", {{"sent", twice.sent}, {"arrived", twice.arrived}, {"wan_dropped", geneve_ab.dropped},
                           {"all_copies_dropped", ab.all_copies_dropped},
                           {"after_last_arrival", ab.after_last_arrival}});
  report("unshielded B->A", {{"sent", once.sent}, {"arrived", once.arrived}, {"wan_dropped", geneve_ba.dropped},
                             {"all_copies_dropped", ba.all_copies_dropped}});
  // Nothing but the WAN lost a datagram: the expectations below are exact.
  ASSERT_EQ(twice.arrived + geneve_ab.dropped, twice.sent);
  ASSERT_EQ(once.arrived + geneve_ba.dropped, once.sent);
  EXPECT_GT(twice.all_copies_dropped, 0u) << "2400 numbers, 4 % of them: some";
  EXPECT_GT(geneve_ab.dropped, twice.all_copies_dropped) << "most drops hit one copy only";
  EXPECT_EQ(ab.all_copies_dropped, twice.all_copies_dropped);
  EXPECT_EQ(ab.after_last_arrival, twice.after_last_arrival);
  EXPECT_EQ(ab.streams, streams.size());
  // Sent once, a number is lost with its only copy.
  EXPECT_EQ(ba.all_copies_dropped, geneve_ba.dropped);
  EXPECT_EQ(ba.all_copies_dropped, once.all_copies_dropped);
  EXPECT_EQ(ba.after_last_arrival, once.after_last_arrival);
  EXPECT_EQ(ba.streams, 1u);
  for (const auto* q : {&ab, &ba}) {
    EXPECT_EQ(q->late, 0u);
    EXPECT_EQ(q->untracked, 0u);
  }
}

TEST(WanLoss, BurstParametersFollowTheLossAndTheMeanBurst) {
  rg_wan_config cfg{};
  lab::set_loss(cfg, 1, 1);
  EXPECT_EQ(cfg.loss_ppm, 10000u);
  EXPECT_EQ(cfg.burst_leave_ppm, 0u);
  lab::set_loss(cfg, 1, 4);
  EXPECT_EQ(cfg.burst_leave_ppm, 250000u);
  // enter / (enter + leave) = 1 %: enter = 0.01 * 0.25 / 0.99.
  EXPECT_EQ(cfg.burst_enter_ppm, 2525u);
  EXPECT_THROW(lab::set_loss(cfg, 1, 0.5), Error);
  EXPECT_THROW(lab::set_loss(cfg, 100, 4), Error);
  EXPECT_THROW(lab::set_loss(cfg, 101, 1), Error);
}

}  // namespace
}  // namespace rg::test
