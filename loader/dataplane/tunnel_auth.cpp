#include "dataplane/tunnel_auth.h"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/error.h"

namespace rg {
namespace {

uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Sip {
  uint64_t v0, v1, v2, v3;

  explicit Sip(const TunnelKey& key) {
    const uint64_t k0 = load_le64(key.data()), k1 = load_le64(key.data() + 8);
    v0 = 0x736f6d6570736575ull ^ k0;
    v1 = 0x646f72616e646f6dull ^ k1;
    v2 = 0x6c7967656e657261ull ^ k0;
    v3 = 0x7465646279746573ull ^ k1;
  }
  void round() {
    v0 += v1; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32);
    v2 += v3; v3 = rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32);
  }
  void word(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
  uint64_t finish(uint64_t last) {
    word(last);
    v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) round();
    return v0 ^ v1 ^ v2 ^ v3;
  }
};

// The message every option of a direction starts with: the outer source
// and destination addresses, 16 bytes each, and the VNI as a 64-bit
// little-endian number (the words rg_tunnel_mac takes on from).
std::vector<uint8_t> prefix_of(const uint8_t* src, const uint8_t* dst, uint32_t vni) {
  std::vector<uint8_t> m(src, src + 16);
  m.insert(m.end(), dst, dst + 16);
  for (int i = 0; i < 8; ++i) m.push_back(static_cast<uint8_t>(static_cast<uint64_t>(vni) >> (8 * i)));
  return m;
}

rg_sip_state state_after(const TunnelKey& key, const std::vector<uint8_t>& prefix) {
  Sip s(key);
  for (size_t i = 0; i + 8 <= prefix.size(); i += 8) s.word(load_le64(prefix.data() + i));
  return {{s.v0, s.v1, s.v2, s.v3}};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

uint64_t siphash24(const TunnelKey& key, const uint8_t* data, size_t len) {
  Sip s(key);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) s.word(load_le64(data + i));
  uint64_t last = static_cast<uint64_t>(len & 0xff) << 56;
  for (size_t j = 0; i + j < len; ++j) last |= static_cast<uint64_t>(data[i + j]) << (8 * j);
  return s.finish(last);
}

std::vector<TunnelKey> read_key_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw Error("cannot be read: " + errno_text(errno));
  struct stat st{};
  std::string text;
  const int err = fstat(fd, &st) != 0 ? errno : 0;
  if (!err && S_ISREG(st.st_mode) && st.st_size <= 4096) {
    char buf[4097];
    ssize_t n = 0, got = 0;
    while (got < static_cast<ssize_t>(sizeof(buf)) && (n = read(fd, buf + got, sizeof(buf) - got)) > 0) got += n;
    if (got > 0) text.assign(buf, static_cast<size_t>(got));
  }
  close(fd);
  if (err) throw Error("cannot be read: " + errno_text(err));
  if (!S_ISREG(st.st_mode)) throw Error("is not a regular file");
  const std::string shape = "must hold one or two keys of 32 hexadecimal digits (128 bits), one a line";
  std::vector<TunnelKey> keys;
  std::istringstream lines(text);
  std::string line;
  // Bounded: the text is at most 4096 bytes.
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line.size() != 32 || keys.size() == RG_TUNNEL_MAX_KEYS) throw Error(shape);
    TunnelKey k{};
    for (size_t i = 0; i < 16; ++i) {
      const int hi = hex_digit(line[2 * i]), lo = hex_digit(line[2 * i + 1]);
      if (hi < 0 || lo < 0) throw Error(shape);
      k[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    keys.push_back(k);
  }
  if (keys.empty()) throw Error(shape);
  // A key others can read is a key others have.
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw Error(std::string("may be read or written by group or others (mode ") + mode + "): chmod 600 it");
  }
  return keys;
}

rg_peer_auth peer_auth_of(const uint8_t* local, const uint8_t* remote, uint32_t vni,
                          const std::vector<TunnelKey>& keys) {
  rg_peer_auth a{};
  if (keys.empty()) return a;
  a.tx = state_after(keys[0], prefix_of(local, remote, vni));
  for (size_t i = 0; i < keys.size() && i < RG_TUNNEL_MAX_KEYS; ++i)
    a.rx[i] = state_after(keys[i], prefix_of(remote, local, vni));
  a.keys = static_cast<uint32_t>(std::min<size_t>(keys.size(), RG_TUNNEL_MAX_KEYS));
  return a;
}

uint64_t tunnel_option_mac(const TunnelKey& key, const uint8_t* src, const uint8_t* dst, uint32_t vni,
                           uint32_t stream, uint32_t seq, std::optional<TunnelOptWords> ext) {
  std::vector<uint8_t> m = prefix_of(src, dst, vni);
  auto le64 = [&m](uint64_t v) {
    for (int i = 0; i < 8; ++i) m.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  // COPIED is outside the MAC, as in the data path (rg_tunnel_mac).
  le64(static_cast<uint64_t>(seq) << 32 | (stream & ~uint32_t{RG_TUNNEL_F_COPIED}));
  if (ext) le64(static_cast<uint64_t>(ext->feedback) << 32 | ext->sent_us);
  return siphash24(key, m.data(), m.size());
}

void write_peer_auth(int fd, const std::vector<PeerConfig>& peers, const std::vector<uint32_t>& slots) {
  std::vector<rg_peer_auth> at(RG_MAX_PEERS);
  for (size_t i = 0; i < peers.size() && i < slots.size(); ++i) {
    const PeerConfig& p = peers[i];
    if (p.key_file.empty() || slots[i] >= RG_MAX_PEERS) continue;
    try {
      at[slots[i]] = peer_auth_of(p.local.bytes.data(), p.remote.bytes.data(), p.vni, read_key_file(p.key_file));
    } catch (const Error& e) {
      throw Error("tunnel peer " + p.name + ": key file " + p.key_file + " " + e.what(), kExitUsage);
    }
  }
  for (uint32_t i = 0; i < RG_MAX_PEERS; ++i)
    if (bpf_map_update_elem(fd, &i, &at[i], BPF_ANY) != 0)
      throw Error("cannot write rg_peer_auth: " + errno_text(errno));
}

}  // namespace rg
