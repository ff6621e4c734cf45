// The netlink module (loader/common/netlink.h) against the kernel and against a
// user-space port that plays the kernel: an answer taken, the kernel's error
// answer named, an answer that never comes timed out, messages of another
// sequence number, port id or sender never taken as the answer, and an event
// socket that overflows reporting its lost events. Every kernel request goes
// to a private network namespace (unshare(CLONE_NEWNET)) that the case leaves
// at its end: the namespace, and whatever it holds, goes with its last socket.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "common/netlink.h"
#include "dataplane/nexthop_lease.h"

namespace {

using rg::EventRead;
using rg::NetlinkError;
using rg::NetlinkRequest;
using rg::NetlinkSocket;

// This process in a network namespace of its own for the life of the
// object, then back in the one it came from.
class PrivateNetns {
 public:
  PrivateNetns() : old_(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) {
    if (old_ < 0) {
      why_ = std::string("open /proc/self/ns/net: ") + std::strerror(errno);
    } else if (unshare(CLONE_NEWNET) != 0) {
      why_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
    }
  }
  ~PrivateNetns() {
    if (old_ < 0) return;
    if (why_.empty() && setns(old_, CLONE_NEWNET) != 0) std::abort();  // never run on in the wrong namespace
    close(old_);
  }
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }

 private:
  int old_;
  std::string why_;
};

class Netlink : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ns_.ok()) << ns_.why() << " (the test needs root)"; }

  // lo's index in the namespace (1 in every new one; asked all the same).
  int lo() const { return static_cast<int>(if_nametoindex("lo")); }

  NetlinkRequest getlink(int ifindex) {
    NetlinkRequest req("RTM_GETLINK ifindex " + std::to_string(ifindex), RTM_GETLINK);
    auto* ifi = req.header<ifinfomsg>();
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    return req;
  }

  void set_lo(NetlinkSocket& nl, bool up) {
    NetlinkRequest req(up ? "RTM_NEWLINK lo up" : "RTM_NEWLINK lo down", RTM_NEWLINK);
    auto* ifi = req.header<ifinfomsg>();
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = lo();
    ifi->ifi_flags = up ? IFF_UP : 0;
    ifi->ifi_change = IFF_UP;
    nl.request(req);
  }

  PrivateNetns ns_;  // first: left after every socket of the case is closed
};

// IFLA_IFNAME of an RTM_NEWLINK message ("" if none).
std::string link_name(const nlmsghdr& m) {
  std::string name;
  rg::for_each_attr(m, sizeof(ifinfomsg), [&](const nlattr& a) {
    if (rg::attr_type(a) != IFLA_IFNAME) return true;
    name = rg::attr_string(a);
    return false;
  });
  return name;
}

TEST(NetlinkMessage, AttributesAndNestsReadBackAsBuilt) {
  NetlinkRequest req("a request", RTM_NEWLINK);
  auto* ifi = req.header<ifinfomsg>();
  ifi->ifi_index = 7;
  req.put_string(IFLA_IFNAME, "rg0");
  nlattr* info = req.nest_start(IFLA_LINKINFO);
  req.put_string(IFLA_INFO_KIND, "veth");
  req.nest_end(info);
  req.put_u32(IFLA_MTU, 9000);
  const nlmsghdr& m = *req.message();
  EXPECT_EQ(m.nlmsg_type, RTM_NEWLINK);
  EXPECT_EQ(m.nlmsg_flags & (NLM_F_REQUEST | NLM_F_ACK), NLM_F_REQUEST | NLM_F_ACK);
  EXPECT_EQ(rg::payload<ifinfomsg>(m)->ifi_index, 7);

  std::vector<uint16_t> types;
  std::string kind;
  uint32_t mtu = 0;
  rg::for_each_attr(m, sizeof(ifinfomsg), [&](const nlattr& a) {
    types.push_back(rg::attr_type(a));
    if (rg::attr_type(a) == IFLA_LINKINFO) {
      EXPECT_TRUE(a.nla_type & NLA_F_NESTED);
      rg::for_each_nested(a, [&](const nlattr& n) {
        if (rg::attr_type(n) == IFLA_INFO_KIND) kind = rg::attr_string(n);
        return true;
      });
    }
    if (rg::attr_type(a) == IFLA_MTU && rg::attr_len(a) == sizeof(mtu))
      std::memcpy(&mtu, rg::attr_payload(a), sizeof(mtu));
    return true;
  });
  EXPECT_EQ(types, (std::vector<uint16_t>{IFLA_IFNAME, IFLA_LINKINFO, IFLA_MTU}));
  EXPECT_EQ(link_name(m), "rg0");
  EXPECT_EQ(kind, "veth");
  EXPECT_EQ(mtu, 9000u);
}

TEST_F(Netlink, KernelAnswersARequest) {
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req = getlink(lo());
  std::vector<std::string> names;
  nl.request(req, [&](const nlmsghdr& m) {
    EXPECT_EQ(m.nlmsg_type, RTM_NEWLINK);
    EXPECT_EQ(m.nlmsg_seq, req.message()->nlmsg_seq);
    EXPECT_EQ(m.nlmsg_pid, nl.port_id());
    names.push_back(link_name(m));
  });
  EXPECT_EQ(names, std::vector<std::string>{"lo"});

  // A second request on the same socket: its own sequence number, its own answer.
  NetlinkRequest again = getlink(lo());
  int answers = 0;
  nl.request(again, [&](const nlmsghdr&) { ++answers; });
  EXPECT_NE(again.message()->nlmsg_seq, req.message()->nlmsg_seq);
  EXPECT_EQ(answers, 1);
}

TEST_F(Netlink, KernelAnswersADumpUpToItsEnd) {
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req("RTM_GETLINK dump", RTM_GETLINK, NLM_F_DUMP);
  req.header<ifinfomsg>()->ifi_family = AF_UNSPEC;
  std::set<std::string> names;
  nl.request(req, [&](const nlmsghdr& m) { names.insert(link_name(m)); });
  EXPECT_TRUE(names.count("lo")) << names.size() << " links";
}

TEST_F(Netlink, KernelErrorNamesTheRequestAndItsErrno) {
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req = getlink(0x7ffffff0);  // no such device in a new namespace
  try {
    nl.request(req);
    FAIL() << "no error for a device that does not exist";
  } catch (const NetlinkError& e) {
    EXPECT_TRUE(e.kernel());
    EXPECT_EQ(e.error(), ENODEV);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("RTM_GETLINK ifindex " + std::to_string(0x7ffffff0) + ": ", 0), 0u) << what;
    EXPECT_NE(what.find(std::strerror(ENODEV)), std::string::npos) << what;
  }
}

TEST_F(Netlink, KernelErrorCarriesTheKernelsMessage) {
  // An IPv4 address without IFA_LOCAL: the kernel refuses it with EINVAL
  // and says why in the extended ACK.
  NetlinkSocket nl(NETLINK_ROUTE);
  NetlinkRequest req("RTM_NEWADDR on lo without an address", RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
  auto* ifa = req.header<ifaddrmsg>();
  ifa->ifa_family = AF_INET;
  ifa->ifa_prefixlen = 24;
  ifa->ifa_index = static_cast<unsigned>(lo());
  try {
    nl.request(req);
    FAIL() << "the kernel took an address without one";
  } catch (const NetlinkError& e) {
    EXPECT_TRUE(e.kernel());
    EXPECT_EQ(e.error(), EINVAL);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("RTM_NEWADDR on lo without an address: ", 0), 0u) << what;
    // The kernel's words, in brackets after the errno's.
    EXPECT_NE(what.find(std::string(std::strerror(EINVAL)) + " ("), std::string::npos) << what;
    EXPECT_EQ(what.back(), ')') << what;
  }
}

// A port that takes requests and never answers: the request ends in a
// timeout that names it, having reached that port.
TEST_F(Netlink, AnswerThatNeverComesTimesOut) {
  NetlinkSocket silent(NETLINK_USERSOCK);
  NetlinkSocket nl(NETLINK_USERSOCK);
  nl.set_timeout(std::chrono::milliseconds(200));
  NetlinkRequest req("a request to a silent port", 0x100);
  req.put_u32(1, 42);
  try {
    nl.request(req, {}, silent.port_id());
    FAIL() << "an answer from a port that sent none";
  } catch (const NetlinkError& e) {
    EXPECT_FALSE(e.kernel());
    EXPECT_EQ(e.error(), ETIMEDOUT);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("a request to a silent port: no answer from port " + std::to_string(silent.port_id()) +
                             " within 200 ms",
                         0),
              0u)
        << what;
  }
  char buf[256];
  const ssize_t n = recv(silent.fd(), buf, sizeof(buf), MSG_DONTWAIT);
  ASSERT_GT(n, 0) << "the request never reached the silent port";
  EXPECT_EQ(reinterpret_cast<const nlmsghdr*>(buf)->nlmsg_type, 0x100);
}

// What the stand-in for the kernel sends before the real answer.
enum class Stray { kOtherSequence, kOtherPortId, kOtherSender };

constexpr uint16_t kAnswerType = 0x100;

// One datagram: a data message carrying marker (kAnswerType), then an ACK
// of the same sequence number and port id.
std::vector<char> answer(uint32_t seq, uint32_t pid, uint32_t marker) {
  std::vector<char> buf(NLMSG_SPACE(sizeof(marker)) + NLMSG_SPACE(sizeof(nlmsgerr)));
  auto* data = reinterpret_cast<nlmsghdr*>(buf.data());
  data->nlmsg_len = NLMSG_LENGTH(sizeof(marker));
  data->nlmsg_type = kAnswerType;
  data->nlmsg_seq = seq;
  data->nlmsg_pid = pid;
  std::memcpy(NLMSG_DATA(data), &marker, sizeof(marker));
  auto* ack = reinterpret_cast<nlmsghdr*>(buf.data() + NLMSG_SPACE(sizeof(marker)));
  ack->nlmsg_len = NLMSG_LENGTH(sizeof(nlmsgerr));
  ack->nlmsg_type = NLMSG_ERROR;
  ack->nlmsg_flags = NLM_F_CAPPED;
  ack->nlmsg_seq = seq;
  ack->nlmsg_pid = pid;
  return buf;
}

void send_to(int fd, uint32_t port, const std::vector<char>& buf) {
  sockaddr_nl to{};
  to.nl_family = AF_NETLINK;
  to.nl_pid = port;
  ASSERT_EQ(sendto(fd, buf.data(), buf.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
            static_cast<ssize_t>(buf.size()))
      << std::strerror(errno);
}

// Sends req through nl to a stand-in that answers first with the stray
// (marker 1), then with the real answer (marker 2); returns the markers
// the request handed on.
std::vector<uint32_t> request_past(Stray stray) {
  NetlinkSocket peer(NETLINK_USERSOCK);
  NetlinkSocket other(NETLINK_USERSOCK);
  NetlinkSocket nl(NETLINK_USERSOCK);
  nl.set_timeout(std::chrono::milliseconds(5000));
  std::thread responder([&] {
    pollfd p{peer.fd(), POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return;  // bounded: the request fails by its own timeout then
    alignas(nlmsghdr) char buf[512];
    if (recv(peer.fd(), buf, sizeof(buf), 0) < static_cast<ssize_t>(sizeof(nlmsghdr))) return;
    const auto* req = reinterpret_cast<const nlmsghdr*>(buf);
    const uint32_t seq = req->nlmsg_seq, pid = nl.port_id();
    switch (stray) {
      case Stray::kOtherSequence: send_to(peer.fd(), pid, answer(seq + 1, pid, 1)); break;
      case Stray::kOtherPortId: send_to(peer.fd(), pid, answer(seq, pid + 1, 1)); break;
      case Stray::kOtherSender: send_to(other.fd(), pid, answer(seq, pid, 1)); break;
    }
    send_to(peer.fd(), pid, answer(seq, pid, 2));
  });
  std::vector<uint32_t> markers;
  NetlinkRequest req("a request to a stand-in", kAnswerType);
  try {
    nl.request(
        req,
        [&](const nlmsghdr& m) {
          uint32_t marker = 0;
          std::memcpy(&marker, NLMSG_DATA(&m), sizeof(marker));
          markers.push_back(marker);
        },
        peer.port_id());
  } catch (const NetlinkError& e) {
    ADD_FAILURE() << e.what();
  }
  responder.join();
  return markers;
}

TEST(NetlinkAnswer, AnotherSequenceNumberIsNotTheAnswer) {
  EXPECT_EQ(request_past(Stray::kOtherSequence), std::vector<uint32_t>{2});
}

TEST(NetlinkAnswer, AnotherPortIdIsNotTheAnswer) {
  EXPECT_EQ(request_past(Stray::kOtherPortId), std::vector<uint32_t>{2});
}

TEST(NetlinkAnswer, AnotherSenderIsNotTheAnswer) {
  EXPECT_EQ(request_past(Stray::kOtherSender), std::vector<uint32_t>{2});
}

// Reads the event socket until it is empty (bounded); counts what it read.
struct Drained {
  int datagrams = 0;
  int lost = 0;
  std::set<std::string> links;
};
Drained drain(NetlinkSocket& events) {
  Drained d;
  for (int i = 0; i < 100000; ++i) {
    const EventRead r = events.read_events([&](const nlmsghdr& m) {
      if (m.nlmsg_type == RTM_NEWLINK) d.links.insert(link_name(m));
    });
    if (r == EventRead::kNone) break;
    (r == EventRead::kLost ? d.lost : d.datagrams)++;
  }
  return d;
}

TEST_F(Netlink, EventSocketOverrunReportsLostEvents) {
  NetlinkSocket events(NETLINK_ROUTE, RTMGRP_LINK);
  events.set_receive_buffer(1);  // the kernel's minimum: a few messages
  NetlinkSocket nl(NETLINK_ROUTE);

  // Read as they come: every event, none lost.
  set_lo(nl, true);
  Drained first = drain(events);
  EXPECT_GE(first.datagrams, 1);
  EXPECT_EQ(first.lost, 0);
  EXPECT_TRUE(first.links.count("lo"));

  // Not read: the queue overflows and the kernel drops the rest.
  constexpr int kToggles = 200;
  for (int i = 0; i < kToggles; ++i) set_lo(nl, i % 2 == 1);
  Drained overrun = drain(events);
  EXPECT_GE(overrun.lost, 1) << "no lost events reported after " << kToggles << " unread link changes ("
                             << overrun.datagrams << " datagrams read)";
  EXPECT_LT(overrun.datagrams, kToggles);

  // And the socket goes on after the loss.
  set_lo(nl, false);
  Drained after = drain(events);
  EXPECT_GE(after.datagrams, 1);
  EXPECT_EQ(after.lost, 0);
}

// The next-hop lease's route query through the module: lo's local route
// has one next hop; an address with no route has none.
TEST_F(Netlink, SinglePathRouteAsksTheKernel) {
  NetlinkSocket nl(NETLINK_ROUTE);
  set_lo(nl, true);
  const auto local = rg::parse_address("127.0.0.1");
  const auto there = rg::parse_address("127.0.0.2");
  const auto nowhere = rg::parse_address("192.0.2.1");
  ASSERT_TRUE(local && there && nowhere);
  EXPECT_TRUE(rg::single_path_route(*local, *there));
  EXPECT_FALSE(rg::single_path_route(*local, *nowhere));  // the kernel answers ENETUNREACH
}

}  // namespace
