#include "lab/roce_gen.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "nic/profile.h"

namespace rg::lab {

namespace {

using Clock = std::chrono::steady_clock;

using wire::kAethLen;
using wire::kBthLen;
using wire::kIcrcLen;
using wire::kRethLen;
constexpr size_t kCnpPad = 16;
constexpr uint32_t kPsnHalf = RG_PSN_HALF;
constexpr size_t kMaxPacket = 9000;
// The largest request the sender builds: BTH, RETH, 4096 payload bytes, ICRC.
constexpr size_t kMaxRequest = kBthLen + kRethLen + 4096 + kIcrcLen;
// A paced QP may catch up this much of the time its loop was away (a
// scheduling delay, a poll that slept), no more: beyond it the line was
// idle and that time is gone, as on a NIC.
constexpr auto kPaceSlack = std::chrono::microseconds(500);

// (a - b) mod 2^24: how far a is ahead of b.
uint32_t psn_diff(uint32_t a, uint32_t b) { return (a - b) & kPsnMask; }

bool psn_ahead(uint32_t a, uint32_t b) {
  uint32_t d = psn_diff(a, b);
  return d != 0 && d < kPsnHalf;
}

struct Sockaddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};

Sockaddr make_sockaddr(const std::string& addr, uint16_t port) {
  Sockaddr s;
  auto* in4 = reinterpret_cast<sockaddr_in*>(&s.ss);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&s.ss);
  if (inet_pton(AF_INET, addr.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    s.len = sizeof(*in4);
  } else if (inet_pton(AF_INET6, addr.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    s.len = sizeof(*in6);
  } else {
    throw Error("not an IPv4 or IPv6 address: " + addr, kExitUsage);
  }
  return s;
}

Sockaddr any_addr(int family, uint16_t port) {
  return make_sockaddr(family == AF_INET ? "0.0.0.0" : "::", port);
}

// A UDP socket bound to port that reports each packet's TOS / traffic class
// and sends with the given one.
int open_udp(int family, uint16_t port, uint8_t tos) {
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw Error("socket: " + errno_text(errno));
  int one = 1, t = tos, buf = 4 << 20;
  bool ok = true;
  ok &= setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0;
  // Best effort: the kernel caps these at net.core.[rw]mem_max.
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  if (family == AF_INET) {
    ok &= setsockopt(fd, IPPROTO_IP, IP_TOS, &t, sizeof(t)) == 0;
    ok &= setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one)) == 0;
  } else {
    ok &= setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) == 0;
    ok &= setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &t, sizeof(t)) == 0;
    ok &= setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one)) == 0;
  }
  Sockaddr local = any_addr(family, port);
  if (!ok || bind(fd, reinterpret_cast<sockaddr*>(&local.ss), local.len) != 0) {
    int err = errno;
    close(fd);
    throw Error("cannot open UDP port " + std::to_string(port) + ": " + errno_text(err));
  }
  return fd;
}

// One datagram with its TOS byte; 0 when the queue is empty. With
// SO_RXQ_OVFL on the socket, *overflows is what the socket dropped so far.
ssize_t recv_tos(int fd, uint8_t* buf, size_t cap, uint8_t* tos, sockaddr_storage* from,
                 socklen_t* from_len, uint32_t* overflows = nullptr) {
  char ctrl[CMSG_SPACE(sizeof(int)) * 2 + CMSG_SPACE(sizeof(uint32_t))];
  iovec iov{buf, cap};
  msghdr msg{};
  msg.msg_name = from;
  msg.msg_namelen = sizeof(*from);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
  if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
  *tos = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
      *tos = *reinterpret_cast<uint8_t*>(CMSG_DATA(c));
    else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)
      *tos = static_cast<uint8_t>(*reinterpret_cast<int*>(CMSG_DATA(c)));
    else if (overflows && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL)
      std::memcpy(overflows, CMSG_DATA(c), sizeof(*overflows));
  }
  *from_len = msg.msg_namelen;
  return n;
}

std::string addr_text(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof(buf));
  else
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof(buf));
  return buf;
}

}  // namespace

// ------------------------------------------------------------ the profile

std::optional<Retransmit> parse_retransmit(std::string_view text) {
  if (text == "gbn") return Retransmit::kGoBackN;
  if (text == "sr") return Retransmit::kSelectiveRepeat;
  return std::nullopt;
}

const char* retransmit_name(Retransmit r) { return r == Retransmit::kSelectiveRepeat ? "sr" : "gbn"; }

const char* retransmit_label(Retransmit r) {
  return r == Retransmit::kSelectiveRepeat
             ? "selective repeat (a model of ConnectX-6 Dx and later with ROCE_ACCL)"
             : "Go-Back-N";
}

std::optional<AckTimeoutSetting> parse_ack_timeout(std::string_view text, std::string* why) {
  auto us = nic::parse_duration_us(text, why);
  if (!us) return std::nullopt;
  auto t = nic::ack_timeout_from_us(*us, why);
  if (!t) return std::nullopt;
  AckTimeoutSetting s;
  s.text = std::string(text);
  s.exponent = t->exponent;
  s.effective_us = t->effective_us;
  s.wait = std::chrono::microseconds(static_cast<int64_t>(std::ceil(t->effective_us - 1e-9)));
  return s;
}

AckTimeoutSetting ack_timeout_setting(std::string_view text) {
  std::string why;
  auto s = parse_ack_timeout(text, &why);
  if (!s) throw Error("--ack-timeout: " + why, kExitUsage);
  return *s;
}

std::string ack_timeout_problem(std::string_view text) {
  std::string why;
  return parse_ack_timeout(text, &why) ? std::string() : why;
}

std::optional<Transport> parse_transport(std::string_view text) {
  if (text == "rc") return Transport::kRc;
  if (text == "uc") return Transport::kUc;
  return std::nullopt;
}

const char* transport_name(Transport t) { return t == Transport::kUc ? "uc" : "rc"; }

uint8_t request_opcode(Transport t, uint8_t rc_opcode) {
  const uint8_t operation = rc_opcode & static_cast<uint8_t>(~RG_BTH_TRANSPORT_MASK);
  return static_cast<uint8_t>((t == Transport::kUc ? RG_BTH_TRANSPORT_UC : RG_BTH_TRANSPORT_RC) | operation);
}

AckTimeoutSetting default_ack_timeout() { return ack_timeout_setting(nic::Profile{}.ack_timeout_text); }

unsigned default_retry_cnt() { return nic::Profile{}.retry_cnt; }

unsigned window_for_path(unsigned line_mbit, std::chrono::microseconds rtt, size_t wire_bytes_per_packet,
                         unsigned qps) {
  if (wire_bytes_per_packet == 0 || qps == 0) return kMinWindow;
  // bits per second x seconds / bits per packet, over the QPs.
  const double packets = static_cast<double>(line_mbit) * 1e6 * (static_cast<double>(rtt.count()) * 1e-6) /
                         (8.0 * static_cast<double>(wire_bytes_per_packet));
  const double per_qp = std::ceil(packets * kWindowHeadroom / qps);
  if (per_qp >= kMaxWindow) return kMaxWindow;
  return std::max(kMinWindow, static_cast<unsigned>(per_qp));
}

// ----------------------------------------------------------------- sender

struct Sender::Qp {
  unsigned index = 0;
  uint32_t dest_qp = 0;
  uint32_t una = 0;   // oldest unacknowledged PSN
  uint32_t next = 0;  // next PSN to send
  uint32_t end = 0;   // one past the last message's PSN
  uint32_t max_sent = 0;
  bool sent_any = false;
  bool failed = false;
  unsigned retries = 0;
  Clock::time_point last_progress;
  std::optional<DcqcnRp> rp;  // CongestionControl::kDcqcn
  Clock::time_point next_tx{};  // paced: not before
  std::deque<uint32_t> resend;  // selective repeat: NAKed PSNs, oldest request first

  bool done() const { return una == end; }
  uint32_t inflight() const { return psn_diff(next, una); }
};

Sender::Sender(SenderConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.qps.count == 0 || cfg_.window == 0 || cfg_.messages == 0 ||
      cfg_.messages >= kPsnHalf || cfg_.ack_req_every == 0 || cfg_.window > kMaxWindow)
    throw Error("roce-gen: qps, window (at most " + std::to_string(kMaxWindow) +
                    "), messages (< 2^23) and ack_req_every must be positive",
                kExitUsage);
  if (cfg_.payload > 4096) throw Error("roce-gen: payload is at most 4096 bytes", kExitUsage);
  if (cfg_.opcode != kOpSendOnly && cfg_.opcode != kOpWriteOnly)
    throw Error("roce-gen: the opcode is SEND only or RDMA WRITE only", kExitUsage);
  if (!(cfg_.pace_pps >= 0)) throw Error("roce-gen: the pace is at least 0 packets per second", kExitUsage);
  if (cfg_.burst < 1 || cfg_.burst > kMaxBurst)
    throw Error("roce-gen: a burst is 1 to " + std::to_string(kMaxBurst) + " packets", kExitUsage);
  if (cfg_.cc == CongestionControl::kDcqcn && (cfg_.line_mbit == 0 || cfg_.rate_sample_interval.count() <= 0))
    throw Error("roce-gen: DCQCN needs a line rate and a sample interval above 0", kExitUsage);
  cfg_.payload = (cfg_.payload + 3) & ~size_t{3};
  Sockaddr peer = make_sockaddr(cfg_.peer, cfg_.port);
  family_ = peer.ss.ss_family;
  frame_overhead_ = 14 + (family_ == AF_INET ? 20 : 40) + 8;
  peer_sa_.assign(reinterpret_cast<uint8_t*>(&peer.ss), reinterpret_cast<uint8_t*>(&peer.ss) + peer.len);
  try {
    ack_fd_ = open_udp(family_, cfg_.ack_port, cfg_.tos);
    for (unsigned i = 0; i < cfg_.qps.count; ++i) {
      data_fds_.push_back(open_udp(family_, static_cast<uint16_t>(cfg_.src_port_base + i), cfg_.tos));
      auto qp = std::make_unique<Qp>();
      qp->index = i;
      qp->dest_qp = (cfg_.qps.responder_qpn + i) & kPsnMask;
      qp->una = qp->next = cfg_.qps.first_psn & kPsnMask;
      qp->end = (qp->una + static_cast<uint32_t>(cfg_.messages)) & kPsnMask;
      if (cfg_.cc == CongestionControl::kDcqcn) qp->rp.emplace(cfg_.dcqcn, uint64_t{cfg_.line_mbit} * 1000);
      qps_.push_back(std::move(qp));
    }
  } catch (...) {
    for (int fd : data_fds_) close(fd);
    if (ack_fd_ >= 0) close(ack_fd_);
    throw;
  }
}

Sender::~Sender() {
  for (int fd : data_fds_) close(fd);
  if (ack_fd_ >= 0) close(ack_fd_);
}

size_t Sender::build_request(const Qp& qp, uint32_t psn, bool ack_req, uint8_t* pkt) const {
  const uint32_t index = psn_diff(psn, cfg_.qps.first_psn);
  const bool uc = cfg_.transport == Transport::kUc;
  Bth bth;
  bth.opcode = request_opcode(cfg_.transport, cfg_.opcode);
  bth.dest_qp = qp.dest_qp;
  bth.psn = psn;
  // Ask for an ACK often enough that a full window always gets one. UC
  // has no ACKs to ask for.
  bth.ack_req = !uc && (ack_req || (index + 1) % cfg_.ack_req_every == 0 || psn_diff(psn + 1, qp.end) == 0 ||
                        psn_diff(psn + 1, qp.una) >= cfg_.window);
  put_bth(pkt, bth);
  size_t len = kBthLen;
  if (cfg_.opcode == kOpWriteOnly) {
    // RETH: virtual address, R_Key, DMA length (IBA 9.3.3).
    uint8_t* r = pkt + len;
    uint64_t va = uint64_t{index} * cfg_.payload;
    for (int i = 0; i < 8; ++i) r[i] = static_cast<uint8_t>(va >> (56 - 8 * i));
    r[8] = 0x00, r[9] = 0x00, r[10] = 0x12, r[11] = 0x34;
    uint32_t dma = static_cast<uint32_t>(cfg_.payload);
    r[12] = static_cast<uint8_t>(dma >> 24), r[13] = static_cast<uint8_t>(dma >> 16);
    r[14] = static_cast<uint8_t>(dma >> 8), r[15] = static_cast<uint8_t>(dma);
    len += kRethLen;
  }
  for (size_t i = 0; i < cfg_.payload; ++i) pkt[len + i] = static_cast<uint8_t>(index + i);
  len += cfg_.payload;
  std::memset(pkt + len, 0, kIcrcLen);  // the ICRC placeholder
  return len + kIcrcLen;
}

void Sender::sent_request(Qp& qp, uint32_t psn, size_t len, SenderStats& st) {
  st.packets++;
  st.bytes += len;
  if (qp.sent_any && !psn_ahead(psn, qp.max_sent)) {
    st.retransmits++;
  } else {
    qp.max_sent = psn;
    qp.sent_any = true;
    st.psn_span[qp.index] = psn_diff(psn, cfg_.qps.first_psn) + uint64_t{1};
  }
  if (qp.rp) {
    // The frame's time on a line at the QP's rate, in ns: bits x 10^6 / kbit/s.
    const auto now = Clock::now();
    const uint64_t frame = len + frame_overhead_;
    qp.rp->on_bytes_sent(frame, run_us(now));
    qp.next_tx = std::max(qp.next_tx, now - kPaceSlack) +
                 std::chrono::nanoseconds(frame * 8000000 / std::max<uint64_t>(1, qp.rp->rate_kbps()));
  }
  if (cfg_.transport == Transport::kUc) {
    // A UC send completes once it is on the wire: nothing will acknowledge it.
    qp.una = (psn + 1) & kPsnMask;
    st.completed++;
    st.goodput_bytes += cfg_.payload;
  }
}

bool Sender::send_one(Qp& qp, uint32_t psn, bool ack_req, SenderStats& st) {
  uint8_t pkt[kMaxRequest];
  const size_t len = build_request(qp, psn, ack_req, pkt);
  ssize_t n = sendto(data_fds_[qp.index], pkt, len, MSG_DONTWAIT,
                     reinterpret_cast<const sockaddr*>(peer_sa_.data()),
                     static_cast<socklen_t>(peer_sa_.size()));
  if (n != static_cast<ssize_t>(len)) return false;  // queue full: the caller retries later
  st.sends++;
  sent_request(qp, psn, len, st);
  return true;
}

unsigned Sender::send_burst(Qp& qp, uint32_t psn, unsigned count, SenderStats& st) {
  // One datagram of all of them: at most 64 KB with the UDP and IPv6 headers.
  constexpr size_t kMaxGso = 65535 - 8 - 40;
  const size_t one = kBthLen + (cfg_.opcode == kOpWriteOnly ? kRethLen : 0) + cfg_.payload + kIcrcLen;
  count = std::min<unsigned>(count, static_cast<unsigned>(kMaxGso / one));
  if (count <= 1) return send_one(qp, psn, false, st) ? 1 : 0;
  // Every request of a run has the same length: the kernel cuts the
  // buffer into datagrams of exactly that many bytes, each its own
  // UDP/IP packet with its own BTH.
  std::vector<uint8_t>& buf = burst_buf_;
  buf.resize(size_t{count} * kMaxRequest);
  size_t seg = 0, total = 0;
  for (unsigned i = 0; i < count; ++i) {
    seg = build_request(qp, (psn + i) & kPsnMask, false, buf.data() + total);
    total += seg;
  }
  iovec iov{buf.data(), total};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(uint16_t))] = {};
  msghdr msg{};
  msg.msg_name = peer_sa_.data();
  msg.msg_namelen = static_cast<socklen_t>(peer_sa_.size());
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const uint16_t gso_size = static_cast<uint16_t>(seg);
  std::memcpy(CMSG_DATA(c), &gso_size, sizeof(gso_size));
  ssize_t n = sendmsg(data_fds_[qp.index], &msg, MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(total)) {
    // EIO: this kernel wants checksum offload under UDP_SEGMENT and the
    // device has none: one packet per send from here on, and the
    // statistics say so. Anything else (a full queue): retried later.
    if (n < 0 && errno == EIO) {
      cfg_.burst = 1;
      st.gso_refused = true;
      return send_one(qp, psn, false, st) ? 1 : 0;
    }
    return 0;
  }
  st.sends++;
  for (unsigned i = 0; i < count; ++i) sent_request(qp, (psn + i) & kPsnMask, seg, st);
  return count;
}

void Sender::on_response(const uint8_t* buf, size_t len, uint8_t tos, SenderStats& st) {
  if (len < kBthLen) return;
  Bth bth = get_bth(buf);
  uint32_t qp_index = psn_diff(bth.dest_qp, cfg_.qps.requester_qpn);
  if (qp_index >= qps_.size()) return;
  Qp& qp = *qps_[qp_index];
  st.ack_dscp[tos >> 2]++;
  if (bth.opcode == kOpCnp) {
    st.cnps++;
    if (qp.rp) qp.rp->on_cnp(run_us(Clock::now()));
    return;
  }
  if (cfg_.transport == Transport::kUc) return;  // a UC requester takes no ACK or NAK
  if (bth.opcode != kOpAck || len < kBthLen + kAethLen) return;
  const uint8_t syndrome = buf[kBthLen];
  // Only PSNs ever sent can be acknowledged; anything else is stale.
  const uint32_t sent_span = qp.sent_any ? psn_diff(qp.max_sent + 1, qp.una) : 0;
  if ((syndrome & wire::kAethKindMask) == wire::kAethKindAck) {
    st.acks++;
    uint32_t upto = psn_diff(bth.psn + 1, qp.una);  // newly acknowledged count
    if (upto == 0 || upto > sent_span) return;
    qp.una = (bth.psn + 1) & kPsnMask;
    if (psn_diff(qp.next, qp.una) >= kPsnHalf) qp.next = qp.una;
    st.completed += upto;
    st.goodput_bytes += uint64_t{upto} * cfg_.payload;
    qp.retries = 0;
    qp.last_progress = Clock::now();
  } else if (syndrome == kSynNakSeqErr && cfg_.retransmit == Retransmit::kSelectiveRepeat) {
    st.naks++;
    // This PSN is missing, nothing more: the responder may lack earlier
    // ones too. Resend it alone; only ACKs move the oldest unacknowledged.
    if (psn_diff(bth.psn, qp.una) < sent_span) qp.resend.push_back(bth.psn);
  } else if (syndrome == kSynNakSeqErr) {
    st.naks++;
    // Everything before the NAKed PSN arrived; resend from it (Go-Back-N).
    uint32_t upto = psn_diff(bth.psn, qp.una);
    if (upto > sent_span) return;
    qp.una = bth.psn;
    qp.next = bth.psn;
    st.completed += upto;
    st.goodput_bytes += uint64_t{upto} * cfg_.payload;
    qp.retries = 0;
    qp.last_progress = Clock::now();
  }
}

uint64_t Sender::run_us(Clock::time_point t) const {
  return static_cast<uint64_t>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::microseconds>(t - start_).count()));
}

void Sender::report_dcqcn(SenderStats& st) const {
  for (size_t i = 0; i < qps_.size() && i < st.dcqcn.size(); ++i) {
    const DcqcnRp& rp = *qps_[i]->rp;
    st.dcqcn[i].counters = rp.counters();
    st.dcqcn[i].rate_kbps = rp.rate_kbps();
    st.dcqcn[i].lowest_kbps = rp.lowest_kbps();
    st.dcqcn[i].alpha = rp.alpha();
  }
}

SenderStats Sender::run() {
  SenderStats st;
  st.psn_span.assign(qps_.size(), 0);
  const bool uc = cfg_.transport == Transport::kUc;
  const bool dcqcn = cfg_.cc == CongestionControl::kDcqcn;
  if (dcqcn) st.dcqcn.assign(qps_.size(), {});
  const auto start = Clock::now();
  start_ = start;
  const auto deadline = start + cfg_.duration;
  auto next_report = start + std::chrono::seconds(1);
  auto next_sample = start;
  for (auto& qp : qps_) qp->last_progress = start;
  // Whether a QP's DCQCN rate holds it back at this moment.
  auto paced_out = [](const Qp& qp) { return qp.rp && Clock::now() < qp.next_tx; };

  uint8_t buf[kMaxPacket];
  while (!stop_) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    if (dcqcn && now >= next_sample) {
      for (size_t i = 0; i < qps_.size(); ++i) {
        qps_[i]->rp->advance(run_us(now));
        st.dcqcn[i].samples.emplace_back(
            std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count(), qps_[i]->rp->rate_kbps());
      }
      next_sample += cfg_.rate_sample_interval;
      if (next_sample <= now) next_sample = now + cfg_.rate_sample_interval;  // the loop was away: no backlog
    }
    // How long the poll below may sleep: until the first QP its rate held
    // back may send again, at most 1 ms.
    auto wake = now + std::chrono::milliseconds(1);
    bool active = false;
    for (auto& qp : qps_) {
      if (qp->done() || qp->failed) continue;
      active = true;
      bool full = false;
      // Selective repeat: the NAKed PSNs first, those not acknowledged since.
      while (!qp->resend.empty()) {
        const uint32_t psn = qp->resend.front();
        if (paced_out(*qp)) {
          full = true;
          break;
        }
        if (psn_diff(psn, qp->una) < qp->inflight() && !send_one(*qp, psn, true, st)) {
          full = true;
          break;
        }
        qp->resend.pop_front();
      }
      // UC: each QP its share of the pace, one packet ahead of it, and
      // at most a window in one pass however far behind it fell (RC's
      // window bounds a pass the same way).
      uint64_t allowed = UINT64_MAX;
      if (uc && cfg_.pace_pps > 0)
        allowed = 1 + static_cast<uint64_t>(std::chrono::duration<double>(now - start).count() * cfg_.pace_pps /
                                            static_cast<double>(qps_.size()));
      // With bursts, as many PSNs at once as the window, the messages left
      // and the pace allow, up to cfg_.burst.
      for (unsigned pass = 0; !full && pass < cfg_.window && qp->next != qp->end &&
                              qp->inflight() < cfg_.window && psn_diff(qp->next, cfg_.qps.first_psn) < allowed &&
                              !paced_out(*qp);) {
        uint64_t n = std::min<uint64_t>({cfg_.burst, cfg_.window - qp->inflight(), psn_diff(qp->end, qp->next),
                                         cfg_.window - pass});
        if (allowed != UINT64_MAX) n = std::min<uint64_t>(n, allowed - psn_diff(qp->next, cfg_.qps.first_psn));
        const unsigned count = send_burst(*qp, qp->next, static_cast<unsigned>(std::max<uint64_t>(n, 1)), st);
        if (count == 0) break;  // socket full
        qp->next = (qp->next + count) & kPsnMask;
        pass += count;
      }
      if (qp->rp && qp->next_tx > now) wake = std::min(wake, qp->next_tx);
      if (uc) continue;  // no timer: nothing is waited for
      if (now - qp->last_progress >= cfg_.timeout) {
        if (qp->retries >= cfg_.retry_cnt) {
          qp->failed = true;  // IBV_WC_RETRY_EXC_ERR on real hardware
          continue;
        }
        qp->retries++;
        st.timeouts++;
        if (cfg_.retransmit == Retransmit::kSelectiveRepeat)
          qp->resend.push_front(qp->una);  // the oldest alone, sent on the next pass
        else
          qp->next = qp->una;  // Go-Back-N: the whole window again
        qp->last_progress = now;
      }
    }
    if (!active) break;

    pollfd pfd{ack_fd_, POLLIN, 0};
    if (dcqcn) {
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - Clock::now());
      const timespec ts{0, static_cast<long>(std::max<int64_t>(0, wait.count()))};
      ppoll(&pfd, 1, &ts, nullptr);
    } else {
      poll(&pfd, 1, 1);
    }
    for (int i = 0; i < 256; ++i) {
      uint8_t tos = 0;
      sockaddr_storage from{};
      socklen_t from_len = 0;
      ssize_t n = recv_tos(ack_fd_, buf, sizeof(buf), &tos, &from, &from_len);
      if (n <= 0) break;
      on_response(buf, static_cast<size_t>(n), tos, st);
    }

    if (cfg_.on_second && Clock::now() >= next_report) {
      next_report += std::chrono::seconds(1);
      st.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      if (dcqcn) report_dcqcn(st);
      cfg_.on_second(st);
    }
  }
  st.qps_done = st.qps_failed = 0;
  for (auto& qp : qps_) {
    if (qp->done()) st.qps_done++;
    else if (qp->failed) st.qps_failed++;
  }
  st.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  if (dcqcn) {
    for (auto& qp : qps_) qp->rp->advance(run_us(Clock::now()));
    report_dcqcn(st);
  }
  return st;
}

// --------------------------------------------------------------- receiver

struct Receiver::Qp {
  uint32_t requester_qp = 0;
  uint32_t epsn = 0;  // expected PSN
  uint32_t msn = 0;   // message sequence number: messages completed
  unsigned since_ack = 0;
  bool nak_sent = false;  // one NAK per gap until the expected PSN arrives (IBA 9.7.5.2.2)
  // Selective repeat: packets ahead of the expected PSN, PSN -> payload
  // bytes, and the first PSN not yet looked at for a NAK.
  std::unordered_map<uint32_t, size_t> kept;
  uint32_t nak_next = 0;
  bool seen = false;      // the path tracker's state below
  uint32_t max_psn = 0;
  Clock::time_point last_cnp{};
};

Receiver::Receiver(ReceiverConfig cfg) : cfg_(std::move(cfg)) {
  st_.psn_span.assign(cfg_.qps.count, 0);
  fd4_ = open_udp(AF_INET, cfg_.port, cfg_.tos);
  try {
    fd6_ = open_udp(AF_INET6, cfg_.port, cfg_.tos);
  } catch (...) {
    close(fd4_);
    throw;
  }
  // What the sockets drop for want of room: a loss no PSN tracker on the
  // path sees. Best effort, like the buffer sizes.
  int one = 1;
  for (int fd : {fd4_, fd6_}) setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
}

Receiver::~Receiver() {
  stop();
  close(fd4_);
  close(fd6_);
}

void Receiver::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { loop(); });
}

void Receiver::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

ReceiverStats Receiver::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

void Receiver::loop() {
  uint8_t buf[kMaxPacket];
  uint32_t overflows[2] = {0, 0};
  while (!stop_) {
    pollfd pfd[2] = {{fd4_, POLLIN, 0}, {fd6_, POLLIN, 0}};
    if (poll(pfd, 2, 20) <= 0) continue;
    for (int k = 0; k < 2; ++k) {
      const int fd = k == 0 ? fd4_ : fd6_;
      for (int i = 0; i < 256; ++i) {
        uint8_t tos = 0;
        sockaddr_storage from{};
        socklen_t from_len = 0;
        ssize_t n = recv_tos(fd, buf, sizeof(buf), &tos, &from, &from_len, &overflows[k]);
        if (n <= 0) break;
        on_packet(fd, buf, static_cast<size_t>(n), tos, &from, from_len);
      }
      std::lock_guard<std::mutex> lock(mu_);
      st_.socket_drops = uint64_t{overflows[0]} + overflows[1];
    }
  }
}

void Receiver::on_packet(int fd, const uint8_t* buf, size_t len, uint8_t tos, const void* from,
                         unsigned from_len) {
  if (len < kBthLen) return;
  const Bth bth = get_bth(buf);
  const bool uc = cfg_.transport == Transport::kUc;
  const bool write = bth.opcode == request_opcode(cfg_.transport, kOpWriteOnly);
  if (!write && bth.opcode != request_opcode(cfg_.transport, kOpSendOnly)) return;  // not a request of ours
  std::lock_guard<std::mutex> lock(mu_);
  const auto& src = *static_cast<const sockaddr_storage*>(from);
  const uint32_t qp_index = psn_diff(bth.dest_qp, cfg_.qps.responder_qpn);
  if (qp_index >= cfg_.qps.count) {
    st_.unknown_qp++;
    return;
  }
  auto& slot = qps_[{addr_text(src), bth.dest_qp}];
  if (!slot) {
    slot = std::make_unique<Qp>();
    slot->requester_qp = (cfg_.qps.requester_qpn + qp_index) & kPsnMask;
    slot->epsn = cfg_.qps.first_psn & kPsnMask;
  }
  Qp& qp = *slot;
  const size_t header = kBthLen + (write ? kRethLen : 0);
  const size_t payload = len > header + kIcrcLen ? len - header - kIcrcLen : 0;

  st_.packets++;
  st_.bytes += len;
  st_.dscp[tos >> 2]++;

  if (!qp.seen) {
    qp.seen = true;
    qp.max_psn = bth.psn;
    if (psn_ahead(bth.psn, cfg_.qps.first_psn)) st_.psns_before_first_arrival += psn_diff(bth.psn, cfg_.qps.first_psn);
  } else if (!psn_ahead(bth.psn, qp.max_psn)) {
    st_.seen_retransmits++;
  } else {
    uint32_t ahead = psn_diff(bth.psn, qp.max_psn);
    if (ahead > 1) {
      st_.gaps++;
      st_.lost_estimate += ahead - 1;
    }
    qp.max_psn = bth.psn;
  }
  const uint64_t span = psn_diff(qp.max_psn, cfg_.qps.first_psn) + uint64_t{1};
  st_.psn_span[qp_index] = std::max(st_.psn_span[qp_index], span);

  // Responses go to the requester's RoCE port, like a real responder's.
  sockaddr_storage to = src;
  if (to.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&to)->sin_port = htons(cfg_.reply_port);
  else
    reinterpret_cast<sockaddr_in6*>(&to)->sin6_port = htons(cfg_.reply_port);
  auto respond = [&](uint8_t opcode, uint32_t psn, const uint8_t* tail, size_t tail_len) {
    uint8_t pkt[kBthLen + kCnpPad + kIcrcLen] = {};
    put_bth(pkt, Bth{.opcode = opcode, .dest_qp = qp.requester_qp, .psn = psn & kPsnMask});
    std::memcpy(pkt + kBthLen, tail, tail_len);
    size_t n = kBthLen + tail_len + kIcrcLen;
    return sendto(fd, pkt, n, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to), from_len) ==
           static_cast<ssize_t>(n);
  };
  auto aeth = [&](uint8_t syndrome, uint32_t psn) {
    const uint8_t a[kAethLen] = {syndrome, static_cast<uint8_t>(qp.msn >> 16),
                                 static_cast<uint8_t>(qp.msn >> 8), static_cast<uint8_t>(qp.msn)};
    return respond(kOpAck, psn, a, sizeof(a));
  };

  if ((tos & 0x03) == 0x03) {
    st_.ecn_ce++;
    auto now = Clock::now();
    if (cfg_.cnp && now - qp.last_cnp >= cfg_.cnp_interval) {
      const uint8_t pad[kCnpPad] = {};
      // A CNP's BTH carries the QP to slow down and no meaningful PSN (Annex A17.9.2).
      if (respond(kOpCnp, 0, pad, sizeof(pad))) st_.cnps++;
      qp.last_cnp = now;
    }
  }

  const bool sr = cfg_.retransmit == Retransmit::kSelectiveRepeat;
  auto deliver = [&](size_t bytes) {
    qp.epsn = (qp.epsn + 1) & kPsnMask;
    qp.msn = (qp.msn + 1) & kPsnMask;
    st_.delivered++;
    st_.goodput_bytes += bytes;
  };
  const uint32_t d = psn_diff(bth.psn, qp.epsn);
  if (uc) {
    // IBA 9.8.2: no ACK, no NAK. A PSN ahead of the expected one means the
    // packets between were lost; the message they belonged to is dropped
    // and this one, which starts a message, is taken. Behind: discarded.
    if (d >= kPsnHalf) {
      st_.duplicates++;
      return;
    }
    if (d != 0) {
      st_.out_of_order++;
      qp.epsn = bth.psn;
    }
    deliver(payload);
    return;
  }
  if (d == 0) {
    deliver(payload);
    qp.nak_sent = false;
    // Selective repeat: what was kept behind the hole follows in order, and
    // the ACK for all of it goes out at once.
    bool drained = false;
    for (auto it = qp.kept.find(qp.epsn); it != qp.kept.end(); it = qp.kept.find(qp.epsn)) {
      deliver(it->second);
      qp.kept.erase(it);
      drained = true;
    }
    if (drained || bth.ack_req || ++qp.since_ack >= cfg_.ack_every) {
      if (aeth(kSynAck, qp.epsn - 1)) st_.acks++;
      qp.since_ack = 0;
    }
  } else if (d < kPsnHalf && sr) {
    if (d >= cfg_.ooo_window) {
      st_.out_of_order++;  // beyond what the responder keeps: as lost
      return;
    }
    if (!qp.kept.emplace(bth.psn, payload).second) {
      st_.duplicates++;
      return;
    }
    st_.out_of_order++;
    // NAK each missing PSN before this one once, a bounded number per
    // arrival; later arrivals carry on where this one stopped.
    if (psn_ahead(qp.epsn, qp.nak_next)) qp.nak_next = qp.epsn;
    for (unsigned budget = kSrNaksPerArrival; budget && psn_ahead(bth.psn, qp.nak_next);
         qp.nak_next = (qp.nak_next + 1) & kPsnMask) {
      if (qp.kept.count(qp.nak_next)) continue;
      if (aeth(kSynNakSeqErr, qp.nak_next)) st_.naks++;
      --budget;
    }
    if (qp.nak_next == bth.psn) qp.nak_next = (bth.psn + 1) & kPsnMask;
  } else if (d < kPsnHalf) {
    st_.out_of_order++;
    if (!qp.nak_sent && aeth(kSynNakSeqErr, qp.epsn)) {
      st_.naks++;
      qp.nak_sent = true;
    }
  } else {
    st_.duplicates++;
    // The ACK for it may be what got lost: say again how far we are.
    if (bth.ack_req && aeth(kSynAck, qp.epsn - 1)) st_.acks++;
  }
}

// ------------------------------------------------------------------ JSON

nlohmann::json dscp_histogram_json(const std::array<uint64_t, 64>& h) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t d = 0; d < h.size(); ++d)
    if (h[d]) j[std::to_string(d)] = h[d];
  return j;
}

nlohmann::json dcqcn_json(const std::vector<DcqcnQpStats>& qps) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < qps.size(); ++i) {
    const DcqcnQpStats& q = qps[i];
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& [ms, kbps] : q.samples) samples.push_back({ms, static_cast<double>(kbps) / 1000.0});
    out.push_back({{"qp", i},
                   {"cnps", q.counters.cnps},
                   {"cuts", q.counters.cuts},
                   {"limiter_allocations", q.counters.limiter_allocations},
                   {"limiter_releases", q.counters.limiter_releases},
                   {"fast_recovery", q.counters.fast_recovery},
                   {"additive_increases", q.counters.additive},
                   {"hyper_increases", q.counters.hyper},
                   {"rate_mbps", static_cast<double>(q.rate_kbps) / 1000.0},
                   {"lowest_mbps", static_cast<double>(q.lowest_kbps) / 1000.0},
                   {"alpha", q.alpha},
                   {"rate_samples_ms_mbps", samples}});
  }
  return out;
}

nlohmann::json to_json(const SenderStats& s) {
  return {{"packets", s.packets},       {"bytes", s.bytes},
          {"sends", s.sends},           {"gso_refused", s.gso_refused},
          {"retransmits", s.retransmits}, {"acks", s.acks},
          {"naks", s.naks},             {"cnps", s.cnps},
          {"timeouts", s.timeouts},     {"completed", s.completed},
          {"goodput_bytes", s.goodput_bytes},
          {"qps_done", s.qps_done},     {"qps_failed", s.qps_failed},
          {"elapsed_ms", s.elapsed.count()},
          {"goodput_mbps", s.elapsed.count() ? 8.0 * s.goodput_bytes / 1000.0 / s.elapsed.count() : 0.0},
          {"response_dscp", dscp_histogram_json(s.ack_dscp)},
          {"dcqcn", dcqcn_json(s.dcqcn)}};
}

uint64_t psns_after_last_arrival(const SenderStats& s, const ReceiverStats& r) {
  uint64_t n = 0;
  for (size_t i = 0; i < s.psn_span.size(); ++i) {
    const uint64_t reached = i < r.psn_span.size() ? r.psn_span[i] : 0;
    if (s.psn_span[i] > reached) n += s.psn_span[i] - reached;
  }
  return n;
}

nlohmann::json to_json(const ReceiverStats& r) {
  return {{"packets", r.packets},         {"bytes", r.bytes},
          {"delivered", r.delivered},     {"goodput_bytes", r.goodput_bytes},
          {"out_of_order", r.out_of_order}, {"duplicates", r.duplicates},
          {"seen_retransmits", r.seen_retransmits}, {"gaps", r.gaps},
          {"lost_estimate", r.lost_estimate}, {"psns_before_first_arrival", r.psns_before_first_arrival},
          {"acks", r.acks},
          {"naks", r.naks},               {"cnps", r.cnps},
          {"ecn_ce", r.ecn_ce},           {"unknown_qp", r.unknown_qp},
          {"socket_drops", r.socket_drops},
          {"dscp", dscp_histogram_json(r.dscp)}};
}

}  // namespace rg::lab
