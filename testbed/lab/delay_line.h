// The lab WAN's delay line: holds each frame of a direction until it is due,
// then sends it on, in the order it came (unless asked to reorder).
//
// The WAN program (testbed/wan/wan.bpf.c) hands every UDP packet that
// survived its loss and bleaching to a "hold" veth of its direction
// (RG_WAN_F_HOLD). A thread per direction reads the far end of that veth
// with an AF_PACKET socket, stamps each frame with its due time (its own
// arrival, the kernel's receive timestamp, + delay, + a uniform jitter
// sample, never before the frame ahead of it), and at that time writes it
// with the outgoing interface's MAC and the next hop's MAC on the outgoing
// interface, through a second AF_PACKET socket: the WAN is a layer-2
// circuit for these packets (TTL unchanged).
//
// The line keeps the spacing it received: a frame leaves at its due time,
// but never sooner after the frame sent before it than half the gap it
// arrived with (gaps above kPacedGap count as kPacedGap). After a late
// wake-up the overdue frames go out paced, not back to back, and the line
// catches up at twice the rate they came in. Without that a batch of frames
// read together, or overdue together, left as a burst that the next hop's
// small queues dropped (a WAN that compresses the gaps makes loss of its
// own). Both gaps are counted (gap_in, gap_out) and so is every frame that
// left closer than the rule allows (squeezed: 0). On a busy host the paced
// line falls further behind the delay asked (docs/design.md, section 12).
//
// This host's kernel has no netem; a userspace delay line is what the lab
// can build. Its timers sleep in ppoll with a 1 ns timer slack; what it
// holds and how late it sends is measured by bench/delay_line and stated in
// bench/README.md.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "wan/wan.h"

namespace rg::lab {

// The longest arrival gap the line keeps (half of it at least, see below):
// a longer one is a pause, not the spacing of a burst, and the line, when
// behind, needs it to catch up (a send costs it tens of microseconds on a
// busy host, more than the gaps within a burst).
inline constexpr std::chrono::microseconds kPacedGap{200};

struct DelayLineConfig {
  std::chrono::nanoseconds delay{0};   // one way, each direction
  std::chrono::nanoseconds jitter{0};  // each frame's delay is uniform in delay +- jitter (jitter <= delay)
  uint32_t reorder_ppm = 0;            // share of frames sent after the frame behind them
};

using Mac = std::array<uint8_t, 6>;
// "02:00:5e:10:00:01" -> bytes; throws rg::Error for anything else.
Mac parse_mac(const std::string& text);

struct DelayDirection {
  std::string name;         // "a_to_b"
  std::string in_ifname;    // where the held frames arrive (the hold veth's far end)
  std::string out_ifname;   // where they leave
  Mac arrival_mac{};        // frames for this direction are addressed to it (the WAN router's port they came in
                            // by); anything else on in_ifname is not the WAN's to forward
  Mac out_mac{};            // out_ifname's own address: the frames' source
  Mac next_hop_mac{};       // the frames' destination
};

// Inter-frame gaps in nanoseconds: below 16 ns one bucket per nanosecond,
// above eight per octave (each 12.5 % wide), the last holding everything
// from about 8.6 s up. Counts only: a phase's is the difference of two.
struct GapHistogram {
  static constexpr size_t kBuckets = 256;
  std::array<uint64_t, kBuckets> count{};

  void add(std::chrono::nanoseconds gap);
  uint64_t total() const;
  // The lower bound of the bucket holding quantile q in [0, 1]; 0 when empty.
  std::chrono::nanoseconds quantile(double q) const;
  // The lower bound of the bucket gap falls in.
  static std::chrono::nanoseconds floor(std::chrono::nanoseconds gap);
  GapHistogram& operator-=(const GapHistogram& base);
};

struct DelayLineStats {
  uint64_t frames = 0;     // sent on
  uint64_t bytes = 0;
  uint64_t reordered = 0;  // sent after the frame behind them, as asked (reorder_ppm)
  uint64_t send_errors = 0;
  // Frames the outgoing interface's queue dropped (ENOBUFS: the WAN's
  // bottleneck, --wan-rate, was full): lost there, as drop-tail loses them.
  uint64_t queue_dropped = 0;
  // Of those, by the WAN's class of the frame (rg_wan_class, by outer UDP
  // port: RoCE, Geneve, VXLAN, other UDP; not UDP, as TCP).
  std::array<uint64_t, RG_WAN_CLASS_MAX> queue_dropped_by_class{};
  uint64_t rx_dropped = 0;  // the socket's receive queue overflowed (PACKET_STATISTICS), or a frame over 64 KiB
  uint64_t max_held = 0;    // most frames held at once
  // Lateness: how long after its due time each frame was handed to the
  // outgoing interface.
  uint64_t late_sum_ns = 0;
  uint64_t late_max_ns = 0;
  // Gaps between consecutive frames of the direction as they arrived (the
  // kernel's receive timestamps) and as they were sent (the clock read just
  // before each send).
  GapHistogram gap_in;
  GapHistogram gap_out;
  // Frames sent less than half their arrival gap (at most kPacedGap) after
  // the frame sent before them: the pacing rule forbids it, so any is a
  // fault.
  uint64_t squeezed = 0;
};

class DelayLine {
 public:
  // Opens the sockets in netns and starts one thread per direction; throws
  // rg::Error (and leaves nothing running) on failure.
  DelayLine(const std::string& netns, const std::vector<DelayDirection>& directions, const DelayLineConfig& cfg);
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  const DelayLineConfig& config() const { return cfg_; }
  size_t directions() const { return dirs_.size(); }
  const std::string& direction_name(size_t i) const;
  DelayLineStats stats(size_t i) const;

 private:
  struct Direction;
  void run(Direction& d);

  DelayLineConfig cfg_;
  std::vector<std::unique_ptr<Direction>> dirs_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

}  // namespace rg::lab
