// The fuzzers' oracle: what the data plane must do with a frame, written from
// the rules of docs/design.md (classification §3, re-mark §4, RFC 6040 §6,
// encapsulation §7) rather than from the BPF code, so a shared mistake in the
// parser cannot hide itself. The packet decoder of testbed/packet is lenient on
// purpose (it decodes what the tests build); this one is exact about what
// the programs classify as RoCE v2 or Geneve.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "packet.h"

namespace rg::fuzz {

using test::Bytes;

enum class Class { kOther, kRoce, kGeneve };

struct Headers {
  Class cls = Class::kOther;
  // 4 or 6 once an IP header passed its checks, even when the frame is then
  // not classified (fragment, IPv6 extension): decap applies RFC 6040 to it.
  int family = 0;
  int vlans = 0;
  size_t l3 = 0, l4 = 0, l5 = 0;
  uint8_t tos = 0;
  uint8_t opcode = 0;
};

Headers classify(const Bytes& f);

// Where the tunnel peer sits in the fuzzer's private topology: decides the
// verdict and whether the outer MACs are known.
enum class Reach { kNeighbour, kNoNeighbour, kNoRoute };

struct Peer {
  Bytes local, remote;  // 4 or 16 bytes
  uint32_t vni = 0;
  uint16_t mtu = 1500;
  Reach reach = Reach::kNeighbour;
};

struct Route {
  Bytes prefix;
  unsigned len = 0;
  uint32_t peer = 0;
};

// Geneve from remote on vni is ours when sent to peers[peer].local.
struct DecapKey {
  Bytes remote;
  uint32_t vni = 0;
  uint32_t peer = 0;
};

struct Tunnels {
  std::vector<Peer> peers;
  std::vector<Route> routes;
  std::vector<DecapKey> decap;
  test::Mac dev_mac{}, peer_mac{};
  uint16_t dev_mtu = 1500;
  uint8_t dscp = 46, cnp_dscp = 48, outer_ttl = 64;
};

inline constexpr uint32_t kTcPass = static_cast<uint32_t>(-1);  // TC_ACT_UNSPEC
inline constexpr uint32_t kTcShot = 2;
inline constexpr uint32_t kTcRedirect = 7;
inline constexpr uint32_t kXdpDrop = 1;
inline constexpr uint32_t kXdpPass = 2;

// An IPv4 header whose checksum the program rewrote: its one's-complement
// sum must be what it was before (RFC 1624), so a valid header stays valid
// and a broken one is not silently "repaired" into a different packet.
struct CsumCheck {
  size_t offset = 0, len = 0;
  uint16_t sum = 0;
};

// What one run must have produced. Bytes are compared exactly under mask,
// whose zero bits are the program's free choice (entropy port, flow label),
// the neighbour subsystem's (MACs of a redirect_neigh) or a checksum field
// covered by a CsumCheck.
struct Expect {
  uint32_t verdict = 0;
  bool check_output = true;
  Bytes out, mask;
  std::vector<CsumCheck> csums;
  // Egress: index into Tunnels::peers when the frame must be encapsulated.
  int encap_peer = -1;
  // Ingress: Geneve stripped (decap counted) before the verdict.
  bool decap = false;
  // Ingress: dropped for a critical Geneve option (RFC 8926 §3.5).
  bool critical = false;
  bool roce = false;  // a RoCE v2 packet reaches the accounting
};

Expect expect_tc(const Tunnels& t, const Bytes& in);
Expect expect_xdp(const Tunnels& t, const Bytes& in);

// Compares a run with the expectation; returns what is wrong, or "".
std::string check(const Tunnels& t, const Expect& e, uint32_t verdict, const Bytes& out);

// The inner flow an encapsulated frame hashes on (addresses and DestQP):
// the same flow must always get the same outer source port.
std::string flow_of(const Bytes& frame);
uint16_t outer_sport(const Bytes& encapsulated);

// One's-complement sum of an IPv4 header, for checksum invariants.
uint16_t ipv4_header_sum(const uint8_t* ip, size_t len);

}  // namespace rg::fuzz
