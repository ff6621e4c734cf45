// Eviction of idle tunnel sequence streams, run by `roceguard run`.
//
// The data path cannot evict from rg_tunnel_streams (a spin-locked value
// lives in a plain hash map, not an LRU one): a full table leaves a new
// stream untracked, its copies delivered twice. Streams silent for
// RG_TUNNEL_STREAM_IDLE_NS (a sender that stopped, or streams someone sent
// once to fill the table) are removed here, their counts added to the
// peer's rg_tunnel_retired so the peer's totals never fall.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rg {

// Evicts the streams silent for RG_TUNNEL_STREAM_IDLE_NS at now_ns
// (CLOCK_MONOTONIC). A stream is taken out and read in one step
// (lookup-and-delete under its lock), so an arrival in between starts a new
// stream instead of being lost; one that made the stream busy again since
// it was found idle puts it back. Returns the streams evicted; throws
// rg::Error when a map is not of this build's layout.
size_t evict_idle_streams(int streams_fd, int retired_fd, uint64_t now_ns);

}  // namespace rg
