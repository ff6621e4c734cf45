#include "packet.h"

#include <arpa/inet.h>
#include <zlib.h>

#include <cctype>
#include <stdexcept>
#include <sys/time.h>

#include "roceguard/roceguard.h"

namespace rg::test {
namespace {

void put16(Bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}

void put24(Bytes& b, uint32_t v) {
  b.push_back((v >> 16) & 0xff);
  b.push_back((v >> 8) & 0xff);
  b.push_back(v & 0xff);
}

void put32(Bytes& b, uint32_t v) {
  put16(b, v >> 16);
  put16(b, v & 0xffff);
}

uint16_t get16(const uint8_t* p) { return (p[0] << 8) | p[1]; }
uint32_t get24(const uint8_t* p) { return (p[0] << 16) | (p[1] << 8) | p[2]; }
uint32_t get32(const uint8_t* p) { return (get16(p) << 16) | get16(p + 2); }

void set16(uint8_t* p, uint16_t v) {
  p[0] = v >> 8;
  p[1] = v & 0xff;
}

uint32_t sum16(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += get16(p + i);
  if (n & 1) sum += p[n - 1] << 8;
  return sum;
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

bool is_ipv6_ext(uint8_t t) {
  return t == 0 || t == 43 || t == 44 || t == 50 || t == 51 || t == 60 || t == 135 ||
         t == 139 || t == 140;
}

// Length of the IPv6 extension header at p (type t); ESP is opaque.
size_t ipv6_ext_len(uint8_t t, const uint8_t* p) {
  if (t == 44) return 8;
  if (t == 51) return (p[1] + 2) * 4;
  return (p[1] + 1) * 8;
}

// UDP checksum over the pseudo-header of the IP header at ip (RFC 768,
// RFC 8200 §8.1); udp points at udp_len bytes of UDP header and data.
uint16_t udp_checksum(int family, const uint8_t* ip, const uint8_t* udp, size_t udp_len) {
  uint32_t sum = 0;
  if (family == 4) {
    sum = sum16(ip + 12, 8);
  } else {
    sum = sum16(ip + 8, 32);
  }
  sum += 17;
  sum += udp_len & 0xffff;
  sum += udp_len >> 16;
  sum = sum16(udp, udp_len, sum);
  return fold(sum);
}

}  // namespace

Mac mac(const std::string& text) {
  Mac m{};
  unsigned v[6];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4],
                  &v[5]) != 6)
    throw std::invalid_argument("bad MAC " + text);
  for (int i = 0; i < 6; ++i) m[i] = static_cast<uint8_t>(v[i]);
  return m;
}

Bytes ip_addr(const std::string& text) {
  uint8_t buf[16];
  if (inet_pton(AF_INET, text.c_str(), buf) == 1) return Bytes(buf, buf + 4);
  if (inet_pton(AF_INET6, text.c_str(), buf) == 1) return Bytes(buf, buf + 16);
  throw std::invalid_argument("bad IP address " + text);
}

PacketBuilder& PacketBuilder::eth(const Mac& dst, const Mac& src) {
  dst_ = dst;
  src_ = src;
  return *this;
}

PacketBuilder& PacketBuilder::ethertype(uint16_t type) {
  ethertype_ = type;
  return *this;
}

PacketBuilder& PacketBuilder::vlan(uint16_t vid, uint16_t tpid, uint8_t pcp) {
  tags_.push_back({tpid, static_cast<uint16_t>((pcp << 13) | (vid & 0xfff))});
  return *this;
}

PacketBuilder& PacketBuilder::ipv4(const std::string& src, const std::string& dst) {
  family_ = 4;
  saddr_ = ip_addr(src);
  daddr_ = ip_addr(dst);
  if (saddr_.size() != 4 || daddr_.size() != 4) throw std::invalid_argument("ipv4: not IPv4");
  return *this;
}

PacketBuilder& PacketBuilder::ipv6(const std::string& src, const std::string& dst) {
  family_ = 6;
  saddr_ = ip_addr(src);
  daddr_ = ip_addr(dst);
  if (saddr_.size() != 16 || daddr_.size() != 16) throw std::invalid_argument("ipv6: not IPv6");
  return *this;
}

PacketBuilder& PacketBuilder::tos(uint8_t tos) {
  tos_ = tos;
  return *this;
}

PacketBuilder& PacketBuilder::dscp(uint8_t dscp) {
  tos_ = static_cast<uint8_t>((dscp << 2) | (tos_ & 3));
  return *this;
}

PacketBuilder& PacketBuilder::ecn(uint8_t ecn) {
  tos_ = static_cast<uint8_t>((tos_ & ~3) | (ecn & 3));
  return *this;
}

PacketBuilder& PacketBuilder::ttl(uint8_t ttl) {
  ttl_ = ttl;
  return *this;
}

PacketBuilder& PacketBuilder::ip_id(uint16_t id) {
  ip_id_ = id;
  return *this;
}

PacketBuilder& PacketBuilder::df(bool on) {
  df_ = on;
  return *this;
}

PacketBuilder& PacketBuilder::fragment(bool more_fragments, uint16_t offset) {
  mf_ = more_fragments;
  frag_off_ = offset & 0x1fff;
  return *this;
}

PacketBuilder& PacketBuilder::ip_options(const Bytes& opts) {
  ip_opts_ = opts;
  while (ip_opts_.size() % 4) ip_opts_.push_back(0);  // EOL
  if (ip_opts_.size() > 40) throw std::invalid_argument("IPv4 options over 40 bytes");
  return *this;
}

PacketBuilder& PacketBuilder::ip_checksum(uint16_t value) {
  ip_csum_ = value;
  return *this;
}

PacketBuilder& PacketBuilder::flow_label(uint32_t label) {
  flow_label_ = label & 0xfffff;
  return *this;
}

PacketBuilder& PacketBuilder::ipv6_ext(uint8_t type, const Bytes& body) {
  Bytes b = body;
  while ((b.size() + 2) % 8) b.push_back(0);  // Pad1/PadN-free zero fill
  exts_.push_back({type, b});
  return *this;
}

PacketBuilder& PacketBuilder::ip_proto(uint8_t proto) {
  proto_ = proto;
  udp_ = false;
  return *this;
}

PacketBuilder& PacketBuilder::udp(uint16_t sport, uint16_t dport) {
  udp_ = true;
  proto_ = 17;
  sport_ = sport;
  dport_ = dport;
  return *this;
}

PacketBuilder& PacketBuilder::udp_csum(UdpCsum mode, uint16_t value) {
  udp_csum_mode_ = mode;
  udp_csum_value_ = value;
  return *this;
}

PacketBuilder& PacketBuilder::udp_len(uint16_t len) {
  udp_len_ = len;
  return *this;
}

PacketBuilder& PacketBuilder::bth(const Bth& bth) {
  bth_ = bth;
  return *this;
}

PacketBuilder& PacketBuilder::aeth(uint8_t syndrome, uint32_t msn) {
  aeth_ = {syndrome, static_cast<uint8_t>(msn >> 16), static_cast<uint8_t>(msn >> 8),
           static_cast<uint8_t>(msn)};
  return *this;
}

PacketBuilder& PacketBuilder::reth(uint64_t va, uint32_t rkey, uint32_t dma_len) {
  std::array<uint8_t, 16> r{};
  for (int i = 0; i < 8; ++i) r[i] = static_cast<uint8_t>(va >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) r[8 + i] = static_cast<uint8_t>(rkey >> (24 - 8 * i));
  for (int i = 0; i < 4; ++i) r[12 + i] = static_cast<uint8_t>(dma_len >> (24 - 8 * i));
  reth_ = r;
  return *this;
}

PacketBuilder& PacketBuilder::icrc(bool on) {
  icrc_ = on;
  return *this;
}

PacketBuilder& PacketBuilder::geneve(uint32_t vni, const Bytes& options, uint8_t flags,
                                     uint16_t proto) {
  if (options.size() % 4 || options.size() > 63 * 4)
    throw std::invalid_argument("Geneve options: multiple of 4, at most 252 bytes");
  geneve_ = true;
  vni_ = vni & 0xffffff;
  gnv_opts_ = options;
  gnv_flags_ = flags;
  gnv_proto_ = proto;
  return *this;
}

PacketBuilder& PacketBuilder::payload(const Bytes& bytes) {
  payload_ = bytes;
  return *this;
}

PacketBuilder& PacketBuilder::payload(size_t n, uint8_t first) {
  payload_.resize(n);
  for (size_t i = 0; i < n; ++i) payload_[i] = static_cast<uint8_t>(first + i);
  return *this;
}

Bytes PacketBuilder::build() const {
  // Everything after the UDP header (or after IP when not UDP).
  Bytes l5;
  bool roce = udp_ && bth_;
  if (roce) {
    l5.resize(wire::kBthLen);
    wire::put_bth(l5.data(), *bth_);
    if (aeth_) l5.insert(l5.end(), aeth_->begin(), aeth_->end());
    if (reth_) l5.insert(l5.end(), reth_->begin(), reth_->end());
  } else if (udp_ && geneve_) {
    l5.push_back(static_cast<uint8_t>(gnv_opts_.size() / 4));
    l5.push_back(gnv_flags_);
    put16(l5, gnv_proto_);
    put24(l5, vni_);
    l5.push_back(0);
    l5.insert(l5.end(), gnv_opts_.begin(), gnv_opts_.end());
  }
  l5.insert(l5.end(), payload_.begin(), payload_.end());
  if (roce && icrc_) l5.insert(l5.end(), 4, 0);

  Bytes l4;
  if (udp_) {
    put16(l4, sport_);
    put16(l4, dport_);
    put16(l4, udp_len_ ? *udp_len_ : static_cast<uint16_t>(8 + l5.size()));
    put16(l4, 0);
  }
  l4.insert(l4.end(), l5.begin(), l5.end());

  Bytes ip;
  if (family_ == 4) {
    uint16_t ihl = 5 + ip_opts_.size() / 4;
    ip.push_back(0x40 | ihl);
    ip.push_back(tos_);
    put16(ip, static_cast<uint16_t>(ihl * 4 + l4.size()));
    put16(ip, ip_id_);
    put16(ip, (df_ ? 0x4000 : 0) | (mf_ ? 0x2000 : 0) | frag_off_);
    ip.push_back(ttl_);
    ip.push_back(proto_);
    put16(ip, 0);
    ip.insert(ip.end(), saddr_.begin(), saddr_.end());
    ip.insert(ip.end(), daddr_.begin(), daddr_.end());
    ip.insert(ip.end(), ip_opts_.begin(), ip_opts_.end());
  } else if (family_ == 6) {
    size_t ext_len = 0;
    for (const auto& e : exts_) ext_len += 2 + e.body.size();
    put32(ip, (6u << 28) | (uint32_t(tos_) << 20) | flow_label_);
    put16(ip, static_cast<uint16_t>(ext_len + l4.size()));
    ip.push_back(exts_.empty() ? proto_ : exts_.front().type);
    ip.push_back(ttl_);
    ip.insert(ip.end(), saddr_.begin(), saddr_.end());
    ip.insert(ip.end(), daddr_.begin(), daddr_.end());
    for (size_t i = 0; i < exts_.size(); ++i) {
      ip.push_back(i + 1 < exts_.size() ? exts_[i + 1].type : proto_);
      ip.push_back(static_cast<uint8_t>((2 + exts_[i].body.size()) / 8 - 1));
      ip.insert(ip.end(), exts_[i].body.begin(), exts_[i].body.end());
    }
  }
  size_t l4_off = ip.size();
  ip.insert(ip.end(), l4.begin(), l4.end());

  if (family_ && roce && icrc_) {
    uint32_t crc = roce_icrc(ip.data(), ip.size());
    for (int i = 0; i < 4; ++i) ip[ip.size() - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
  }
  if (family_ && udp_) {
    uint16_t c = 0;
    if (udp_csum_mode_ == UdpCsum::kValid) {
      c = udp_checksum(family_, ip.data(), ip.data() + l4_off, ip.size() - l4_off);
      if (c == 0) c = 0xffff;  // RFC 768: 0 means "no checksum"
    } else if (udp_csum_mode_ == UdpCsum::kAsGiven) {
      c = udp_csum_value_;
    }
    set16(ip.data() + l4_off + 6, c);
  }
  if (family_ == 4)
    set16(ip.data() + 10, ip_csum_ ? *ip_csum_ : fold(sum16(ip.data(), 20 + ip_opts_.size())));

  Bytes f(dst_.begin(), dst_.end());
  f.insert(f.end(), src_.begin(), src_.end());
  for (const auto& t : tags_) {
    put16(f, t.tpid);
    put16(f, t.tci);
  }
  put16(f, family_ == 4 ? kEthIpv4 : family_ == 6 ? kEthIpv6 : ethertype_);
  if (family_)
    f.insert(f.end(), ip.begin(), ip.end());
  else
    f.insert(f.end(), payload_.begin(), payload_.end());
  return f;
}

uint32_t roce_icrc(const uint8_t* ip, size_t len) {
  Bytes m(8, 0xff);  // the LRH a RoCE v2 packet does not have, masked
  m.insert(m.end(), ip, ip + len - 4);
  uint8_t* p = m.data() + 8;
  size_t udp;
  if ((p[0] >> 4) == 4) {
    p[1] = 0xff;                     // TOS
    p[8] = 0xff;                     // TTL
    p[10] = p[11] = 0xff;            // header checksum
    udp = (p[0] & 0x0f) * 4;
  } else {
    p[0] |= 0x0f;                    // traffic class, high nibble
    p[1] = p[2] = p[3] = 0xff;       // traffic class low nibble, flow label
    p[7] = 0xff;                     // hop limit
    uint8_t next = p[6];
    udp = 40;
    for (int i = 0; i < 8 && is_ipv6_ext(next) && udp + 8 <= len; ++i) {
      size_t l = ipv6_ext_len(next, p + udp);
      next = p[udp];
      udp += l;
    }
  }
  if (udp + 8 + 12 > len - 4) throw std::invalid_argument("roce_icrc: no room for UDP+BTH");
  p[udp + 6] = p[udp + 7] = 0xff;    // UDP checksum
  p[udp + 8 + 4] = 0xff;             // BTH resv8a (FECN, BECN, reserved)
  return static_cast<uint32_t>(crc32(0L, m.data(), static_cast<uInt>(m.size())));
}

View parse(const Bytes& f) {
  View v;
  const uint8_t* d = f.data();
  size_t n = f.size(), pos = 14;
  if (n < 14) return v;
  std::copy(d, d + 6, v.dst.begin());
  std::copy(d + 6, d + 12, v.src.begin());
  uint16_t type = get16(d + 12);
  while ((type == kEthVlan || type == kEthQinQ) && v.vlans < 2 && pos + 4 <= n) {
    v.vlan_tpid[v.vlans++] = type;
    type = get16(d + pos + 2);
    pos += 4;
  }
  v.ethertype = type;
  v.l3 = pos;
  uint8_t proto;
  size_t l4;
  if (type == kEthIpv4) {
    if (pos + 20 > n) return v;
    const uint8_t* ip = d + pos;
    size_t ihl = (ip[0] & 0x0f) * 4;
    if (ihl < 20 || pos + ihl > n) return v;
    v.family = 4;
    v.tos = ip[1];
    v.ip_len = get16(ip + 2);
    v.ip_id = get16(ip + 4);
    v.df = ip[6] & 0x40;
    v.ttl = ip[8];
    v.proto = proto = ip[9];
    v.ipv4_csum_ok = fold(sum16(ip, ihl)) == 0;
    v.saddr.assign(ip + 12, ip + 16);
    v.daddr.assign(ip + 16, ip + 20);
    if (get16(ip + 6) & 0x3fff) return v;  // fragment: no L4 view
    l4 = pos + ihl;
  } else if (type == kEthIpv6) {
    if (pos + 40 > n) return v;
    const uint8_t* ip = d + pos;
    uint32_t w = get32(ip);
    v.family = 6;
    v.tos = (w >> 20) & 0xff;
    v.flow_label = w & 0xfffff;
    v.ip_len = get16(ip + 4);
    v.proto = proto = ip[6];
    v.ttl = ip[7];
    v.saddr.assign(ip + 8, ip + 24);
    v.daddr.assign(ip + 24, ip + 40);
    l4 = pos + 40;
    for (int i = 0; i < 8 && is_ipv6_ext(proto) && l4 + 8 <= n; ++i) {
      if (proto == 44 || proto == 50) return v;
      size_t l = ipv6_ext_len(proto, d + l4);
      proto = d[l4];
      l4 += l;
    }
  } else {
    return v;
  }
  if (proto != 17 || l4 + 8 > n) return v;
  v.l4 = l4;
  v.sport = get16(d + l4);
  v.dport = get16(d + l4 + 2);
  v.udp_len = get16(d + l4 + 4);
  v.udp_csum = get16(d + l4 + 6);
  if (v.udp_len >= 8 && l4 + v.udp_len <= n) {
    if (v.udp_csum == 0)
      v.udp_csum_ok = v.family == 4;
    else
      v.udp_csum_ok =
          udp_checksum(v.family, d + v.l3, d + l4, v.udp_len) == 0;
  }
  v.ok = true;
  v.l5 = l4 + 8;
  const uint8_t* l5 = d + v.l5;
  size_t end = v.udp_len >= 8 && l4 + v.udp_len <= n ? l4 + v.udp_len : n;
  if (v.dport == kGenevePort && v.l5 + 8 <= end) {
    v.geneve = true;
    v.gnv_ver = l5[0] >> 6;
    v.gnv_optlen = (l5[0] & 0x3f) * 4;
    v.gnv_flags = l5[1];
    v.gnv_proto = get16(l5 + 2);
    v.vni = get24(l5 + 4);
    v.inner = v.l5 + 8 + v.gnv_optlen;
  } else if (v.dport == kRoceV2Port && v.l5 + 12 <= end) {
    v.roce = true;
    v.bth = wire::get_bth(l5);
    if (v.bth.opcode == kOpAck && v.l5 + 16 <= end) {
      v.syndrome = l5[12];
      v.msn = get24(l5 + 13);
    }
    if (end >= v.l5 + 12 + 4) {
      uint32_t want = roce_icrc(d + v.l3, end - v.l3);
      const uint8_t* c = d + end - 4;
      v.icrc_ok = (c[0] | (c[1] << 8) | (c[2] << 16) | (uint32_t(c[3]) << 24)) == want;
    }
  }
  return v;
}

View parse_inner(const Bytes& f) {
  View outer = parse(f);
  if (!outer.geneve || outer.inner > f.size()) return View{};
  return parse(slice(f, outer.inner));
}

Bytes tunnel_seq_option(uint32_t stream, uint32_t seq, std::optional<TunnelOptExt> ext, uint16_t opt_class,
                        uint8_t type, std::optional<uint64_t> mac) {
  static_assert(RG_TUNNEL_OPT_WORDS == 2 && RG_TUNNEL_OPT_EXT_WORDS == 4 && RG_TUNNEL_OPT_MAC_WORDS == 2,
                "stream and seq; with the extension, the send time and the feedback; the MAC's 64 bits");
  const auto words = static_cast<uint8_t>((ext ? RG_TUNNEL_OPT_EXT_WORDS : RG_TUNNEL_OPT_WORDS) +
                                          (mac ? RG_TUNNEL_OPT_MAC_WORDS : 0));
  Bytes o = {static_cast<uint8_t>(opt_class >> 8), static_cast<uint8_t>(opt_class),
             static_cast<uint8_t>(mac ? type | RG_TUNNEL_OPT_TYPE_AUTH : type), words};
  auto be32 = [&o](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) o.push_back(static_cast<uint8_t>(v >> shift));
  };
  be32(stream);
  be32(seq);
  if (ext) {
    be32(ext->sent_us);
    be32(ext->feedback);
  }
  if (mac) {
    be32(static_cast<uint32_t>(*mac >> 32));
    be32(static_cast<uint32_t>(*mac));
  }
  return o;
}

Bytes slice(const Bytes& b, size_t from, size_t len) {
  if (from > b.size()) return {};
  size_t to = len > b.size() - from ? b.size() : from + len;
  return Bytes(b.begin() + from, b.begin() + to);
}

PcapWriter::PcapWriter(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) throw std::runtime_error("cannot create " + path);
  // pcap global header, host byte order (readers detect it from the magic).
  struct {
    uint32_t magic = 0xa1b2c3d4;
    uint16_t major = 2, minor = 4;
    int32_t thiszone = 0;
    uint32_t sigfigs = 0, snaplen = 65535, linktype = 1;
  } hdr;
  std::fwrite(&hdr, sizeof(hdr), 1, f_);
}

PcapWriter::~PcapWriter() {
  if (f_) std::fclose(f_);
}

void PcapWriter::write(const Bytes& frame) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  uint32_t rec[4] = {static_cast<uint32_t>(tv.tv_sec), static_cast<uint32_t>(tv.tv_usec),
                     static_cast<uint32_t>(frame.size()), static_cast<uint32_t>(frame.size())};
  std::fwrite(rec, sizeof(rec), 1, f_);
  std::fwrite(frame.data(), 1, frame.size(), f_);
  std::fflush(f_);
  ++count_;
}

std::string hex(const Bytes& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i && i % 16 == 0) s += '\n';
    else if (i && i % 2 == 0) s += ' ';
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}

Bytes from_hex(const std::string& text) {
  Bytes b;
  int hi = -1;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    int v = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                                                         : std::tolower(c) - 'a' + 10;
    if (v < 0 || v > 15) throw std::invalid_argument("bad hex digit");
    if (hi < 0) {
      hi = v;
    } else {
      b.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("odd number of hex digits");
  return b;
}

}  // namespace rg::test
