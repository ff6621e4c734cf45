#include "daemon/stream_eviction.h"

#include <bpf/bpf.h>

#include <cerrno>
#include <vector>

#include "common/error.h"
#include "dataplane/maps.h"
#include "metrics/presentation.h"
#include "roceguard/roceguard.h"

namespace rg {
namespace {

bool idle(const rg_tunnel_stream& s, uint64_t now_ns) {
  return now_ns > s.last_ns && now_ns - s.last_ns >= RG_TUNNEL_STREAM_IDLE_NS;
}

void retire(rg_tunnel_retired& r, const rg_tunnel_stream& s, uint64_t now_ns) {
  ++r.evicted;
  r.received += s.received;
  // Silent far longer than the settling time: its holes are lost.
  r.lost += tunnel_stream_lost(s, now_ns);
  r.reordered += s.reordered;
  r.duplicated += s.duplicated;
  if (!s.epoch) r.duplicates_delivered += s.duplicated;
  r.resyncs += s.resyncs;
  r.delay_sum_ns += s.delay_sum_ns;
  for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) r.delay[k] += s.delay[k];
  for (size_t k = 0; k < RG_TUNNEL_RUN_BUCKETS; ++k) r.loss_runs[k] += s.loss_runs[k];
}

}  // namespace

size_t evict_idle_streams(int streams_fd, int retired_fd, uint64_t now_ns) {
  check_map_layout(streams_fd, kMapTunnelStreams, *pinned_map_layout(kMapTunnelStreams));
  check_map_layout(retired_fd, kMapTunnelRetired, *pinned_map_layout(kMapTunnelRetired));
  std::vector<rg_tunnel_stream_key> candidates;
  for (const TunnelStreamRow& row : read_tunnel_streams(streams_fd))
    if (idle(row.state, now_ns) && row.key.peer < RG_MAX_PEERS) candidates.push_back(row.key);
  size_t evicted = 0;
  for (const rg_tunnel_stream_key& key : candidates) {
    rg_tunnel_stream s{};
    if (bpf_map_lookup_and_delete_elem_flags(streams_fd, &key, &s, BPF_F_LOCK) != 0) {
      if (errno == ENOENT) continue;
      throw Error("cannot evict a tunnel stream from " + std::string(kMapTunnelStreams) + ": " + errno_text(errno));
    }
    // An arrival since it was found idle: it stays, unless a newer arrival
    // already started it again.
    if (!idle(s, now_ns) && bpf_map_update_elem(streams_fd, &key, &s, BPF_NOEXIST | BPF_F_LOCK) == 0) continue;
    rg_tunnel_retired r{};
    if (bpf_map_lookup_elem(retired_fd, &key.peer, &r) != 0)
      throw Error("cannot read " + std::string(kMapTunnelRetired) + ": " + errno_text(errno));
    retire(r, s, now_ns);
    if (bpf_map_update_elem(retired_fd, &key.peer, &r, BPF_ANY) != 0)
      throw Error("cannot write " + std::string(kMapTunnelRetired) + ": " + errno_text(errno));
    ++evicted;
  }
  return evicted;
}

}  // namespace rg
