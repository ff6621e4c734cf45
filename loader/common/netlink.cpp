#include "common/netlink.h"

#include <libmnl/libmnl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

namespace rg {

namespace {

// Room for any request the loader builds: a handful of small attributes.
constexpr size_t kRequestBytes = 1024;
// A dump's datagram may be up to 32 KiB when the receive buffer allows it.
constexpr size_t kReceiveBytes = 32768;

std::string bus_name(int bus) { return bus == NETLINK_ROUTE ? "rtnetlink" : "netlink bus " + std::to_string(bus); }

// What one request's answer gave the callbacks run by mnl_cb_run2.
struct Answer {
  const NetlinkSocket::MessageFn* on_message = nullptr;
  int error = 0;           // the kernel's, positive; 0 for an ACK
  std::string kernel_msg;  // NLMSGERR_ATTR_MSG of an extended ACK
  int overrun = 0;
  std::exception_ptr thrown;  // from on_message, rethrown outside libmnl
};

int on_data(const nlmsghdr* m, void* data) {
  auto* a = static_cast<Answer*>(data);
  if (!a->on_message || !*a->on_message) return MNL_CB_OK;
  try {
    (*a->on_message)(*m);
  } catch (...) {
    a->thrown = std::current_exception();
    return MNL_CB_STOP;
  }
  return MNL_CB_OK;
}

// The extended ACK's attributes follow the echoed request, or only its
// header when the kernel capped it (NLM_F_CAPPED).
void read_ext_ack(const nlmsghdr* m, const nlmsgerr* err, Answer* a) {
  if (!(m->nlmsg_flags & NLM_F_ACK_TLVS)) return;
  size_t offset = sizeof(nlmsgerr);
  if (!(m->nlmsg_flags & NLM_F_CAPPED) && err->msg.nlmsg_len >= sizeof(nlmsghdr))
    offset += err->msg.nlmsg_len - sizeof(nlmsghdr);
  if (offset >= mnl_nlmsg_get_payload_len(m)) return;
  for_each_attr(*m, offset, [&](const nlattr& at) {
    if (attr_type(at) == NLMSGERR_ATTR_MSG) a->kernel_msg = attr_string(at);
    return true;
  });
}

int on_error(const nlmsghdr* m, void* data) {
  auto* a = static_cast<Answer*>(data);
  if (mnl_nlmsg_get_payload_len(m) < sizeof(nlmsgerr)) {
    a->error = EBADMSG;
    return MNL_CB_STOP;
  }
  const auto* err = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(m));
  a->error = err->error < 0 ? -err->error : err->error;
  if (a->error) read_ext_ack(m, err, a);
  return MNL_CB_STOP;  // an ACK or an error: the answer is complete
}

// A dump that failed part-way ends with NLMSG_DONE carrying the errno.
int on_done(const nlmsghdr* m, void* data) {
  auto* a = static_cast<Answer*>(data);
  if (mnl_nlmsg_get_payload_len(m) >= sizeof(int)) {
    int e = 0;
    std::memcpy(&e, mnl_nlmsg_get_payload(m), sizeof(e));
    if (e < 0) a->error = -e;
  }
  return MNL_CB_STOP;
}

int on_overrun(const nlmsghdr*, void* data) {
  static_cast<Answer*>(data)->overrun = EOVERFLOW;
  return MNL_CB_STOP;
}

int on_stray_control(const nlmsghdr*, void*) { return MNL_CB_OK; }

}  // namespace

// ---- building ------------------------------------------------------------

NetlinkRequest::NetlinkRequest(std::string name, uint16_t type, uint16_t flags)
    : name_(std::move(name)), buf_(kRequestBytes) {
  nlmsghdr* m = mnl_nlmsg_put_header(buf_.data());
  m->nlmsg_type = type;
  m->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
}

void* NetlinkRequest::extra_header(size_t size) {
  if (mnl_nlmsg_get_payload_len(message()) != 0) throw Error(name_ + ": fixed header after the attributes");
  if (MNL_ALIGN(size) + message()->nlmsg_len > buf_.size()) throw Error(name_ + ": request too large");
  return mnl_nlmsg_put_extra_header(message(), size);
}

void NetlinkRequest::put(uint16_t type, const void* data, size_t len) {
  if (!mnl_attr_put_check(message(), buf_.size(), type, len, data))
    throw Error(name_ + ": request too large for attribute " + std::to_string(type));
}

void NetlinkRequest::put_string(uint16_t type, const std::string& s) { put(type, s.c_str(), s.size() + 1); }

nlattr* NetlinkRequest::nest_start(uint16_t type) {
  nlattr* n = mnl_attr_nest_start_check(message(), buf_.size(), type);
  if (!n) throw Error(name_ + ": request too large for attribute " + std::to_string(type));
  return n;
}

void NetlinkRequest::nest_end(nlattr* nest) { mnl_attr_nest_end(message(), nest); }

// ---- parsing -------------------------------------------------------------

namespace {

int attr_trampoline(const nlattr* at, void* data) {
  return (*static_cast<const AttrFn*>(data))(*at) ? MNL_CB_OK : MNL_CB_STOP;
}

}  // namespace

void for_each_attr(const nlmsghdr& msg, size_t header_len, const AttrFn& fn) {
  if (msg.nlmsg_len < MNL_NLMSG_HDRLEN + MNL_ALIGN(header_len)) return;
  mnl_attr_parse(&msg, static_cast<unsigned>(header_len), attr_trampoline, const_cast<AttrFn*>(&fn));
}

void for_each_nested(const nlattr& nest, const AttrFn& fn) {
  mnl_attr_parse_nested(&nest, attr_trampoline, const_cast<AttrFn*>(&fn));
}

uint16_t attr_type(const nlattr& attr) { return mnl_attr_get_type(&attr); }
const void* attr_payload(const nlattr& attr) { return mnl_attr_get_payload(&attr); }
size_t attr_len(const nlattr& attr) { return mnl_attr_get_payload_len(&attr); }

std::string attr_string(const nlattr& attr) {
  const auto* p = static_cast<const char*>(attr_payload(attr));
  return std::string(p, strnlen(p, attr_len(attr)));
}

// ---- the socket ----------------------------------------------------------

NetlinkSocket::NetlinkSocket(int bus, unsigned groups) : buf_(kReceiveBytes) {
  nl_ = mnl_socket_open2(bus, SOCK_CLOEXEC);
  if (!nl_) throw NetlinkError(bus_name(bus) + " socket: " + errno_text(errno), errno, false);
  if (mnl_socket_bind(nl_, groups, MNL_SOCKET_AUTOPID) < 0) {
    const int e = errno;
    mnl_socket_close(nl_);
    char g[16];
    std::snprintf(g, sizeof(g), "%#x", groups);
    throw NetlinkError("cannot bind " + bus_name(bus) + " socket (groups " + g + "): " + errno_text(e), e, false);
  }
  port_id_ = mnl_socket_get_portid(nl_);
  // The kernel's own words on why it refused; older kernels lack the
  // option, and their errors are the errno alone.
  int on = 1;
  mnl_socket_setsockopt(nl_, NETLINK_EXT_ACK, &on, sizeof(on));
}

NetlinkSocket::~NetlinkSocket() {
  if (nl_) mnl_socket_close(nl_);
}

int NetlinkSocket::fd() const { return mnl_socket_get_fd(nl_); }
uint32_t NetlinkSocket::port_id() const { return port_id_; }

void NetlinkSocket::set_receive_buffer(int bytes) {
  if (setsockopt(fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)) != 0)
    throw NetlinkError("SO_RCVBUF: " + errno_text(errno), errno, false);
}

void NetlinkSocket::request(NetlinkRequest& req, const MessageFn& on_message, uint32_t peer) {
  const std::string& name = req.name();
  auto fail = [&](const std::string& what, int e) { throw NetlinkError(name + ": " + what, e, false); };

  // 0 is "no check" to libmnl: never used.
  if (++seq_ == 0) seq_ = 1;
  nlmsghdr* m = req.message();
  m->nlmsg_seq = seq_;
  m->nlmsg_pid = port_id_;
  sockaddr_nl to{};
  to.nl_family = AF_NETLINK;
  to.nl_pid = peer;
  if (sendto(fd(), m, m->nlmsg_len, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) < 0)
    fail("netlink send: " + errno_text(errno), errno);

  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  mnl_cb_t ctl[NLMSG_MIN_TYPE] = {
      /* 0 */ nullptr, /* NLMSG_NOOP */ on_stray_control, /* NLMSG_ERROR */ on_error,
      /* NLMSG_DONE */ on_done, /* NLMSG_OVERRUN */ on_overrun};
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      fail("no answer from " + (peer ? "port " + std::to_string(peer) : std::string("the kernel")) + " within " +
               std::to_string(timeout_.count()) + " ms",
           ETIMEDOUT);
    pollfd p{fd(), POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) fail("netlink poll: " + errno_text(errno), errno);
    if (ready <= 0) continue;

    sockaddr_nl from{};
    iovec iov{buf_.data(), buf_.size()};
    msghdr mh{};
    mh.msg_name = &from;
    mh.msg_namelen = sizeof(from);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    const ssize_t n = recvmsg(fd(), &mh, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      fail("netlink receive: " + errno_text(errno), errno);
    }
    if (mh.msg_flags & MSG_TRUNC) fail("answer larger than " + std::to_string(buf_.size()) + " bytes", EMSGSIZE);
    // Another sender's datagram is no answer, whatever it says.
    if (from.nl_pid != peer) continue;

    Answer a;
    a.on_message = &on_message;
    const int ret = mnl_cb_run2(buf_.data(), static_cast<size_t>(n), seq_, port_id_, on_data, &a, ctl,
                                NLMSG_MIN_TYPE);
    if (a.thrown) std::rethrow_exception(a.thrown);
    if (ret == MNL_CB_ERROR) {
      // ESRCH: another port id; EPROTO: another sequence number. Not ours
      // (a reply to an earlier request that timed out, say): the answer is
      // still to come.
      if (errno == ESRCH || errno == EPROTO) continue;
      if (errno == EINTR) fail("dump interrupted by a concurrent change; retry", EINTR);
      fail("malformed answer: " + errno_text(errno), errno);
    }
    if (a.overrun) fail("netlink overrun", a.overrun);
    if (a.error) {
      std::string what = name + ": " + errno_text(a.error);
      if (!a.kernel_msg.empty()) what += " (" + a.kernel_msg + ")";
      throw NetlinkError(what, a.error, true);
    }
    if (ret == MNL_CB_STOP) return;
  }
}

EventRead NetlinkSocket::read_events(const MessageFn& on_message) {
  const ssize_t n = recv(fd(), buf_.data(), buf_.size(), MSG_DONTWAIT);
  if (n < 0) {
    if (errno == ENOBUFS) return EventRead::kLost;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return EventRead::kNone;
    throw NetlinkError("netlink event receive: " + errno_text(errno), errno, false);
  }
  if (n == 0) return EventRead::kNone;
  Answer a;
  a.on_message = &on_message;
  // Sequence number and port id 0: events are not answers to this socket.
  mnl_cb_run(buf_.data(), static_cast<size_t>(n), 0, 0, on_data, &a);
  if (a.thrown) std::rethrow_exception(a.thrown);
  return EventRead::kMessages;
}

}  // namespace rg
