// DCB netlink (rtnetlink RTM_GETDCB/RTM_SETDCB) without a netlink library:
// two small messages, one nested attribute each.
#include "nic/dcb.h"

#include <linux/dcbnl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/error.h"

namespace rg::nic {

namespace {

class NetlinkRoute {
 public:
  NetlinkRoute() : fd_(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) {
    if (fd_ < 0) throw Error("netlink socket: " + errno_text(errno));
    timeval tv{2, 0};  // a kernel reply is immediate; never hang on a lost one
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NetlinkRoute() { close(fd_); }
  int fd() const { return fd_; }

 private:
  int fd_;
};

struct Request {
  alignas(NLMSG_ALIGNTO) char buf[512] = {};
  size_t len = 0;

  Request(uint16_t type, uint8_t cmd) {
    auto* nlh = reinterpret_cast<nlmsghdr*>(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    nlh->nlmsg_seq = 1;
    auto* dcb = reinterpret_cast<dcbmsg*>(NLMSG_DATA(nlh));
    dcb->dcb_family = AF_UNSPEC;
    dcb->cmd = cmd;
    len = NLMSG_LENGTH(sizeof(dcbmsg));
  }
  nlattr* put(uint16_t type, const void* data, size_t n) {
    auto* a = reinterpret_cast<nlattr*>(buf + NLMSG_ALIGN(len));
    a->nla_type = type;
    a->nla_len = static_cast<uint16_t>(NLA_HDRLEN + n);
    if (n) std::memcpy(reinterpret_cast<char*>(a) + NLA_HDRLEN, data, n);
    len = NLMSG_ALIGN(len) + NLA_ALIGN(a->nla_len);
    return a;
  }
  void end_nest(nlattr* a) { a->nla_len = static_cast<uint16_t>(buf + len - reinterpret_cast<char*>(a)); }
  nlmsghdr* hdr() {
    auto* nlh = reinterpret_cast<nlmsghdr*>(buf);
    nlh->nlmsg_len = static_cast<uint32_t>(len);
    return nlh;
  }
};

// Walks the attributes in [data, data+len) calling fn(type, payload, size).
template <typename Fn>
void for_each_attr(const char* data, size_t len, Fn fn) {
  while (len >= NLA_HDRLEN) {
    auto* a = reinterpret_cast<const nlattr*>(data);
    if (a->nla_len < NLA_HDRLEN || a->nla_len > len) return;
    fn(a->nla_type & NLA_TYPE_MASK, data + NLA_HDRLEN, a->nla_len - NLA_HDRLEN);
    size_t step = NLA_ALIGN(a->nla_len);
    if (step >= len) return;
    data += step;
    len -= step;
  }
}

struct Reply {
  int error = 0;                  // from NLMSG_ERROR (negative errno)
  std::optional<ieee_pfc> pfc;    // RTM_GETDCB: DCB_ATTR_IEEE/DCB_ATTR_IEEE_PFC
  std::optional<int> set_status;  // RTM_SETDCB: DCB_ATTR_IEEE u8 (negative errno, truncated)
};

Reply transact(Request& req) {
  NetlinkRoute nl;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  nlmsghdr* h = req.hdr();
  if (sendto(nl.fd(), h, h->nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0)
    throw Error("netlink send: " + errno_text(errno));
  Reply r;
  alignas(NLMSG_ALIGNTO) char buf[8192];
  // The data reply (if any) comes first, then the ACK; a handful of reads.
  for (int reads = 0; reads < 8; reads++) {
    ssize_t n = recv(nl.fd(), buf, sizeof(buf), 0);
    if (n < 0) throw Error("netlink receive: " + errno_text(errno));
    for (auto* m = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(m, static_cast<size_t>(n));
         m = NLMSG_NEXT(m, n)) {
      if (m->nlmsg_type == NLMSG_ERROR) {
        r.error = reinterpret_cast<nlmsgerr*>(NLMSG_DATA(m))->error;
        return r;
      }
      if (m->nlmsg_type != RTM_GETDCB && m->nlmsg_type != RTM_SETDCB) continue;
      const char* attrs = static_cast<const char*>(NLMSG_DATA(m)) + NLMSG_ALIGN(sizeof(dcbmsg));
      size_t alen = m->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(dcbmsg)));
      for_each_attr(attrs, alen, [&](int type, const char* p, size_t sz) {
        if (type != DCB_ATTR_IEEE) return;
        if (m->nlmsg_type == RTM_SETDCB && sz >= 1) {
          r.set_status = static_cast<int8_t>(*p);
          return;
        }
        for_each_attr(p, sz, [&](int t, const char* q, size_t qsz) {
          if (t == DCB_ATTR_IEEE_PFC && qsz >= sizeof(ieee_pfc)) {
            ieee_pfc pfc;
            std::memcpy(&pfc, q, sizeof(pfc));
            r.pfc = pfc;
          }
        });
      });
    }
  }
  return r;
}

PfcState kernel_get(const std::string& ifname) {
  Request get(RTM_GETDCB, DCB_CMD_IEEE_GET);
  get.put(DCB_ATTR_IFNAME, ifname.c_str(), ifname.size() + 1);
  Reply cur = transact(get);
  PfcState st;
  if (cur.error == -EOPNOTSUPP || (cur.error == 0 && !cur.pfc)) return st;
  st.error = cur.error;
  st.supported = cur.error == 0;
  if (cur.pfc) st.pfc_en = cur.pfc->pfc_en;
  return st;
}

int kernel_set(const std::string& ifname, uint8_t pfc_en) {
  Request get(RTM_GETDCB, DCB_CMD_IEEE_GET);
  get.put(DCB_ATTR_IFNAME, ifname.c_str(), ifname.size() + 1);
  Reply cur = transact(get);
  if (cur.error) return cur.error;
  if (!cur.pfc) return -EOPNOTSUPP;
  ieee_pfc pfc = *cur.pfc;
  pfc.pfc_en = pfc_en;
  Request set(RTM_SETDCB, DCB_CMD_IEEE_SET);
  set.put(DCB_ATTR_IFNAME, ifname.c_str(), ifname.size() + 1);
  nlattr* ieee = set.put(DCB_ATTR_IEEE | NLA_F_NESTED, nullptr, 0);
  set.put(DCB_ATTR_IEEE_PFC, &pfc, sizeof(pfc));
  set.end_nest(ieee);
  Reply res = transact(set);
  return res.error ? res.error : res.set_status.value_or(0);
}

}  // namespace

Dcb Dcb::kernel() { return {kernel_get, kernel_set}; }

std::string pfc_priorities(uint8_t mask) {
  std::string s;
  for (int i = 0; i < 8; i++)
    if (mask & (1u << i)) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s.empty() ? "none" : s;
}

StepReport set_pfc(const std::string& ifname, uint8_t pfc_en, bool dry_run, const Dcb& dcb) {
  StepReport r;
  const std::string not_supported =
      ifname + ": PFC not changed: DCB is not supported by this driver";
  PfcState cur = dcb.get(ifname);
  if (cur.error) {
    r.status = StepReport::Status::kFailed;
    r.lines.push_back(ifname + ": DCB IEEE get: " + errno_text(cur.error));
    return r;
  }
  if (!cur.supported) {
    r.status = StepReport::Status::kNotSupported;
    r.lines.push_back(not_supported);
    return r;
  }
  r.lines.push_back(ifname + ": PFC enabled on priorities " + pfc_priorities(cur.pfc_en) + " -> " +
                    pfc_priorities(pfc_en) + " (DCB_CMD_IEEE_SET, DCB_ATTR_IEEE_PFC pfc_en = " +
                    std::to_string(pfc_en) + ")");
  if (dry_run) {
    r.status = StepReport::Status::kPlanned;
    return r;
  }
  int err = dcb.set(ifname, pfc_en);
  if (err == -EOPNOTSUPP) {
    r.status = StepReport::Status::kNotSupported;
    r.lines = {not_supported + " (no IEEE PFC operation)"};
  } else if (err) {
    r.status = StepReport::Status::kFailed;
    r.lines.push_back(ifname + ": DCB IEEE set PFC: " + errno_text(err));
  } else {
    r.status = StepReport::Status::kDone;
  }
  return r;
}

}  // namespace rg::nic
