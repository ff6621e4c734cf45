// The generator on its own: the BTH layout roceguard's parser expects, RC
// behaviour over loopback in a namespace of its own, the NIC profile's
// retransmit settings, the window sized to the bandwidth-delay product, and
// selective repeat against Go-Back-N across the lab's lossy WAN.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <functional>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "common/error.h"
#include "lab/lab_report.h"
#include "lab/lab_run.h"
#include "lab/proc.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"
#include "lab_fixture.h"
#include "nic/profile.h"
#include "roceguard/roceguard.h"

namespace rg::test {
namespace {

using namespace std::chrono_literals;

TEST(RoceGen, BthLayoutMatchesTheWire) {
  uint8_t b[12];
  lab::put_bth(b, {.opcode = lab::kOpWriteOnly, .dest_qp = 0xabcdef, .ack_req = true, .psn = 0xfedcba});
  EXPECT_EQ(b[0], lab::kOpWriteOnly);
  EXPECT_EQ(b[2], 0xff);  // default P_Key
  EXPECT_EQ(b[3], 0xff);
  EXPECT_EQ(b[5], 0xab);  // DestQP, big endian (IBA 9.2)
  EXPECT_EQ(b[6], 0xcd);
  EXPECT_EQ(b[7], 0xef);
  EXPECT_EQ(b[8], 0x80);  // AckReq
  EXPECT_EQ(b[9], 0xfe);  // PSN
  EXPECT_EQ(b[10], 0xdc);
  EXPECT_EQ(b[11], 0xba);
  for (uint32_t psn : {0u, 1u, 0x7fffffu, 0x800000u, 0xffffffu}) {
    lab::put_bth(b, {.opcode = lab::kOpSendOnly, .dest_qp = 0x000102, .psn = psn});
    lab::Bth back = lab::get_bth(b);
    EXPECT_EQ(back.psn, psn);
    EXPECT_EQ(back.dest_qp, 0x000102u);
    EXPECT_FALSE(back.ack_req);
    EXPECT_EQ(back.opcode, lab::kOpSendOnly);
  }
}

// A namespace with only loopback, removed however the test ends.
class LoopbackNetns {
 public:
  LoopbackNetns() : name_(std::string(kTag) + "-" + std::to_string(getpid()) + "-gen") {
    lab::run_checked({"ip", "netns", "add", name_});
    lab::run_checked({"ip", "-n", name_, "link", "set", "lo", "up"});
  }
  ~LoopbackNetns() { lab::run({"ip", "netns", "del", name_}); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// Both ends on one host: responses go to a port of their own.
constexpr uint16_t kReplyPort = 14791;

// An RC requester and its responder over loopback, two QPs, responses to
// a port of their own, DSCP 46; adjust changes the sender's settings.
// Runs until the sender is done.
struct LoopbackRc {
  lab::SenderConfig cfg;
  lab::SenderStats s;
  lab::ReceiverStats r;
};
LoopbackRc run_loopback_rc(const char* peer, uint32_t messages,
                           const std::function<void(lab::SenderConfig&)>& adjust = {}) {
  lab::ReceiverConfig rcfg;
  rcfg.reply_port = kReplyPort;
  rcfg.qps.count = 2;
  lab::Receiver rx(rcfg);
  rx.start();
  LoopbackRc run;
  run.cfg.peer = peer;
  run.cfg.ack_port = kReplyPort;
  run.cfg.qps.count = 2;
  run.cfg.messages = messages;
  run.cfg.ack_req_every = 4;
  run.cfg.tos = RG_DEFAULT_DSCP << 2;
  run.cfg.timeout = 1s;
  run.cfg.duration = 30s;
  if (adjust) adjust(run.cfg);
  lab::Sender tx(run.cfg);
  run.s = tx.run();
  rx.stop();
  run.r = rx.stats();
  return run;
}

TEST(RoceGen, LoopbackCompletesWithCoalescedAcks) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  for (const char* peer : {"127.0.0.1", "::1"}) {
    SCOPED_TRACE(peer);
    const auto [cfg, s, r] = run_loopback_rc(peer, 100);

    EXPECT_EQ(s.qps_done, 2u);
    EXPECT_EQ(s.completed, 200u);
    EXPECT_EQ(r.delivered, 200u);
    EXPECT_EQ(r.packets, s.packets);
    // Loopback loses nothing: anything resent (a timer firing on a busy
    // machine) arrives as a duplicate, never as a gap.
    EXPECT_EQ(r.duplicates, s.retransmits);
    EXPECT_EQ(r.dscp[RG_DEFAULT_DSCP], r.packets);  // IP_RECVTOS sees what was sent
    EXPECT_GE(r.acks, 50u);                         // one per AckReq: every 4th packet
    EXPECT_EQ(s.acks, r.acks);
    EXPECT_EQ(r.naks + r.out_of_order + r.lost_estimate, 0u);
  }
}

// Bursts over loopback: up to 8 consecutive PSNs of a QP per UDP_SEGMENT
// send, each datagram its own packet at the responder, in PSN order, with
// AckReq where it would be without bursts; a burst of 0 or beyond
// kMaxBurst is refused.
TEST(RoceGen, BurstsSendConsecutivePsnsAsOneSegmentedSend) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  for (unsigned bad : {0u, lab::kMaxBurst + 1}) {
    lab::SenderConfig cfg;
    cfg.peer = "127.0.0.1";
    cfg.burst = bad;
    EXPECT_THROW(lab::Sender{cfg}, Error) << bad;
  }
  for (uint8_t opcode : {lab::kOpSendOnly, lab::kOpWriteOnly})
    for (const char* peer : {"127.0.0.1", "::1"}) {
      SCOPED_TRACE(std::string(peer) + (opcode == lab::kOpWriteOnly ? " write" : " send"));
      const auto [cfg, s, r] = run_loopback_rc(peer, 200, [opcode](lab::SenderConfig& c) {
        c.opcode = opcode;
        c.burst = 8;
      });

      EXPECT_FALSE(s.gso_refused);
      EXPECT_EQ(s.qps_done, 2u);
      EXPECT_EQ(r.delivered, 400u);
      EXPECT_EQ(r.packets, s.packets);
      EXPECT_EQ(r.goodput_bytes, 400u * cfg.payload);
      // Fewer sends than packets, and none of more than 8.
      EXPECT_LT(s.sends, s.packets);
      EXPECT_GE(8 * s.sends, s.packets);
      EXPECT_EQ(r.duplicates, s.retransmits);
      EXPECT_EQ(r.naks + r.out_of_order + r.lost_estimate + r.gaps, 0u);
      EXPECT_EQ(r.dscp[RG_DEFAULT_DSCP], r.packets);
      EXPECT_GE(r.acks, 100u);  // AckReq on every 4th packet, bursts or not
      EXPECT_EQ(r.psn_span, (std::vector<uint64_t>{200, 200}));
    }
}

// UC over loopback: every message sent once and completed when sent, no
// ACK or NAK either way, each delivered; the packets carry the UC opcodes,
// which an RC responder does not take for its own.
TEST(RoceGen, UcSendsEveryPsnOnceWithoutAcks) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  EXPECT_EQ(lab::request_opcode(lab::Transport::kUc, lab::kOpSendOnly), lab::kOpUcSendOnly);
  EXPECT_EQ(lab::request_opcode(lab::Transport::kUc, lab::kOpWriteOnly), lab::kOpUcWriteOnly);
  EXPECT_EQ(lab::request_opcode(lab::Transport::kRc, lab::kOpWriteOnly), lab::kOpWriteOnly);
  EXPECT_EQ(lab::parse_transport("uc"), lab::Transport::kUc);
  EXPECT_EQ(lab::parse_transport("rc"), lab::Transport::kRc);
  EXPECT_FALSE(lab::parse_transport("UC"));
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  for (uint8_t opcode : {lab::kOpSendOnly, lab::kOpWriteOnly})
    for (const char* peer : {"127.0.0.1", "::1"}) {
      SCOPED_TRACE(std::string(peer) + (opcode == lab::kOpWriteOnly ? " write" : " send"));
      lab::ReceiverConfig rcfg;
      rcfg.reply_port = kReplyPort;
      rcfg.qps.count = 2;
      rcfg.transport = lab::Transport::kUc;
      lab::Receiver rx(rcfg);
      rx.start();
      lab::ReceiverConfig rc_cfg = rcfg;  // an RC responder on the next port
      rc_cfg.port = lab::kRoceV2Port + 1;
      rc_cfg.transport = lab::Transport::kRc;
      lab::Receiver rc_rx(rc_cfg);
      rc_rx.start();
      for (uint16_t port : {lab::kRoceV2Port, static_cast<uint16_t>(lab::kRoceV2Port + 1)}) {
        lab::SenderConfig cfg;
        cfg.peer = peer;
        cfg.port = port;
        cfg.ack_port = kReplyPort;
        cfg.qps.count = 2;
        cfg.messages = 100;
        cfg.payload = 256;
        cfg.opcode = opcode;
        cfg.window = 4;  // no ACK ever opens it: UC does not wait on it
        cfg.transport = lab::Transport::kUc;
        cfg.pace_pps = 20000;
        cfg.duration = 30s;
        lab::Sender tx(cfg);
        lab::SenderStats s = tx.run();
        EXPECT_EQ(s.qps_done, 2u);
        EXPECT_EQ(s.packets, 200u);
        EXPECT_EQ(s.completed, 200u);
        EXPECT_EQ(s.retransmits + s.acks + s.naks + s.timeouts, 0u);
        EXPECT_EQ(s.psn_span, (std::vector<uint64_t>{100, 100}));
      }
      // Bounded: loopback delivers at once, the receiver reads within its poll.
      for (int i = 0; i < 100 && rx.stats().packets < 200; ++i)
        std::this_thread::sleep_for(20ms);
      rx.stop();
      rc_rx.stop();
      const lab::ReceiverStats r = rx.stats();
      EXPECT_EQ(r.packets, 200u);
      EXPECT_EQ(r.delivered, 200u);
      EXPECT_EQ(r.goodput_bytes, 200u * 256u);
      EXPECT_EQ(r.acks + r.naks, 0u);
      EXPECT_EQ(r.out_of_order + r.duplicates + r.seen_retransmits + r.lost_estimate + r.gaps, 0u);
      EXPECT_EQ(r.psn_span, (std::vector<uint64_t>{100, 100}));
      EXPECT_EQ(r.socket_drops, 0u);
      EXPECT_EQ(rc_rx.stats().packets, 0u) << "UC opcodes are no RC requests";
    }
}

// A UC responder counts a PSN gap as a path tracker does, drops nothing
// but the missing PSNs (every message is one packet) and answers none of
// it: the requester is told nothing. PSNs behind the expected one are
// discarded as duplicates. The packets come from the test's own socket.
TEST(RoceGen, UcResponderCountsGapsAndNeverAnswers) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  lab::ReceiverConfig rcfg;
  rcfg.reply_port = kReplyPort;
  rcfg.qps.count = 1;
  rcfg.transport = lab::Transport::kUc;
  lab::Receiver rx(rcfg);
  rx.start();
  // Where an answer would go.
  const int reply = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(reply, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(kReplyPort);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(reply, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  const int out = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(out, 0);
  sockaddr_in to = at;
  to.sin_port = htons(lab::kRoceV2Port);
  // PSNs 0 1 _ _ 4 5 _ 7, then 5 again and an RC packet (ignored), then 8.
  const uint32_t psns[] = {0, 1, 4, 5, 7, 5};
  auto send_psn = [&](uint32_t psn, uint8_t opcode) {
    uint8_t pkt[wire::kBthLen + 64 + wire::kIcrcLen] = {};
    lab::put_bth(pkt, {.opcode = opcode, .dest_qp = rcfg.qps.responder_qpn, .ack_req = true, .psn = psn});
    ASSERT_EQ(sendto(out, pkt, sizeof(pkt), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(sizeof(pkt)));
  };
  for (uint32_t psn : psns) send_psn(psn, lab::kOpUcSendOnly);
  send_psn(8, lab::kOpSendOnly);
  send_psn(8, lab::kOpUcSendOnly);
  for (int i = 0; i < 100 && rx.stats().packets < 7; ++i) std::this_thread::sleep_for(20ms);
  rx.stop();
  const lab::ReceiverStats r = rx.stats();
  EXPECT_EQ(r.packets, 7u);
  EXPECT_EQ(r.delivered, 6u);      // 0 1 4 5 7 8
  EXPECT_EQ(r.out_of_order, 2u);   // 4 and 7 came ahead of the expected PSN
  EXPECT_EQ(r.duplicates, 1u);     // 5 again
  EXPECT_EQ(r.seen_retransmits, 1u);
  EXPECT_EQ(r.gaps, 2u);
  EXPECT_EQ(r.lost_estimate, 3u);  // 2, 3 and 6
  EXPECT_EQ(r.psn_span, std::vector<uint64_t>{9});
  EXPECT_EQ(r.acks + r.naks + r.cnps, 0u);
  uint8_t buf[64];
  EXPECT_EQ(recv(reply, buf, sizeof(buf), MSG_DONTWAIT), -1) << "a UC responder answered";
  close(out);
  close(reply);
}

// DCQCN end to end over loopback: every request leaves CE-marked (the
// sender's own ECN bits, where a marking switch would have set them), the
// responder answers with CNPs, at most one per QP per
// min_time_between_cnps, and each reaches the requester, whose reaction
// points cut their QP's rate below the line. With CongestionControl::kNone
// the same CNPs are only counted. Counts only: how far a rate falls
// depends on when the CNPs arrive; the arithmetic is lab/Dcqcn.*'s.
TEST(RoceGen, DcqcnCutsTheRateOnTheCnpsOfCeMarkedRequests) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  constexpr unsigned kLineMbit = 1000;
  for (auto cc : {lab::CongestionControl::kDcqcn, lab::CongestionControl::kNone}) {
    SCOPED_TRACE(lab::congestion_control_name(cc));
    const auto [cfg, s, r] = run_loopback_rc("127.0.0.1", 50, [cc](lab::SenderConfig& c) {
      c.tos = RG_DEFAULT_DSCP << 2 | 0x03;  // ECN CE
      c.cc = cc;
      c.line_mbit = kLineMbit;
    });
    EXPECT_EQ(s.qps_done, 2u);
    EXPECT_EQ(r.delivered, 100u);
    EXPECT_EQ(r.ecn_ce, r.packets);
    EXPECT_GE(r.cnps, 2u) << "each QP's first CE-marked request is answered";
    EXPECT_LE(r.cnps, r.ecn_ce);
    EXPECT_EQ(s.cnps, r.cnps) << "loopback loses no CNP";
    if (cc == lab::CongestionControl::kNone) {
      EXPECT_TRUE(s.dcqcn.empty());
      continue;
    }
    ASSERT_EQ(s.dcqcn.size(), 2u);
    uint64_t cnps = 0;
    for (const auto& q : s.dcqcn) {
      cnps += q.counters.cnps;
      EXPECT_GE(q.counters.cnps, 1u);
      EXPECT_GE(q.counters.limiter_allocations, 1u);
      EXPECT_GE(q.counters.cuts, 1u);
      EXPECT_LE(q.counters.cuts, q.counters.cnps) << "a cut needs a CNP in its period";
      EXPECT_GT(q.lowest_kbps, 0u);
      EXPECT_LT(q.lowest_kbps, kLineMbit * 1000u);
      ASSERT_FALSE(q.samples.empty());
      EXPECT_EQ(q.samples.front().second, kLineMbit * 1000u) << "no CNP before the first packet";
    }
    EXPECT_EQ(cnps, s.cnps);
  }
}

// A bad value of a command's option: args (roceguard's or roce-gen's
// command line) exits non-zero (roceguard with its usage status), saying
// message.
struct UsageCase {
  std::vector<std::string> args;
  std::string message;
};

void expect_usage_errors(const std::vector<UsageCase>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args[1] + " " + c.args[c.args.size() - 2] + " " + c.args.back());
    RunResult r = lab::run(c.args, 20s);
    EXPECT_NE(r.status, 0);
    if (c.args[0] == ROCEGUARD_BIN) {
      EXPECT_EQ(r.status, kExitUsage);
    }
    EXPECT_NE((r.out + r.err).find(c.message), std::string::npos) << r.out << r.err;
  }
}

// Bad values of the congestion-control options are usage errors naming
// the option or the DCQCN key, in both commands.
TEST(RoceGen, CongestionControlOptionsRejectBadValues) {
  expect_usage_errors({
      {{ROCEGUARD_BIN, "lab", "--cc", "reno"}, "--cc"},
      {{ROCEGUARD_BIN, "lab", "--dcqcn", "rpg_gd=99"}, "rpg_gd=99: out of range 0..31"},
      {{ROCEGUARD_BIN, "lab", "--dcqcn", "rpg_time_reset=5000,bogus=1"}, "unknown key \"bogus\""},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--cc", "cubic"}, "--cc"},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--dcqcn", "dce_tcp_g=abc"}, "dce_tcp_g=abc: not an integer"},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--line-rate", "0"}, "--line-rate"},
      {{ROCE_GEN_BIN, "recv", "--dcqcn", "min_time_between_cnps"}, "is not KEY=VALUE"},
  });
}

// A sender to loopback, where nothing answers: qps QPs of 10 messages,
// window 4, 2 retries, timeout.
lab::SenderConfig no_responder(unsigned qps, std::chrono::microseconds timeout,
                               lab::Retransmit mode = lab::Retransmit::kGoBackN) {
  lab::SenderConfig cfg;
  cfg.peer = "127.0.0.1";
  cfg.ack_port = kReplyPort;
  cfg.qps.count = qps;
  cfg.messages = 10;
  cfg.window = 4;
  cfg.retry_cnt = 2;
  cfg.timeout = timeout;
  cfg.duration = 30s;
  cfg.retransmit = mode;
  return cfg;
}

// No responder: every QP gives up after retry_cnt timeouts, it never hangs.
TEST(RoceGen, NoResponderFailsAfterRetries) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  lab::Sender tx(no_responder(3, 10ms));
  lab::SenderStats s = tx.run();
  EXPECT_EQ(s.qps_failed, 3u);
  EXPECT_EQ(s.completed, 0u);
  EXPECT_EQ(s.timeouts, 3u * 2u);
  // First window, then the same window again after each timeout.
  EXPECT_EQ(s.packets, 3u * 4u * 3u);
  EXPECT_EQ(s.retransmits, 3u * 4u * 2u);
}

// The same with selective repeat: each timeout resends the oldest
// unacknowledged packet alone, not the window.
TEST(RoceGen, NoResponderSelectiveRepeatResendsTheOldestOnly) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  lab::Sender tx(no_responder(3, 10ms, lab::Retransmit::kSelectiveRepeat));
  lab::SenderStats s = tx.run();
  EXPECT_EQ(s.qps_failed, 3u);
  EXPECT_EQ(s.completed, 0u);
  EXPECT_EQ(s.timeouts, 3u * 2u);
  EXPECT_EQ(s.packets, 3u * (4u + 2u));
  EXPECT_EQ(s.retransmits, 3u * 2u);
}

// The defaults are `roceguard nic`'s: one profile for the NIC and the lab's
// generator.
TEST(RoceGen, RetransmitDefaultsAreTheNicProfiles) {
  const nic::Profile profile;
  const lab::AckTimeoutSetting t = lab::default_ack_timeout();
  EXPECT_EQ(t.text, profile.ack_timeout_text);
  EXPECT_EQ(t.exponent, profile.ack_timeout.exponent);
  EXPECT_DOUBLE_EQ(t.effective_us, profile.ack_timeout.effective_us);
  EXPECT_EQ(t.wait, std::chrono::microseconds(67109));  // 4.096 us x 2^14, rounded up
  EXPECT_EQ(lab::SenderConfig{}.timeout, t.wait);
  EXPECT_EQ(lab::SenderConfig{}.retry_cnt, profile.retry_cnt);
  EXPECT_EQ(lab::default_retry_cnt(), profile.retry_cnt);
  EXPECT_EQ(lab::LabOptions{}.ack_timeout, profile.ack_timeout_text);
  EXPECT_EQ(lab::LabOptions{}.retry_cnt, profile.retry_cnt);
  EXPECT_EQ(lab::LabOptions{}.retransmit, "gbn");
  EXPECT_EQ(lab::LabOptions{}.transport, "rc");
  EXPECT_EQ(lab::SenderConfig{}.retransmit, lab::Retransmit::kGoBackN);
}

// --ack-timeout rounds up to 4.096 us x 2^t exactly as the profile does.
TEST(RoceGen, AckTimeoutRoundsUpToTheIbaExponent) {
  struct Case {
    const char* text;
    unsigned exponent;
    int64_t wait_us;
  } cases[] = {{"9ms", 12, 16778},     // 16.777216 ms
               {"500us", 7, 525},      // 524.288 us
               {"524.288us", 7, 525},  // exactly t = 7
               {"1ns", 1, 9},          // 8.192 us: t = 0 would mean "never"
               {"67ms", 14, 67109},
               {"1s", 18, 1073742}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    lab::AckTimeoutSetting t = lab::ack_timeout_setting(c.text);
    EXPECT_EQ(t.exponent, c.exponent);
    EXPECT_DOUBLE_EQ(t.effective_us, nic::ack_timeout_us(static_cast<uint8_t>(c.exponent)));
    EXPECT_EQ(t.wait.count(), c.wait_us);
    EXPECT_EQ(t.text, c.text);
  }
  for (const char* bad : {"10", "abc", "0ms", "-5ms", "10000s", ""}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(lab::ack_timeout_problem(bad).empty());
    try {
      lab::ack_timeout_setting(bad);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      EXPECT_EQ(std::string(e.what()).rfind("--ack-timeout: ", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(lab::parse_retransmit("gbn"), lab::Retransmit::kGoBackN);
  EXPECT_EQ(lab::parse_retransmit("sr"), lab::Retransmit::kSelectiveRepeat);
  EXPECT_FALSE(lab::parse_retransmit("SR"));
  EXPECT_FALSE(lab::parse_retransmit(""));
}

// The sender waits the effective timeout, not the text: "9ms" is t = 12,
// 16.78 ms, so a QP with no responder fails after retry_cnt + 1 = 3 expiries
// and no sooner than 3 x 16.78 ms (9 ms as given would be 27 ms). A lower
// bound only: a busy machine can make it later, never earlier.
TEST(RoceGen, NoResponderWaitsTheEffectiveAckTimeout) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  const lab::AckTimeoutSetting t = lab::ack_timeout_setting("9ms");
  for (auto mode : {lab::Retransmit::kGoBackN, lab::Retransmit::kSelectiveRepeat}) {
    SCOPED_TRACE(lab::retransmit_name(mode));
    lab::Sender tx(no_responder(1, t.wait, mode));
    lab::SenderStats s = tx.run();
    EXPECT_EQ(s.qps_failed, 1u);
    EXPECT_EQ(s.timeouts, 2u);
    const double elapsed_us = std::chrono::duration<double, std::micro>(s.elapsed).count();
    EXPECT_GE(elapsed_us + 1000.0, 3 * t.effective_us);  // elapsed is in whole milliseconds
  }
}

// Enough in flight to fill the line over the round trip: the
// bandwidth-delay product of 1082-byte frames (1024 B payload), twice over,
// shared by the QPs, at least 32 and at most 32768 per QP.
TEST(RoceGen, WindowIsTheBandwidthDelayProduct) {
  using std::chrono::microseconds;
  const size_t frame = lab::lab_wire_bytes(1024);
  EXPECT_EQ(frame, 1082u);
  EXPECT_EQ(lab::lab_round_trip(microseconds(0)), lab::kLabBaseRtt);
  EXPECT_EQ(lab::lab_round_trip(10ms), microseconds(20070));
  // The lab's default, 100 Mbit/s without WAN delay: less than a packet in
  // flight, so the floor.
  EXPECT_EQ(lab::window_for_path(100, lab::lab_round_trip(0us), frame, 4), lab::kMinWindow);
  // 400 Mbit/s, 10 ms each way, 4 QPs: 927.4 packets in flight, x2 / 4.
  EXPECT_EQ(lab::window_for_path(400, lab::lab_round_trip(10ms), frame, 4), 464u);
  // 1 Gbit/s, 1 ms, one QP: 115.5 packets, x2.
  EXPECT_EQ(lab::window_for_path(1000, 1ms, frame, 1), 232u);
  // 10 Gbit/s across 20 ms: 23186.7 packets, x2 / 4.
  EXPECT_EQ(lab::window_for_path(10000, lab::lab_round_trip(10ms), frame, 4), 11594u);
  // 10 Gbit/s across a second on one QP: more than a send queue holds.
  EXPECT_EQ(lab::window_for_path(10000, 1s, frame, 1), lab::kMaxWindow);
  EXPECT_EQ(lab::kMaxWindow, 32768u);
  EXPECT_EQ(lab::window_for_path(10000, 1ms, frame, 0), lab::kMinWindow);  // no QPs: nothing to size
  EXPECT_EQ(lab::SenderConfig{}.window, lab::kMinWindow);
}

// The banner and the summary say what the requesters were set to, the mode
// by the name the report gives it.
TEST(RoceGen, LabSettingsShowWindowTimeoutAndMode) {
  lab::LabSettings s;
  s.window = 464;
  s.window_mbit = 400;
  s.rtt = lab::lab_round_trip(10ms);
  s.ack_timeout = lab::default_ack_timeout();
  s.retry_cnt = 7;
  s.retransmit = lab::Retransmit::kSelectiveRepeat;
  const std::string text = lab::sender_text(s);
  for (const char* part : {"window 464 packets per QP = bandwidth-delay product at 400 Mbit/s and RTT 20.07ms",
                           "ACK timeout 67ms -> t = 14 (67.109ms), retry_cnt 7",
                           "selective repeat (a model of ConnectX-6 Dx and later with ROCE_ACCL)"})
    EXPECT_NE(text.find(part), std::string::npos) << text;
  s.retransmit = lab::Retransmit::kGoBackN;
  EXPECT_NE(lab::sender_text(s).find("; Go-Back-N"), std::string::npos) << lab::sender_text(s);
}

// Bad values of the retransmit options are usage errors naming the option,
// in both commands, before anything is built.
TEST(RoceGen, RetransmitOptionsRejectBadValues) {
  expect_usage_errors({
      {{ROCEGUARD_BIN, "lab", "--ack-timeout", "10"}, "--ack-timeout: \"10\" has no unit"},
      {{ROCEGUARD_BIN, "lab", "--ack-timeout", "10000s"}, "--ack-timeout: 10000s is longer than the largest"},
      {{ROCEGUARD_BIN, "lab", "--ack-timeout", "0ms"}, "--ack-timeout: must be positive"},
      {{ROCEGUARD_BIN, "lab", "--retry-cnt", "8"}, "--retry-cnt"},
      {{ROCEGUARD_BIN, "lab", "--retransmit", "selective"}, "--retransmit"},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--ack-timeout", "5"}, "--ack-timeout: \"5\" has no unit"},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--retry-cnt", "9"}, "--retry-cnt"},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--retransmit", "go-back-n"}, "--retransmit"},
      {{ROCE_GEN_BIN, "recv", "--retransmit", "sack"}, "--retransmit"},
      {{ROCE_GEN_BIN, "send", "--peer", "127.0.0.1", "--window", "40000"}, "--window"},
  });
}

// Across the lab's WAN dropping 2 % of RoCE packets either way, with the
// gateways as plain routers: Go-Back-N resends the window behind every
// loss, selective repeat about one packet per drop (a lost request, or a
// lost NAK or ACK that only the timer recovers). Both deliver everything,
// in order.
class RoceGenLossy : public LabTest {};

TEST_F(RoceGenLossy, SelectiveRepeatResendsOnlyWhatWasLost) {
  wan_->configure({20000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 2 %
  std::map<lab::Retransmit, Traffic> runs;
  std::map<lab::Retransmit, uint64_t> requests_dropped, drops;
  for (auto mode : {lab::Retransmit::kGoBackN, lab::Retransmit::kSelectiveRepeat}) {
    SCOPED_TRACE(lab::retransmit_name(mode));
    const auto before_ab = wan_->stats("to-a", RG_WAN_ROCE).dropped;
    const auto before_all = wan_->total(RG_WAN_ROCE).dropped;
    lab::SenderConfig cfg;
    cfg.peer = receiver_addr(false);
    cfg.qps.count = 4;
    cfg.messages = 1000;
    cfg.payload = 1024;
    cfg.duration = 60s;
    cfg.retransmit = mode;
    lab::ReceiverConfig rcfg;
    rcfg.retransmit = mode;
    rcfg.ooo_window = cfg.window;
    Traffic t = run_traffic(cfg, rcfg, [&](const lab::SenderStats& s) {
      return s.packets - (wan_->stats("to-a", RG_WAN_ROCE).dropped - before_ab);
    });
    requests_dropped[mode] = wan_->stats("to-a", RG_WAN_ROCE).dropped - before_ab;
    drops[mode] = wan_->total(RG_WAN_ROCE).dropped - before_all;
    EXPECT_EQ(t.sent.qps_done, 4u);
    EXPECT_EQ(t.sent.qps_failed, 0u);
    EXPECT_EQ(t.sent.completed, 4000u);
    EXPECT_EQ(t.received.delivered, 4000u);
    EXPECT_EQ(t.received.goodput_bytes, 4000u * 1024u);
    EXPECT_GT(requests_dropped[mode], 0u);
    EXPECT_GE(t.sent.retransmits, requests_dropped[mode]);  // each lost request is sent again
    report(std::string("retransmit_") + lab::retransmit_name(mode),
           {{"sent", t.sent.packets},
            {"wan_dropped_requests", requests_dropped[mode]},
            {"wan_dropped_all", drops[mode]},
            {"retransmits", t.sent.retransmits},
            {"naks", t.sent.naks},
            {"timeouts", t.sent.timeouts},
            {"kept_out_of_order", t.received.out_of_order},
            {"duplicates_at_b", t.received.duplicates}});
    runs[mode] = t;
  }
  const auto& gbn = runs[lab::Retransmit::kGoBackN];
  const auto& sr = runs[lab::Retransmit::kSelectiveRepeat];
  EXPECT_GT(gbn.sent.retransmits, 2 * drops[lab::Retransmit::kGoBackN]);
  EXPECT_LE(sr.sent.retransmits, 2 * drops[lab::Retransmit::kSelectiveRepeat]);
  EXPECT_GT(sr.received.out_of_order, 0u);  // kept, then delivered once the holes filled
  EXPECT_GE(sr.sent.naks, 1u);
}

// UC across the lab's WAN dropping 2 % of RoCE packets either way, the
// gateways plain routers: every PSN is sent once, so host B lacks exactly
// the packets the WAN dropped on the way to it, and its PSN tracker counts
// each of them but those above the highest PSN of their QP that arrived.
TEST_F(RoceGenLossy, UcLosesExactlyWhatTheWanDropped) {
  wan_->configure({20000, 0, RG_WAN_F_BLEACH | RG_WAN_F_ROCE_ONLY, 0, 0, 0, 0, 0});  // 2 %
  const auto before_ab = wan_->stats("to-a", RG_WAN_ROCE).dropped;
  lab::SenderConfig cfg;
  cfg.peer = receiver_addr(false);
  cfg.qps.count = 4;
  cfg.messages = 1000;
  cfg.payload = 1024;
  cfg.duration = 60s;
  cfg.transport = lab::Transport::kUc;
  cfg.pace_pps = 10000;
  lab::ReceiverConfig rcfg;
  rcfg.transport = lab::Transport::kUc;
  Traffic t = run_traffic(cfg, rcfg, [&](const lab::SenderStats& s) {
    return s.packets - (wan_->stats("to-a", RG_WAN_ROCE).dropped - before_ab);
  });
  const uint64_t dropped = wan_->stats("to-a", RG_WAN_ROCE).dropped - before_ab;
  const uint64_t after_last = lab::psns_after_last_arrival(t.sent, t.received);
  report("uc", {{"sent", t.sent.packets},
                {"wan_dropped_requests", dropped},
                {"received", t.received.packets},
                {"psn_gaps", t.received.lost_estimate},
                {"before_first_arrival", t.received.psns_before_first_arrival},
                {"after_last_arrival", after_last}});
  EXPECT_EQ(t.sent.qps_done, 4u);
  EXPECT_EQ(t.sent.packets, 4000u);
  EXPECT_EQ(t.sent.completed, 4000u);
  EXPECT_EQ(t.sent.retransmits + t.sent.acks + t.sent.naks + t.sent.timeouts, 0u);
  EXPECT_GT(dropped, 0u) << "2 % of 4000: the WAN drops some";
  EXPECT_EQ(t.received.socket_drops, 0u);
  EXPECT_EQ(t.received.packets + dropped, t.sent.packets);
  EXPECT_EQ(t.received.delivered, t.received.packets);
  EXPECT_EQ(t.received.duplicates + t.received.seen_retransmits, 0u);
  // A QP's first PSNs lost show as no gap either: nothing came before them.
  EXPECT_EQ(t.received.lost_estimate + t.received.psns_before_first_arrival + after_last, dropped);
  EXPECT_EQ(t.received.acks + t.received.naks, 0u);
}

}  // namespace
}  // namespace rg::test
