// The loader's one way to speak netlink, on libmnl: the daemon's rtnetlink
// event socket, the next-hop lease's route query and DCB's PFC get and set
// all go through it. A request is checked as a reply must be: from the port
// it was sent to, with its sequence number and this socket's port id, within
// a timeout; the kernel's error answer becomes an exception naming the
// request, its errno and the kernel's own message (extended ACK) if any.
#pragma once

#include <linux/netlink.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

struct mnl_socket;

namespace rg {

// A failed request or receive. error() is a positive errno: the kernel's
// own when kernel() is true (it answered the request with NLMSG_ERROR),
// else the local cause (ETIMEDOUT for an answer that never came).
class NetlinkError : public Error {
 public:
  NetlinkError(const std::string& what, int error, bool kernel)
      : Error(what), error_(error), kernel_(kernel) {}
  int error() const { return error_; }
  bool kernel() const { return kernel_; }

 private:
  int error_;
  bool kernel_;
};

// One request being built: the netlink header, the family's fixed header,
// then attributes (nests included). The name goes into every error about it,
// so that a log line says which request failed, not just "netlink".
class NetlinkRequest {
 public:
  // NLM_F_REQUEST and NLM_F_ACK are always set: the ACK (or NLMSG_DONE of a
  // dump) is what tells the answer is complete.
  NetlinkRequest(std::string name, uint16_t type, uint16_t flags = 0);

  // The family's fixed header (rtmsg, ifinfomsg, dcbmsg), zeroed; call once,
  // before any attribute.
  template <typename T>
  T* header() {
    return static_cast<T*>(extra_header(sizeof(T)));
  }
  void put(uint16_t type, const void* data, size_t len);
  void put_u8(uint16_t type, uint8_t v) { put(type, &v, sizeof(v)); }
  void put_u16(uint16_t type, uint16_t v) { put(type, &v, sizeof(v)); }
  void put_u32(uint16_t type, uint32_t v) { put(type, &v, sizeof(v)); }
  // A NUL-terminated string, as IFLA_IFNAME and DCB_ATTR_IFNAME take it.
  void put_string(uint16_t type, const std::string& s);
  // Attributes put between the two are nested in type (NLA_F_NESTED set).
  nlattr* nest_start(uint16_t type);
  void nest_end(nlattr* nest);

  const std::string& name() const { return name_; }
  nlmsghdr* message() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }

 private:
  void* extra_header(size_t size);

  std::string name_;
  std::vector<char> buf_;
};

// Calls fn on each attribute after a message's fixed header of header_len
// bytes (sizeof(ifinfomsg), ...); stops at the first malformed one, as
// libmnl's walk does. fn returns false to stop early.
using AttrFn = std::function<bool(const nlattr& attr)>;
void for_each_attr(const nlmsghdr& msg, size_t header_len, const AttrFn& fn);
void for_each_nested(const nlattr& nest, const AttrFn& fn);
// An attribute's type with the nested and byte-order flags cleared.
uint16_t attr_type(const nlattr& attr);
const void* attr_payload(const nlattr& attr);
size_t attr_len(const nlattr& attr);  // of the payload
// A string attribute, without the NUL and never past the payload.
std::string attr_string(const nlattr& attr);

// The fixed header that follows a message's netlink header.
template <typename T>
const T* payload(const nlmsghdr& msg) {
  return static_cast<const T*>(NLMSG_DATA(&msg));
}

// What an event socket's read found.
enum class EventRead {
  kMessages,  // one datagram of events, each handed to the callback
  kLost,      // the kernel dropped events (ENOBUFS): whatever they said is unknown
  kNone,      // nothing queued
};

// One netlink socket: bound, with its port id, closed on destruction.
class NetlinkSocket {
 public:
  // The kernel answers at once; a reply this late is one that never comes.
  static constexpr std::chrono::milliseconds kDefaultTimeout{2000};

  // bus: NETLINK_ROUTE, ...; groups: the RTMGRP_* bitmask an event socket
  // joins, 0 for requests only. Throws NetlinkError.
  explicit NetlinkSocket(int bus, unsigned groups = 0);
  ~NetlinkSocket();
  NetlinkSocket(const NetlinkSocket&) = delete;
  NetlinkSocket& operator=(const NetlinkSocket&) = delete;

  int fd() const;
  uint32_t port_id() const;
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  // A smaller receive buffer (SO_RCVBUF), for tests that overrun it.
  void set_receive_buffer(int bytes);

  // Sends req to port peer (0: the kernel) and hands on_message every data
  // message of the answer until its ACK or NLMSG_DONE. A datagram from
  // another port, or whose messages carry another sequence number or port
  // id, is no part of the answer and is dropped. Throws NetlinkError: the
  // kernel's error answer (kernel() true), no complete answer within the
  // timeout (ETIMEDOUT), a failed send or receive.
  using MessageFn = std::function<void(const nlmsghdr& msg)>;
  void request(NetlinkRequest& req, const MessageFn& on_message = {}, uint32_t peer = 0);

  // Reads one queued datagram of events without waiting (the caller polls
  // fd()). Events are taken from any sender: they only say that something
  // may have changed. Throws NetlinkError on a failure other than lost
  // events or an empty queue.
  EventRead read_events(const MessageFn& on_message);

 private:
  mnl_socket* nl_ = nullptr;
  uint32_t port_id_ = 0;
  uint32_t seq_ = 0;
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
  std::vector<char> buf_;
};

}  // namespace rg
