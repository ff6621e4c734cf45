// Runs the roceguard BPF programs on single packets with BPF_PROG_TEST_RUN.
//
// The test process moves into a network namespace of its own before the
// first test (see TopologyEnv): one veth pair with documentation addresses
// and permanent neighbours, so bpf_fib_lookup() resolves the tunnel peers
// without any traffic leaving the process. The namespace dies with it.
#pragma once

#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sched.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/maps.h"
#include "dataplane/tunnel_auth.h"
#include "packet.h"
#include "roceguard.skel.h"

namespace rg::test {

// The private topology: the device under test and its one neighbour.
inline constexpr const char* kDev = "rgdp0";
inline constexpr const char* kLocal4 = "192.0.2.1";
inline constexpr const char* kPeer4 = "192.0.2.2";
inline constexpr const char* kLocal6 = "2001:db8::1";
inline constexpr const char* kPeer6 = "2001:db8::2";
inline constexpr const char* kUnreachable4 = "198.51.100.99";  // no route
inline constexpr const char* kNoNeigh4 = "192.0.2.3";  // on link, never resolved
inline constexpr const char* kNoNeigh6 = "2001:db8::3";
inline const Mac kDevMac = {0x02, 0x00, 0x00, 0x00, 0x0a, 0x01};
inline const Mac kPeerMac = {0x02, 0x00, 0x00, 0x00, 0x0b, 0x02};
// A second device: peers behind it need a redirect away from kDev.
inline constexpr const char* kOtherDev = "rgdp1";
inline constexpr const char* kOtherLocal4 = "198.51.100.129";
inline constexpr const char* kOtherPeer4 = "198.51.100.130";
inline constexpr const char* kOtherLocal6 = "2001:db8:1::1";
inline constexpr const char* kOtherPeer6 = "2001:db8:1::2";
inline const Mac kOtherDevMac = {0x02, 0x00, 0x00, 0x00, 0x0c, 0x01};
inline const Mac kOtherPeerMac = {0x02, 0x00, 0x00, 0x00, 0x0c, 0x02};
// The tunnel routes the tests install: inner prefixes behind the peers.
inline constexpr const char* kRemoteNet4 = "203.0.113.0";   // /24 -> IPv4 peer
inline constexpr const char* kRemoteNet6 = "2001:db8:6::";  // /48 -> IPv6 peer
inline constexpr uint32_t kVni4 = 0x00abcd;
inline constexpr uint32_t kVni6 = 0x123456;
// Peer slots of the standard tunnels: ours, then the far ends' view of them.
inline constexpr uint32_t kPeerSlot4 = 0;
inline constexpr uint32_t kPeerSlot6 = 1;
inline constexpr uint32_t kFarEnd4 = 2;
inline constexpr uint32_t kFarEnd6 = 3;
// The sequence epoch of every test load (rg_config.tunnel_epoch).
inline constexpr uint16_t kTestEpoch = 0xeed;  // 12 bits, as the option carries it

inline constexpr uint32_t kTcPass = static_cast<uint32_t>(-1);  // TC_ACT_UNSPEC
inline constexpr uint32_t kTcShot = 2;                          // TC_ACT_SHOT
inline constexpr uint32_t kXdpDrop = 1;
inline constexpr uint32_t kXdpPass = 2;
inline constexpr uint32_t kXdpRedirect = 4;

int dev_ifindex();
// Does this run put rg_tc_ingress where the cases name XDP (see Dataplane::xdp)?
bool ingress_at_tc();
int other_dev_ifindex();

// The standard tunnels' two peers (kPeerSlot4, kPeerSlot6) as the loader
// configures them, for the next-hop leases.
std::vector<PeerConfig> harness_peers();

// What the tests load: the compiled-in defaults, plus 0xff poison in every
// header byte the program builds so a field it forgets to set shows.
rg_config test_config();

struct Verdict {
  uint32_t ret = 0;
  Bytes out;
  uint32_t skb_priority = 0;  // tc: skb->priority as the program left it
  uint64_t tstamp = 0;        // tc: skb->tstamp as the program left it (the departure time it set)
};

// Counter values that are not zero, by event name (readable when a test fails).
using Events = std::map<std::string, uint64_t>;

// The contents of every map a case can change (all but the program array
// and the frozen configuration), by map name: key bytes -> value bytes.
using MapImage = std::map<std::string, std::map<Bytes, Bytes>>;

// A loaded object. Loading and verifying roceguard.bpf.o takes a second or
// two and a case milliseconds, so each configuration is loaded once per
// process and lent to one Dataplane at a time: a case gets it back with
// every map as the load left it, checked (see LoadedObject::lend), as if it
// had loaded the object itself.
struct LoadedObject;

class Dataplane {
 public:
  explicit Dataplane(const rg_config& cfg = test_config());
  // An object loaded for this Dataplane alone and destroyed with it.
  struct FreshLoad {};
  Dataplane(const rg_config& cfg, FreshLoad);
  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  // rg_tc_egress / rg_xdp_ingress on kDev; repeat > 1 runs the program that
  // many times on the frame in one syscall (the output is the last run's).
  // With ROCEGUARD_TEST_INGRESS=tc, xdp() runs rg_tc_ingress instead and
  // answers with the XDP verdict of its pass or shot: every ingress case
  // then holds the TC ingress program to the same expectations.
  Verdict tc(const Bytes& in, uint32_t repeat = 1);
  Verdict xdp(const Bytes& in, uint32_t repeat = 1);
  // rg_tc_ingress on kDev, whatever ROCEGUARD_TEST_INGRESS says: what only
  // the TC ingress hook does (the congestion loop's CNPs).
  Verdict tc_ingress(const Bytes& in);
  // rg_xdp_ingress on a frame arriving on ifindex, whatever
  // ROCEGUARD_TEST_INGRESS says: the XDP fast path exists at XDP only.
  Verdict xdp_at(const Bytes& in, int ifindex);
  // Lets the fast path redirect to ifindex (rg_xdp_tx), as the loader does
  // for each interface it attaches, with its address (rg_ifaces).
  void forward_to(int ifindex);
  // rg_tc_egress on a packet the stack gave skb_priority.
  Verdict tc_with_priority(const Bytes& in, uint32_t skb_priority);

  // Tunnel configuration, written as the loader would.
  void peer(uint32_t idx, const std::string& local, const std::string& remote, uint32_t vni,
            uint16_t mtu = 1500);
  void route(const std::string& prefix, uint32_t prefixlen, uint32_t peer_idx);
  // The loss shield towards peer idx (RG_PEER_F_SHIELD_*), as the loader writes it.
  void shield(uint32_t idx, uint8_t flags);
  // What `roceguard run` writes for peer idx (rg_peer_ctl): the feedback
  // its option's extension carries, the shield "auto" turned on, until
  // until_ns (bpf_ktime_get_coarse_ns(); by default, for good).
  void peer_ctl(uint32_t idx, uint32_t feedback, uint8_t shield = 0, uint64_t until_ns = UINT64_MAX);
  // The congestion loop's decision for peer idx (rg_peer_cc), as `roceguard run` writes it.
  void peer_cc(uint32_t idx, const rg_peer_cc& cc);
  // Peer idx's phantom queue and its counts (rg_peer_pq).
  rg_peer_pq peer_pq(uint32_t idx) const;
  // The tunnel keys of peer idx (rg_peer_auth) as the loader writes them
  // from its key_file, for the addresses and VNI its slot holds; none: no key.
  void auth(uint32_t idx, const std::vector<TunnelKey>& keys);
  // What peer idx's option said, summed (copied, the delays) or newest (the
  // rest; the report by its own time) over CPUs.
  rg_peer_rx peer_rx(uint32_t idx) const;
  // Geneve from remote on vni is decapsulated when sent to peer_idx's local address.
  void decap(const std::string& remote, uint32_t vni, uint32_t peer_idx);
  // The standard set: 203.0.113.0/24 via the IPv4 peer, 2001:db8:6::/48 via
  // the IPv6 peer, Geneve accepted from both, and the far ends' view of the
  // same tunnels, so encapsulated output decapsulates when fed back.
  void tunnels(uint16_t mtu = 1500);
  // Makes every QP entry look silent since boot, longer than any idle time.
  void age_qps();
  // The interface address decapsulated frames are given (rg_ifaces). The
  // constructor registers kDev with kDevMac, as the loader does at attach;
  // flags: RG_IFACE_F_*.
  void iface(int ifindex, const Mac& mac, uint16_t flags = 0);

  Events events(rg_direction dir) const;  // packet counts
  uint64_t bytes(rg_direction dir, rg_event ev) const;
  std::vector<QpRow> qps() const;
  // The per-QP state of one direction; fails the test when absent.
  rg_qp_dir qp(rg_direction dir, uint32_t dest_qp) const;

  roceguard* skel() const { return skel_; }
  // What every map holds now.
  MapImage image() const;

 private:
  Verdict run_tc(const Bytes& in, uint32_t repeat, uint32_t skb_priority);
  void attach_reader();

  LoadedObject* lent_ = nullptr;         // from the pool, returned on destruction
  std::unique_ptr<LoadedObject> own_;  // FreshLoad: this Dataplane's alone
  roceguard* skel_ = nullptr;
  std::unique_ptr<MapReader> reader_;
};

// The maps whose contents differ between two images, with the first
// differing key of each: empty when they are the same.
std::string image_difference(const MapImage& want, const MapImage& got);

// One CPU for the whole test: the stream a packet belongs to is its CPU,
// and each CPU numbers its own packets.
class OnOneCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(sched_getaffinity(0, sizeof(saved_), &saved_), 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  }
  void TearDown() override { sched_setaffinity(0, sizeof(saved_), &saved_); }

 private:
  cpu_set_t saved_{};
};

// Writes every frame the programs emit in the running test to a pcap file in
// a private temporary directory; on failure the frames are decoded by tshark
// into the log, and the directory is removed either way.
class Capture {
 public:
  static Capture& current();
  void begin(const std::string& test_name);
  void end(bool failed);
  void record(const Bytes& frame);

 private:
  std::string dir_, path_;
  std::mutex writer_mutex_;  // tests may run the programs from several threads
  std::unique_ptr<PcapWriter> writer_;
};

// The tshark oracle: decodes frames independently of our own decoder.
// One row per frame, field name -> value; a field that occurs in several
// layers (outer and inner IP) is the comma-joined list, outermost first.
using TsharkRow = std::map<std::string, std::string>;
std::vector<TsharkRow> tshark(const std::vector<Bytes>& frames, const std::string& name);
// Checks the fields in want; tshark's malformed and expert fields must be
// empty whatever want says.
void expect_tshark_row(const TsharkRow& got, TsharkRow want, size_t index);

std::string temp_dir();  // this process's private scratch directory
// Runs a command; returns its stdout, fails (throws) on a non-zero exit.
std::string run_command(const std::string& cmd, bool with_stderr = true);

// A decision as `roceguard run` writes it: draining a byte in ps_per_byte
// picoseconds, marking from min_ns to max_ns of backlog.
inline rg_peer_cc cc_of(uint32_t ps_per_byte, uint32_t min_ns, uint32_t max_ns, uint64_t until_ns = UINT64_MAX,
                 uint32_t report = 0, uint32_t flags = RG_CC_F_MARK_CE) {
  rg_peer_cc c{};
  c.flags = flags;
  c.cnp_gap_ns = 50'000;
  c.until_ns = until_ns;
  c.report = report;
  c.ps_per_byte = ps_per_byte;
  c.mark_min_ns = min_ns;
  c.mark_max_ns = max_ns;
  c.mark_scale = max_ns > min_ns ? static_cast<uint32_t>((1ull << 32) / (max_ns - min_ns)) : 0;
  c.cap_ns = 1'000'000'000;
  return c;
}

// 1 ms per byte: every frame alone fills the queue far above any threshold.
inline constexpr uint32_t kSlowDrain = 1'000'000'000;

}  // namespace rg::test
