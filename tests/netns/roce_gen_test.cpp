// The generator on its own: the BTH layout roceguard's parser expects, and
// RC behaviour over loopback in a namespace of its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include "lab/proc.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"
#include "lab_fixture.h"
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

TEST(RoceGen, LoopbackCompletesWithCoalescedAcks) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  for (const char* peer : {"127.0.0.1", "::1"}) {
    SCOPED_TRACE(peer);
    lab::ReceiverConfig rcfg;
    rcfg.reply_port = kReplyPort;
    rcfg.qps.count = 2;
    lab::Receiver rx(rcfg);
    rx.start();
    lab::SenderConfig cfg;
    cfg.peer = peer;
    cfg.ack_port = kReplyPort;
    cfg.qps.count = 2;
    cfg.messages = 100;
    cfg.ack_req_every = 4;
    cfg.tos = RG_DEFAULT_DSCP << 2;
    cfg.timeout = 1s;
    cfg.duration = 30s;
    lab::Sender tx(cfg);
    lab::SenderStats s = tx.run();
    rx.stop();
    lab::ReceiverStats r = rx.stats();

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

// No responder: every QP gives up after retry_cnt timeouts, it never hangs.
TEST(RoceGen, NoResponderFailsAfterRetries) {
  ASSERT_EQ(geteuid(), 0u) << "network namespaces need root";
  LoopbackNetns ns;
  lab::NetnsGuard in(ns.name());
  lab::SenderConfig cfg;
  cfg.peer = "127.0.0.1";
  cfg.ack_port = kReplyPort;
  cfg.qps.count = 3;
  cfg.messages = 10;
  cfg.window = 4;
  cfg.retry_cnt = 2;
  cfg.timeout = 10ms;
  cfg.duration = 30s;
  lab::Sender tx(cfg);
  lab::SenderStats s = tx.run();
  EXPECT_EQ(s.qps_failed, 3u);
  EXPECT_EQ(s.completed, 0u);
  EXPECT_EQ(s.timeouts, 3u * 2u);
  // First window, then the same window again after each timeout.
  EXPECT_EQ(s.packets, 3u * 4u * 3u);
  EXPECT_EQ(s.retransmits, 3u * 4u * 2u);
}

}  // namespace
}  // namespace rg::test
