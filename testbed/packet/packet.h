// The one packet builder, decoder and pcap writer of the project's tests,
// benchmarks and fuzzers. Frames are built outside-in from a description
// (Ethernet, VLAN tags, IPv4/IPv6, UDP, then BTH/AETH/RETH or Geneve) and
// every length, checksum and the RoCE v2 ICRC is computed at build() unless
// a test overrides it on purpose.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bth.hpp"

namespace rg::test {

using Bytes = std::vector<uint8_t>;
using Mac = std::array<uint8_t, 6>;

Mac mac(const std::string& text);  // "02:00:00:00:00:01"
// IPv4 or IPv6 literal to 4 or 16 bytes; throws on anything else.
Bytes ip_addr(const std::string& text);

inline constexpr uint16_t kEthIpv4 = 0x0800;
inline constexpr uint16_t kEthIpv6 = 0x86dd;
inline constexpr uint16_t kEthArp = 0x0806;
inline constexpr uint16_t kEthVlan = 0x8100;
inline constexpr uint16_t kEthQinQ = 0x88a8;
inline constexpr uint16_t kGenevePort = 6081;

// BTH, AETH and their constants: the one codec in bth.hpp.
using wire::Bth;
using wire::kOpAck;
using wire::kOpCnp;
using wire::kOpReadRequest;
using wire::kOpReadResponseOnly;
using wire::kOpSendOnly;
using wire::kOpUcSendOnly;
using wire::kOpWriteOnly;
using wire::kRoceV2Port;
using wire::kSynAck;
using wire::kSynNakRemoteAccess;
using wire::kSynNakSeqErr;
using wire::kSynRnrNak;

enum class UdpCsum { kValid, kZero, kAsGiven };

class PacketBuilder {
 public:
  PacketBuilder& eth(const Mac& dst, const Mac& src);
  PacketBuilder& ethertype(uint16_t type);  // L2-only frames (ARP, ...)
  PacketBuilder& vlan(uint16_t vid, uint16_t tpid = kEthVlan, uint8_t pcp = 0);

  PacketBuilder& ipv4(const std::string& src, const std::string& dst);
  PacketBuilder& ipv6(const std::string& src, const std::string& dst);
  PacketBuilder& tos(uint8_t tos);  // whole byte: DSCP << 2 | ECN
  PacketBuilder& dscp(uint8_t dscp);
  PacketBuilder& ecn(uint8_t ecn);
  PacketBuilder& ttl(uint8_t ttl);  // IPv4 TTL / IPv6 hop limit
  PacketBuilder& ip_id(uint16_t id);
  PacketBuilder& df(bool on);
  PacketBuilder& fragment(bool more_fragments, uint16_t offset_8byte_units);
  PacketBuilder& ip_options(const Bytes& opts);  // padded to 4 bytes with EOL
  PacketBuilder& ip_checksum(uint16_t value);    // a wrong one on purpose
  PacketBuilder& flow_label(uint32_t label);
  // IPv6 extension header (e.g. 60, destination options), padded to 8 bytes.
  PacketBuilder& ipv6_ext(uint8_t type, const Bytes& body = {});
  PacketBuilder& ip_proto(uint8_t proto);  // non-UDP payload after IP

  PacketBuilder& udp(uint16_t sport, uint16_t dport);
  PacketBuilder& udp_csum(UdpCsum mode, uint16_t value = 0);
  PacketBuilder& udp_len(uint16_t len);  // a wrong one on purpose

  PacketBuilder& bth(const Bth& bth);
  PacketBuilder& aeth(uint8_t syndrome, uint32_t msn);
  PacketBuilder& reth(uint64_t va, uint32_t rkey, uint32_t dma_len);
  PacketBuilder& icrc(bool on);  // on by default after bth()

  // Geneve base header with options (RFC 8926 §3.4); the inner frame is the
  // payload.
  PacketBuilder& geneve(uint32_t vni, const Bytes& options = {}, uint8_t flags = 0,
                        uint16_t proto = 0x6558);

  PacketBuilder& payload(const Bytes& bytes);
  PacketBuilder& payload(size_t n, uint8_t first = 0);  // n bytes first, first+1, ...

  Bytes build() const;

 private:
  Mac dst_{0x02, 0, 0, 0, 0, 0x02}, src_{0x02, 0, 0, 0, 0, 0x01};
  uint16_t ethertype_ = 0;
  struct Tag {
    uint16_t tpid, tci;
  };
  std::vector<Tag> tags_;
  int family_ = 0;  // 4, 6 or 0 (L2 only)
  Bytes saddr_, daddr_;
  uint8_t tos_ = 0, ttl_ = 64;
  uint16_t ip_id_ = 0x1234;
  bool df_ = true, mf_ = false;
  uint16_t frag_off_ = 0;
  Bytes ip_opts_;
  std::optional<uint16_t> ip_csum_;
  uint32_t flow_label_ = 0;
  struct Ext {
    uint8_t type;
    Bytes body;
  };
  std::vector<Ext> exts_;
  uint8_t proto_ = 0;
  bool udp_ = false;
  uint16_t sport_ = 0, dport_ = 0;
  UdpCsum udp_csum_mode_ = UdpCsum::kValid;
  uint16_t udp_csum_value_ = 0;
  std::optional<uint16_t> udp_len_;
  std::optional<Bth> bth_;
  std::optional<std::array<uint8_t, 4>> aeth_;
  std::optional<std::array<uint8_t, 16>> reth_;
  bool icrc_ = true;
  bool geneve_ = false;
  uint32_t vni_ = 0;
  uint8_t gnv_flags_ = 0;
  uint16_t gnv_proto_ = 0;
  Bytes gnv_opts_;
  Bytes payload_;
};

// The extension of the option (struct rg_tunnel_opt_ext), in host order.
struct TunnelOptExt {
  uint32_t sent_us = 0;   // send time, microseconds of CLOCK_TAI, low 32 bits
  uint32_t feedback = 0;  // RG_FEEDBACK_*
};

// roceguard's tunnel sequence option (struct rg_tunnel_opt in
// roceguard/roceguard.h) as gateway A writes it, for geneve()'s options:
// stream is the whole field (flags | epoch | sending CPU | lane), with the
// extension when ext is given, and with mac (struct rg_tunnel_opt_mac: a
// tunnel with a key; the type then has RG_TUNNEL_OPT_TYPE_AUTH set) last.
Bytes tunnel_seq_option(uint32_t stream, uint32_t seq, std::optional<TunnelOptExt> ext, uint16_t opt_class,
                        uint8_t type, std::optional<uint64_t> mac = std::nullopt);

// RoCE v2 ICRC (IBA Annex A17.3.3) of the IP packet at [ip, ip + len) whose
// last 4 bytes are the ICRC slot: CRC32 over 8 bytes of 1s (the masked LRH)
// and the packet with the variant fields masked to 1s, sent little-endian.
uint32_t roce_icrc(const uint8_t* ip, size_t len);

// A parsed view of one frame: what a test asserts on. Offsets are from the
// frame start; absent layers leave their fields at defaults.
struct View {
  bool ok = false;  // parsed down to UDP at least
  int vlans = 0;
  uint16_t vlan_tpid[2] = {0, 0};
  uint16_t ethertype = 0;  // after VLAN tags
  Mac dst{}, src{};
  size_t l3 = 0, l4 = 0, l5 = 0;
  int family = 0;
  uint8_t tos = 0, ttl = 0, proto = 0;
  uint16_t ip_id = 0, ip_len = 0;
  bool df = false, ipv4_csum_ok = false;
  uint32_t flow_label = 0;
  Bytes saddr, daddr;
  uint16_t sport = 0, dport = 0, udp_len = 0, udp_csum = 0;
  bool udp_csum_ok = false;  // true also for a zero (absent) IPv4 checksum
  bool geneve = false;
  uint8_t gnv_ver = 0, gnv_optlen = 0, gnv_flags = 0;
  uint16_t gnv_proto = 0;
  uint32_t vni = 0;
  size_t inner = 0;  // inner Ethernet frame offset
  bool roce = false;
  Bth bth;
  uint8_t syndrome = 0;
  uint32_t msn = 0;
  bool icrc_ok = false;

  uint8_t dscp() const { return tos >> 2; }
  uint8_t ecn() const { return tos & 3; }
};

View parse(const Bytes& frame);
View parse_inner(const Bytes& frame);  // the frame inside Geneve
Bytes slice(const Bytes& b, size_t from, size_t len = SIZE_MAX);

// Classic libpcap file (LINKTYPE_ETHERNET, microsecond stamps), readable by
// tshark and tcpdump.
class PcapWriter {
 public:
  explicit PcapWriter(const std::string& path);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  void write(const Bytes& frame);
  size_t count() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  size_t count_ = 0;
};

std::string hex(const Bytes& b);
Bytes from_hex(const std::string& text);  // ignores whitespace

}  // namespace rg::test
