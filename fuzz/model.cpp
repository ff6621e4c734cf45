#include "model.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace rg::fuzz {
namespace {

constexpr uint16_t kEthIp = 0x0800, kEthIp6 = 0x86dd, kVlan = 0x8100, kQinQ = 0x88a8;
constexpr size_t kEthLen = 14;

uint16_t get16(const Bytes& b, size_t at) { return static_cast<uint16_t>(b[at] << 8 | b[at + 1]); }
uint32_t get24(const Bytes& b, size_t at) { return b[at] << 16 | b[at + 1] << 8 | b[at + 2]; }

void put16(Bytes& b, uint16_t v) {
  b.push_back(v >> 8);
  b.push_back(v & 0xff);
}

bool ipv6_ext(uint8_t nh) {
  switch (nh) {
    case 0: case 43: case 44: case 50: case 51: case 60: case 135: case 139: case 140:
      return true;
  }
  return false;
}

size_t ihl_of(const Bytes& f, const Headers& h) { return (f[h.l3] & 0x0f) * 4u; }

// The BTH opcodes RoCE v2 carries, by transport (top three bits): RC and
// XRC requests, responses and ACKs with FLUSH and ATOMIC WRITE; UC SEND
// and WRITE; UD SEND only; the CNP. RD and vendor opcodes are not RoCE.
bool bth_opcode_known(uint8_t op) {
  const unsigned code = op & 0x1f;
  switch (op >> 5) {
    case 0:  // RC
    case 5:  // XRC
      return code != 0x15 && (code < 0x18 || code == 0x1c || code == 0x1d);
    case 1:  // UC
      return code < 0x0c;
    case 3:  // UD
      return code == 4 || code == 5;
    case 4:
      return op == 0x81;
  }
  return false;
}

// Headers between the BTH and the payload that the programs read: the AETH
// of an RC/XRC ACK, the (XRCETH and) RETH of a READ request.
size_t bth_ext_len(uint8_t op) {
  const bool rc_or_xrc = (op >> 5) == 0 || (op >> 5) == 5;
  if (rc_or_xrc && (op & 0x1f) == 0x11) return 4;
  if (rc_or_xrc && (op & 0x1f) == 0x0c) return (op >> 5) == 5 ? 4 + 16 : 16;
  return 0;
}

// The traffic class byte: IPv4 TOS, or the nibbles straddling IPv6 bytes 0-1.
void set_tos(Bytes& f, const Headers& h, uint8_t tos) {
  if (h.family == 4) {
    f[h.l3 + 1] = tos;
  } else {
    f[h.l3] = (f[h.l3] & 0xf0) | (tos >> 4);
    f[h.l3 + 1] = static_cast<uint8_t>((f[h.l3 + 1] & 0x0f) | (tos << 4));
  }
}

uint8_t target_dscp(const Tunnels& t, const Headers& h) {
  return h.opcode == 0x81 ? t.cnp_dscp : t.dscp;
}

// DSCP re-mark keeping ECN (both programs, RoCE only).
uint8_t remark(const Tunnels& t, Bytes& f, Headers& h) {
  h.tos = static_cast<uint8_t>(target_dscp(t, h) << 2 | (h.tos & 3));
  set_tos(f, h, h.tos);
  return h.tos;
}

// The IPv4 header at out_off came from the one at in_off of in: only TOS
// may differ, so its sum must not.
void expect_csum(Expect& e, const Bytes& in, size_t in_off, size_t out_off, size_t ihl) {
  e.mask[out_off + 10] = e.mask[out_off + 11] = 0;
  e.csums.push_back({out_off, ihl, ipv4_header_sum(in.data() + in_off, ihl)});
}

Expect pass_untouched(uint32_t verdict, const Bytes& in) {
  Expect e;
  e.verdict = verdict;
  e.out = in;
  e.mask.assign(in.size(), 0xff);
  return e;
}

bool prefix_match(const Bytes& addr, const Route& r) {
  if (addr.size() != r.prefix.size()) return false;
  for (unsigned bit = 0; bit < r.len; ++bit) {
    uint8_t m = 0x80 >> (bit % 8);
    if ((addr[bit / 8] & m) != (r.prefix[bit / 8] & m)) return false;
  }
  return true;
}

// Longest-prefix match of the inner destination, as the LPM tries do.
int route_lookup(const Tunnels& t, const Bytes& f, const Headers& h) {
  Bytes dst = h.family == 4 ? Bytes(f.begin() + h.l3 + 16, f.begin() + h.l3 + 20)
                            : Bytes(f.begin() + h.l3 + 24, f.begin() + h.l3 + 40);
  int best = -1;
  unsigned best_len = 0;
  for (const auto& r : t.routes) {
    if (prefix_match(dst, r) && (best < 0 || r.len > best_len)) {
      best = static_cast<int>(r.peer);
      best_len = r.len;
    }
  }
  return best;
}

}  // namespace

uint16_t ipv4_header_sum(const uint8_t* ip, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < len; i += 2) sum += ip[i] << 8 | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

Headers classify(const Bytes& f) {
  Headers h;
  const size_t n = f.size();
  if (n < kEthLen) return h;
  uint16_t proto = get16(f, 12);
  size_t pos = kEthLen;
  for (int i = 0; proto == kVlan || proto == kQinQ; ++i) {
    if (i == 2 || pos + 4 > n) return h;  // third tag: not parsed
    proto = get16(f, pos + 2);
    pos += 4;
    h.vlans++;
  }
  h.l3 = pos;
  uint8_t l4proto;
  if (proto == kEthIp) {
    if (pos + 20 > n) return h;
    size_t ihl = (f[pos] & 0x0f) * 4u;
    if ((f[pos] >> 4) != 4 || ihl < 20 || pos + ihl > n) return h;
    h.family = 4;
    h.tos = f[pos + 1];
    l4proto = f[pos + 9];
    if (l4proto == 17 && (get16(f, pos + 6) & 0x3fff)) return h;  // fragment
    pos += ihl;
  } else if (proto == kEthIp6) {
    if (pos + 40 > n || (f[pos] >> 4) != 6) return h;
    h.family = 6;
    h.tos = static_cast<uint8_t>((f[pos] & 0x0f) << 4 | f[pos + 1] >> 4);
    l4proto = f[pos + 6];
    if (ipv6_ext(l4proto)) return h;
    pos += 40;
  } else {
    return h;
  }
  if (l4proto != 17 || pos + 8 > n) return h;
  h.l4 = pos;
  h.l5 = pos + 8;
  const uint16_t dport = get16(f, pos + 2);
  // Ethernet pads short frames: a header must fit the frame and the
  // datagram its UDP length declares.
  const size_t datagram = get16(f, pos + 4) < 8 ? 0 : get16(f, pos + 4) - 8u;
  const size_t room = std::min<size_t>(n - h.l5, datagram);
  if (dport == 4791) {
    if (room < 12) return h;
    h.opcode = f[h.l5];
    // A RoCE v2 BTH: transport header version 0, an opcode RoCE carries,
    // its extension headers present, and room left for the 4-byte ICRC.
    if ((f[h.l5 + 1] & 0x0f) != 0 || !bth_opcode_known(h.opcode)) return h;
    const size_t hdrs = 12 + bth_ext_len(h.opcode);
    if (room < hdrs || datagram < hdrs + 4) return h;
    h.cls = Class::kRoce;
  } else if (dport == 6081 && room >= 8) {
    h.cls = Class::kGeneve;
  }
  return h;
}

Expect expect_tc(const Tunnels& t, const Bytes& in) {
  Headers h = classify(in);
  if (h.cls != Class::kRoce) return pass_untouched(kTcPass, in);

  Expect e = pass_untouched(kTcPass, in);
  e.roce = true;
  remark(t, e.out, h);
  if (h.family == 4) expect_csum(e, in, h.l3, h.l3, ihl_of(in, h));
  if (h.vlans) return e;  // tagged frames are re-marked but never tunnelled
  int idx = route_lookup(t, in, h);
  if (idx < 0) return e;
  const Peer& p = t.peers[idx];
  const bool v6 = p.local.size() == 16;
  const size_t udp_len = 8 + 8 + in.size();
  const size_t ip_len = udp_len + (v6 ? 40 : 20);
  // Over the tunnel's MTU, or (for a routed peer) the egress device's:
  // the policy is pass, re-marked but not encapsulated.
  if (ip_len > p.mtu || (p.reach != Reach::kNoRoute && ip_len > t.dev_mtu) ||
      p.reach == Reach::kNoRoute)
    return e;

  Bytes inner = e.out, inner_mask = e.mask;
  Bytes o, m;
  o.insert(o.end(), t.peer_mac.begin(), t.peer_mac.end());
  o.insert(o.end(), t.dev_mac.begin(), t.dev_mac.end());
  put16(o, v6 ? kEthIp6 : kEthIp);
  m.assign(o.size(), p.reach == Reach::kNoNeighbour ? 0 : 0xff);
  m[12] = m[13] = 0xff;
  if (v6) {
    o.push_back(0x60 | h.tos >> 4);
    o.push_back(static_cast<uint8_t>(h.tos << 4));
    o.push_back(0);
    o.push_back(0);
    put16(o, static_cast<uint16_t>(udp_len));
    o.push_back(17);
    o.push_back(t.outer_ttl);
    o.insert(o.end(), p.local.begin(), p.local.end());
    o.insert(o.end(), p.remote.begin(), p.remote.end());
    m.insert(m.end(), {0xff, 0xf0, 0, 0});  // flow label: flow hash
    m.resize(o.size(), 0xff);
  } else {
    o.insert(o.end(), {0x45, h.tos});
    put16(o, static_cast<uint16_t>(ip_len));
    o.insert(o.end(), {0, 0, 0x40, 0, t.outer_ttl, 17, 0, 0});
    o.insert(o.end(), p.local.begin(), p.local.end());
    o.insert(o.end(), p.remote.begin(), p.remote.end());
    m.resize(o.size(), 0xff);
    m[kEthLen + 10] = m[kEthLen + 11] = 0;
  }
  put16(o, 0);  // source port: flow hash, checked apart
  put16(o, 6081);
  put16(o, static_cast<uint16_t>(udp_len));
  put16(o, 0);
  m.insert(m.end(), {0, 0});
  m.resize(o.size(), 0xff);
  o.insert(o.end(), {0, 0, 0x65, 0x58, static_cast<uint8_t>(p.vni >> 16),
                     static_cast<uint8_t>(p.vni >> 8), static_cast<uint8_t>(p.vni), 0});
  m.resize(o.size(), 0xff);
  const size_t hdr = o.size();
  e.csums.clear();
  if (!v6) e.csums.push_back({kEthLen, 20, 0xffff});  // built by the program: valid
  if (h.family == 4) {
    const size_t ihl = ihl_of(in, h);
    e.csums.push_back({hdr + h.l3, ihl, ipv4_header_sum(in.data() + h.l3, ihl)});
  }
  o.insert(o.end(), inner.begin(), inner.end());
  m.insert(m.end(), inner_mask.begin(), inner_mask.end());
  e.out = std::move(o);
  e.mask = std::move(m);
  e.encap_peer = idx;
  e.verdict = p.reach == Reach::kNoNeighbour ? kTcRedirect : kTcPass;
  return e;
}

Expect expect_xdp(const Tunnels& t, const Bytes& in) {
  Headers h = classify(in);
  if (h.cls == Class::kGeneve) {
    Bytes src = h.family == 4 ? Bytes(in.begin() + h.l3 + 12, in.begin() + h.l3 + 16)
                              : Bytes(in.begin() + h.l3 + 8, in.begin() + h.l3 + 24);
    Bytes dst = h.family == 4 ? Bytes(in.begin() + h.l3 + 16, in.begin() + h.l3 + 20)
                              : Bytes(in.begin() + h.l3 + 24, in.begin() + h.l3 + 40);
    const uint32_t vni = get24(in, h.l5 + 4);
    // Ours: a valid outer IPv4 header (RFC 1071), from a configured peer on
    // its VNI, to this gateway's local address for that peer.
    if (h.family == 4 && ipv4_header_sum(in.data() + h.l3, ihl_of(in, h)) != 0xffff)
      return pass_untouched(kXdpPass, in);
    auto key = std::find_if(t.decap.begin(), t.decap.end(), [&](const DecapKey& k) {
      return k.remote == src && k.vni == vni;
    });
    if (key == t.decap.end() || t.peers[key->peer].local != dst)
      return pass_untouched(kXdpPass, in);
    const uint8_t ver_optlen = in[h.l5], flags = in[h.l5 + 1];
    const size_t olen = h.l5 + 8 + (ver_optlen & 0x3f) * 4u;
    if ((ver_optlen >> 6) != 0) return pass_untouched(kXdpPass, in);
    // RFC 8926 §3.5: a critical option we cannot understand drops it; §3.4:
    // a control packet's payload is not forwarded, the stack gets it whole.
    if (flags & 0x40) {
      Expect e = pass_untouched(kXdpDrop, in);
      e.check_output = false;
      e.critical = true;
      return e;
    }
    if ((flags & 0x80) || get16(in, h.l5 + 2) != 0x6558 || olen + kEthLen > in.size())
      return pass_untouched(kXdpPass, in);

    Bytes f(in.begin() + olen, in.end());
    // To this device (whatever the outer frame was sent to), from the outer sender.
    std::copy(t.dev_mac.begin(), t.dev_mac.end(), f.begin());
    std::copy(in.begin() + 6, in.begin() + 12, f.begin() + 6);
    Expect e = pass_untouched(kXdpPass, f);
    e.decap = true;
    Headers ih = classify(f);
    if (ih.family) {
      // RFC 6040 §4.2, Figure 4.
      const uint8_t outer = h.tos & 3, inner = ih.tos & 3;
      if (inner == 0 && outer == 3) {
        e.verdict = kXdpDrop;
        e.check_output = false;
        return e;
      }
      uint8_t ecn = inner;
      if (inner != 0 && inner != 3 && outer == 3) ecn = 3;
      else if (inner == 2 && outer == 1) ecn = 1;
      ih.tos = static_cast<uint8_t>((ih.tos & ~3) | ecn);
      set_tos(e.out, ih, ih.tos);
      if (ih.family == 4) expect_csum(e, in, olen + ih.l3, ih.l3, ihl_of(f, ih));
    }
    if (ih.cls == Class::kRoce) {
      e.roce = true;
      remark(t, e.out, ih);
    }
    return e;
  }
  if (h.cls != Class::kRoce) return pass_untouched(kXdpPass, in);
  Expect e = pass_untouched(kXdpPass, in);
  e.roce = true;
  remark(t, e.out, h);
  if (h.family == 4) expect_csum(e, in, h.l3, h.l3, ihl_of(in, h));
  return e;
}

std::string check(const Tunnels&, const Expect& e, uint32_t verdict, const Bytes& out) {
  char buf[160];
  if (verdict != e.verdict) {
    std::snprintf(buf, sizeof(buf), "verdict %d, expected %d", static_cast<int>(verdict),
                  static_cast<int>(e.verdict));
    return buf;
  }
  if (!e.check_output) return "";
  if (out.size() != e.out.size()) {
    std::snprintf(buf, sizeof(buf), "output %zu bytes, expected %zu", out.size(), e.out.size());
    return buf;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if ((out[i] ^ e.out[i]) & e.mask[i]) {
      std::snprintf(buf, sizeof(buf), "byte %zu is 0x%02x, expected 0x%02x (mask 0x%02x)", i,
                    out[i], e.out[i], e.mask[i]);
      return buf;
    }
  }
  for (const auto& c : e.csums) {
    uint16_t got = ipv4_header_sum(out.data() + c.offset, c.len);
    // 0x0000 and 0xffff are the same one's-complement number.
    if (got % 0xffff != c.sum % 0xffff) {
      std::snprintf(buf, sizeof(buf), "IPv4 header at %zu sums to 0x%04x, expected 0x%04x",
                    c.offset, got, c.sum);
      return buf;
    }
  }
  if (e.encap_peer >= 0) {
    uint16_t sport = outer_sport(out);
    if (sport < 49152) {
      std::snprintf(buf, sizeof(buf), "outer source port %u outside 49152-65535", sport);
      return buf;
    }
  }
  return "";
}

std::string flow_of(const Bytes& f) {
  Headers h = classify(f);
  if (h.cls != Class::kRoce) return "";
  size_t a = h.l3 + (h.family == 4 ? 12 : 8), len = h.family == 4 ? 8 : 32;
  std::string key(f.begin() + a, f.begin() + a + len);
  key.append(f.begin() + h.l5 + 5, f.begin() + h.l5 + 8);
  return key;
}

uint16_t outer_sport(const Bytes& enc) {
  size_t l4 = kEthLen + (get16(enc, 12) == kEthIp6 ? 40 : 20);
  return get16(enc, l4);
}

}  // namespace rg::fuzz
