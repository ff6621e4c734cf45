// A RoCE v2 traffic generator over ordinary UDP sockets: enough of the RC
// transport (IBA chapter 9) to exercise roceguard's data plane the way real
// requesters and responders do: PSN sequences, coalesced ACKs, NAK on a PSN
// gap, Go-Back-N resend from the NAKed PSN or on timeout, CNPs for ECN CE.
// Optionally bursts of one QP's packets as one UDP_SEGMENT send (SenderConfig::burst).
// Optionally selective repeat instead of Go-Back-N (Retransmit below), a
// model of what ConnectX-6 Dx and later NICs do with ROCE_ACCL. Or the UC
// transport (Transport below): every PSN sent once, no ACK, no NAK, no
// resend; the responder drops what a PSN gap cut off. Optionally DCQCN
// (SenderConfig::cc, lab/dcqcn.h): each QP paced at its reaction point's
// rate, cut by the CNPs the responder sends for CE-marked requests.
//
// Packets are UDP payloads to port 4791 in both directions, as on the wire:
//   BTH (12) [+ RETH (16) for RDMA WRITE] + payload + ICRC (4)
//   BTH (12) + AETH (4) + ICRC                           ACK / NAK
//   BTH (12) + 16 reserved bytes + ICRC                  CNP
// The ICRC is a zero placeholder: nothing on the path checks it.
//
// Sockets are opened by the constructors in the calling thread's network
// namespace (see NetnsGuard); the objects can then be used from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bth.hpp"
#include "lab/dcqcn.h"

namespace rg::lab {

// BTH encoding and constants: the one codec in bth.hpp.
using wire::Bth;
using wire::get_bth;
using wire::kOpAck;
using wire::kOpCnp;
using wire::kOpSendOnly;
using wire::kOpUcSendOnly;
using wire::kOpUcWriteOnly;
using wire::kOpWriteOnly;
using wire::kPsnMask;
using wire::kRoceV2Port;
using wire::kSynAck;
using wire::kSynNakSeqErr;
using wire::put_bth;

// How lost packets are recovered. Both ends must be given the same, as both
// ends of a real QP are configured alike.
enum class Retransmit {
  // IBA RC (9.7.5.2.2): the responder discards what arrives ahead of the
  // expected PSN and NAKs once; the requester resends everything from the
  // NAKed PSN, or from the oldest unacknowledged one on a timeout.
  kGoBackN,
  // A model of ConnectX-6 Dx and later with ROCE_ACCL: the responder keeps
  // packets ahead of the expected PSN (within its window), delivers them in
  // order once the holes fill and NAKs each missing PSN once (at most
  // kSrNaksPerArrival per arriving packet); the requester resends only the
  // NAKed PSNs and, on a timeout, only the oldest unacknowledged one. ACKs
  // stay cumulative.
  kSelectiveRepeat,
};
inline constexpr unsigned kSrNaksPerArrival = 16;

// The most packets one UDP_SEGMENT send carries (the kernel's
// UDP_MAX_SEGMENTS before 6.8; larger payloads reach the 64 KB of one
// datagram first).
inline constexpr unsigned kMaxBurst = 64;

// "gbn" / "sr": the option's values. nullopt for anything else.
std::optional<Retransmit> parse_retransmit(std::string_view text);
const char* retransmit_name(Retransmit r);
// "Go-Back-N" / "selective repeat (a model of ConnectX-6 Dx and later with
// ROCE_ACCL)": what the report calls it.
const char* retransmit_label(Retransmit r);

// The transport service of the QPs (IBA 9.8). Both ends must be given the same.
enum class Transport {
  // Reliable Connected: ACKs, NAKs and resends as Retransmit says.
  kRc,
  // Unreliable Connected (IBA 9.8.2, opcodes 0x20..): the requester sends
  // each message once, at its pace, and completes it when sent; the
  // responder sends no ACK or NAK and, on a PSN gap, drops the message the
  // gap cut into and takes the next that starts (here every message is one
  // packet, so it loses exactly the missing PSNs). CNPs as with RC.
  kUc,
};
// "rc" / "uc": the option's values. nullopt for anything else.
std::optional<Transport> parse_transport(std::string_view text);
const char* transport_name(Transport t);
// The BTH opcode of a SEND or RDMA WRITE (given as its RC opcode, kOpSendOnly
// or kOpWriteOnly) on transport t: UC SEND_ONLY is 0x24, UC RDMA WRITE_ONLY 0x2a.
uint8_t request_opcode(Transport t, uint8_t rc_opcode);

// The local ACK timeout as `roceguard nic` takes it (--ack-timeout, the
// profile's nic.ack_timeout): a duration rounded up to the IBA encoding
// 4.096 us x 2^exponent, which is what a NIC waits.
struct AckTimeoutSetting {
  std::string text;          // as given, "67ms"
  unsigned exponent = 0;     // IBA t, 1..31
  double effective_us = 0;   // 4.096 us x 2^t
  std::chrono::microseconds wait{0};  // effective_us rounded up to whole microseconds
};
// Parsed and rounded by the profile's own functions (nic/profile.h):
// nullopt and *why when the text is not a duration or beyond t = 31;
// ack_timeout_setting throws rg::Error (kExitUsage) "--ack-timeout: <why>".
std::optional<AckTimeoutSetting> parse_ack_timeout(std::string_view text, std::string* why = nullptr);
AckTimeoutSetting ack_timeout_setting(std::string_view text);
// The same as a CLI11-style check: "" when valid, else why.
std::string ack_timeout_problem(std::string_view text);
// nic::Profile{}'s: 67ms, t = 14, and its retry count, 7.
AckTimeoutSetting default_ack_timeout();
unsigned default_retry_cnt();

// The per-QP window that fills a line of line_mbit over a round trip of
// rtt: the bandwidth-delay product in packets of wire_bytes_per_packet
// (as they leave the host: Ethernet, IP, UDP, BTH, payload, ICRC), shared
// by qps QPs, times kWindowHeadroom (ACKs are coalesced, so the oldest
// packet of a window is acknowledged later than one round trip after it
// was sent, and the generator's loop adds a scheduling delay of its own),
// rounded up, at least kMinWindow and at most kMaxWindow.
inline constexpr unsigned kWindowHeadroom = 2;
// The fixed window of earlier versions: enough for a LAN round trip.
inline constexpr unsigned kMinWindow = 32;
// The send queue depth ConnectX NICs report (ibv_devinfo: max_qp_wr 32768):
// a QP cannot have more work requests, here messages of one packet each,
// outstanding. Far below the PSN space's limit of 2^23.
inline constexpr unsigned kMaxWindow = 32768;
unsigned window_for_path(unsigned line_mbit, std::chrono::microseconds rtt, size_t wire_bytes_per_packet,
                         unsigned qps);

// Which QPs exist. Sender and receiver must be given the same plan: RC
// connection setup is out of band in real RoCE too.
struct QpPlan {
  unsigned count = 4;
  uint32_t requester_qpn = 0x000100;  // QP i of the sender is requester_qpn + i
  uint32_t responder_qpn = 0x000200;  // and sends to responder_qpn + i
  uint32_t first_psn = 0;             // both ends start here (mod 2^24)
};

// One QP's reaction point over a run (CongestionControl::kDcqcn).
struct DcqcnQpStats {
  DcqcnCounters counters;
  uint64_t rate_kbps = 0;    // at the end (or the last report)
  uint64_t lowest_kbps = 0;  // the lowest a cut left it at, 0 before any cut
  uint32_t alpha = 0;
  // {milliseconds since the run started, rate in kbit/s}, every
  // SenderConfig::rate_sample_interval.
  std::vector<std::pair<uint64_t, uint64_t>> samples;
};

struct SenderStats {
  uint64_t packets = 0;      // request packets sent, first copies and resends
  uint64_t sends = 0;        // system calls that sent them (fewer with SenderConfig::burst)
  bool gso_refused = false;  // UDP_SEGMENT failed with EIO: bursts fell back to single sends
  uint64_t bytes = 0;        // UDP payload bytes of those
  uint64_t retransmits = 0;  // sent with a PSN at or below the highest already sent
  uint64_t acks = 0;
  uint64_t naks = 0;         // NAK PSN sequence error received (selective repeat: one per missing PSN)
  uint64_t cnps = 0;
  uint64_t timeouts = 0;     // retransmit timer expiries that resent (the window from the
                             // oldest unacknowledged PSN, or with selective repeat that one alone)
  uint64_t completed = 0;    // messages acknowledged (UC: sent, as a UC requester completes them)
  uint64_t goodput_bytes = 0;
  unsigned qps_done = 0;
  unsigned qps_failed = 0;   // gave up after retry_cnt timeouts in a row
  std::chrono::milliseconds elapsed{0};
  std::array<uint64_t, 64> ack_dscp{};  // DSCP of ACK/NAK/CNP packets that arrived
  // Per QP of the plan: how many PSNs from its first up to the highest sent.
  std::vector<uint64_t> psn_span;
  // Per QP of the plan with CongestionControl::kDcqcn, else empty.
  std::vector<DcqcnQpStats> dcqcn;
};

struct SenderConfig {
  std::string peer;             // receiver address, IPv4 or IPv6 literal
  uint16_t port = kRoceV2Port;  // destination port
  uint16_t ack_port = kRoceV2Port;  // where responses arrive (a responder's reply_port)
  uint16_t src_port_base = 49152;  // QP i sends from src_port_base + i
  QpPlan qps;
  uint64_t messages = 1000;  // per QP; one packet each
  size_t payload = 1024;     // bytes, rounded up to a multiple of 4
  uint8_t opcode = kOpSendOnly;  // or kOpWriteOnly
  uint8_t tos = 0;               // whole TOS / traffic class byte: DSCP << 2 | ECN
  unsigned window = kMinWindow;  // unacknowledged packets per QP (see window_for_path)
  unsigned ack_req_every = 4;    // AckReq on every n-th packet (and the window's last)
  // Local ACK timeout, restarted whenever the oldest unacknowledged PSN
  // moves: default_ack_timeout().wait, nic::Profile{}'s 67ms (t = 14).
  std::chrono::microseconds timeout{67109};
  unsigned retry_cnt = 7;  // timeouts in a row, one more fails the QP (IBV_WC_RETRY_EXC_ERR)
  Retransmit retransmit = Retransmit::kGoBackN;
  Transport transport = Transport::kRc;
  // UC: the QPs together send at most this many packets per second, evenly
  // (0: as fast as the sockets take them). Nothing else paces UC: without
  // ACKs there is no window to wait on.
  double pace_pps = 0;
  // First copies of consecutive PSNs of one QP handed to the kernel in one
  // sendmsg with UDP_SEGMENT (gso_size: one packet's UDP payload), up to
  // this many: one GSO skb of that many datagrams, as an RNIC's burst of
  // one QP reaches the wire back to back. 1: one sendto per packet.
  // Resends (selective repeat's NAKed PSNs) always go alone.
  unsigned burst = 1;
  // kDcqcn: every QP has a reaction point with these settings and sends at
  // its rate, at most line_mbit (each QP alone, as a NIC's QPs each may
  // fill the port), counting the frame's Ethernet, IP and UDP headers;
  // the rate is sampled every rate_sample_interval. kNone: no pacing but
  // pace_pps, CNPs only counted. `roce-gen` and `roceguard lab` default to
  // kDcqcn; the struct keeps kNone, the generator of the tests that set
  // nothing.
  CongestionControl cc = CongestionControl::kNone;
  DcqcnSettings dcqcn;
  unsigned line_mbit = 100000;
  std::chrono::milliseconds rate_sample_interval{10};
  std::chrono::milliseconds duration{30000};  // hard bound on run()
  std::function<void(const SenderStats&)> on_second;  // live view, called from run()
};

class Sender {
 public:
  explicit Sender(SenderConfig cfg);
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Sends until every QP is done or failed, duration passes or stop() is
  // called. Returns the final statistics.
  SenderStats run();
  void stop() { stop_ = true; }

 private:
  struct Qp;
  // Sends psn (a first copy or a resend); false when the socket is full.
  bool send_one(Qp& qp, uint32_t psn, bool ack_req, SenderStats& st);
  // Sends up to count PSNs from psn in one UDP_SEGMENT sendmsg (count 1:
  // as send_one), fewer when more would exceed a datagram's 64 KB; how many
  // it sent, 0 when the socket is full.
  unsigned send_burst(Qp& qp, uint32_t psn, unsigned count, SenderStats& st);
  // The UDP payload of request psn into pkt (room for the largest); its length.
  size_t build_request(const Qp& qp, uint32_t psn, bool ack_req, uint8_t* pkt) const;
  // What a request of len bytes just sent changes.
  void sent_request(Qp& qp, uint32_t psn, size_t len, SenderStats& st);
  void on_response(const uint8_t* buf, size_t len, uint8_t tos, SenderStats& st);
  // Microseconds since run() started: the reaction points' clock.
  uint64_t run_us(std::chrono::steady_clock::time_point t) const;
  void report_dcqcn(SenderStats& st) const;

  SenderConfig cfg_;
  int family_ = 0;
  std::vector<uint8_t> peer_sa_;  // sockaddr_in / sockaddr_in6
  std::vector<int> data_fds_;     // one per QP
  int ack_fd_ = -1;
  std::vector<std::unique_ptr<Qp>> qps_;
  std::vector<uint8_t> burst_buf_;  // send_burst's datagrams
  size_t frame_overhead_ = 0;       // Ethernet, IP and UDP headers of a request
  std::chrono::steady_clock::time_point start_;
  std::atomic<bool> stop_{false};
};

struct ReceiverStats {
  uint64_t packets = 0;        // request packets received
  uint64_t bytes = 0;
  uint64_t delivered = 0;      // in order, accepted
  uint64_t goodput_bytes = 0;  // payload bytes of those
  uint64_t out_of_order = 0;   // ahead of the expected PSN: discarded (Go-Back-N), kept
                               // until the holes before it fill (selective repeat), or
                               // delivered, the PSNs before it lost (UC)
  uint64_t duplicates = 0;     // behind the expected PSN, or already kept: discarded
  // What a PSN tracker on the path sees (roceguard's rule, bpf/qp_accounting.h): a packet
  // at or behind the highest PSN so far is a retransmission; a forward jump
  // of k is k - 1 packets lost before this point.
  uint64_t seen_retransmits = 0;
  uint64_t gaps = 0;
  uint64_t lost_estimate = 0;
  // PSNs of a QP below the first that arrived on it (from its plan's
  // first_psn): lost, if they are, where no earlier PSN shows the gap, so
  // the tracker above does not count them.
  uint64_t psns_before_first_arrival = 0;
  uint64_t acks = 0;  // sent
  uint64_t naks = 0;  // sent: one per gap (Go-Back-N), one per missing PSN (selective repeat)
  uint64_t cnps = 0;  // sent
  uint64_t ecn_ce = 0;
  uint64_t unknown_qp = 0;
  // Dropped by the receiving sockets for want of buffer room (SO_RXQ_OVFL,
  // as of the last packet read): lost on the host, after any path tracker.
  uint64_t socket_drops = 0;
  std::array<uint64_t, 64> dscp{};  // DSCP histogram of request packets
  // Per QP of the plan: how many PSNs from its first up to the highest that
  // arrived (from any requester), 0 for a QP nothing arrived on.
  std::vector<uint64_t> psn_span;
};

// The PSNs a sender sent above the highest that reached the receiver, over
// all QPs: lost, if they are, where no later PSN of their QP shows the gap,
// so lost_estimate does not count them. With UC (every PSN sent once),
// lost_estimate plus this plus ReceiverStats::psns_before_first_arrival is
// every PSN that did not arrive.
uint64_t psns_after_last_arrival(const SenderStats& s, const ReceiverStats& r);

struct ReceiverConfig {
  uint16_t port = kRoceV2Port;
  uint16_t reply_port = kRoceV2Port;  // responses go to the requester's address, this port
  QpPlan qps;
  unsigned ack_every = 4;  // ACK at least every n in-order packets, and on AckReq
  uint8_t tos = 0;         // of ACKs, NAKs and CNPs
  bool cnp = true;         // answer ECN CE with a CNP
  // At most one CNP per QP per interval: DCQCN's min_time_between_cnps.
  std::chrono::microseconds cnp_interval{DcqcnSettings{}.min_time_between_cnps};
  Retransmit retransmit = Retransmit::kGoBackN;  // as the sender's
  Transport transport = Transport::kRc;          // as the sender's
  unsigned ooo_window = kMaxWindow;  // selective repeat: kept at most this far ahead of the expected PSN
};

class Receiver {
 public:
  // Opens IPv4 and IPv6 sockets on the port; start() serves them.
  explicit Receiver(ReceiverConfig cfg);
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  void start();
  void stop();
  ReceiverStats stats() const;

 private:
  struct Qp;
  void loop();
  void on_packet(int fd, const uint8_t* buf, size_t len, uint8_t tos, const void* from,
                 unsigned from_len);

  ReceiverConfig cfg_;
  int fd4_ = -1, fd6_ = -1;
  std::map<std::pair<std::string, uint32_t>, std::unique_ptr<Qp>> qps_;  // {source address, dest QP}
  mutable std::mutex mu_;
  ReceiverStats st_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// JSON views of the statistics, for the lab's report and `roce-gen --json`.
nlohmann::json dscp_histogram_json(const std::array<uint64_t, 64>& h);
nlohmann::json to_json(const SenderStats& s);  // with dcqcn_json(s.dcqcn) as "dcqcn"
// Per QP: its counters, rate, lowest rate, alpha, and the rate samples as
// [milliseconds, Mbit/s] pairs ("rate_samples_ms_mbps").
nlohmann::json dcqcn_json(const std::vector<DcqcnQpStats>& qps);
nlohmann::json to_json(const ReceiverStats& r);

}  // namespace rg::lab
