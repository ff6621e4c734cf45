// The tunnel option's authentication (docs/design.md section 14,
// "Authentication"): each peer's keys, from its key_file, and what the
// programs need of them (rg_peer_auth): SipHash-2-4's state once it has
// taken the outer addresses and the VNI of each direction of the tunnel.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "roceguard/roceguard.h"

namespace rg {

using TunnelKey = std::array<uint8_t, 16>;

// SipHash-2-4 of len bytes under key: the reference function.
uint64_t siphash24(const TunnelKey& key, const uint8_t* data, size_t len);

// The keys in a key file: one or two lines of 32 hexadecimal digits (128
// bits). The first is the one this gateway signs with; it accepts each of
// them. The file must be a regular file no one but its owner may read or
// write. Throws rg::Error saying what is wrong with it, without the path.
std::vector<TunnelKey> read_key_file(const std::string& path);

// rg_peer_auth of a tunnel from local to remote (16 bytes each, as rg_peer
// holds them) on vni with these keys; all zero (no key) when keys is empty.
rg_peer_auth peer_auth_of(const uint8_t* local, const uint8_t* remote, uint32_t vni,
                          const std::vector<TunnelKey>& keys);

// The extension's words, in host order.
struct TunnelOptWords {
  uint32_t sent_us = 0;
  uint32_t feedback = 0;
};

// The MAC a gateway with key puts into the option it sends from src to dst
// (16 bytes each) on vni, computed over the whole message at once; the
// stream's COPIED flag is not covered (the sender clears it after signing
// when the copy could not be sent).
uint64_t tunnel_option_mac(const TunnelKey& key, const uint8_t* src, const uint8_t* dst, uint32_t vni,
                           uint32_t stream, uint32_t seq, std::optional<TunnelOptWords> ext);

// Writes every slot of rg_peer_auth (fd): the keys of each peer with a
// key_file at its slot (slots[i] is peers[i]'s, as MapWriter places them),
// none for the others and the unused slots. Throws rg::Error naming the
// peer whose key file cannot be used.
void write_peer_auth(int fd, const std::vector<PeerConfig>& peers, const std::vector<uint32_t>& slots);

}  // namespace rg
