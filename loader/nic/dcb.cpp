// DCB netlink (rtnetlink RTM_GETDCB/RTM_SETDCB) through common/netlink.h: two
// small messages, one nested attribute each.
#include "nic/dcb.h"

#include <linux/dcbnl.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/netlink.h"

namespace rg::nic {

namespace {

struct Reply {
  int error = 0;                  // the kernel's error answer (negative errno)
  std::optional<ieee_pfc> pfc;    // RTM_GETDCB: DCB_ATTR_IEEE/DCB_ATTR_IEEE_PFC
  std::optional<int> set_status;  // RTM_SETDCB: DCB_ATTR_IEEE u8 (negative errno, truncated)
};

NetlinkRequest request(const char* name, uint16_t type, uint8_t cmd, const std::string& ifname) {
  NetlinkRequest req(std::string(name) + " " + ifname, type);
  auto* dcb = req.header<dcbmsg>();
  dcb->dcb_family = AF_UNSPEC;
  dcb->cmd = cmd;
  req.put_string(DCB_ATTR_IFNAME, ifname);
  return req;
}

// The kernel's error answer is a value (the caller tells "no DCB" from a
// failure by it); no answer at all, or no socket, throws.
Reply transact(NetlinkRequest& req) {
  NetlinkSocket nl(NETLINK_ROUTE);
  Reply r;
  try {
    nl.request(req, [&](const nlmsghdr& m) {
      if (m.nlmsg_type != RTM_GETDCB && m.nlmsg_type != RTM_SETDCB) return;
      for_each_attr(m, sizeof(dcbmsg), [&](const nlattr& a) {
        if (attr_type(a) != DCB_ATTR_IEEE) return true;
        if (m.nlmsg_type == RTM_SETDCB && attr_len(a) >= 1) {
          r.set_status = *static_cast<const int8_t*>(attr_payload(a));
          return true;
        }
        for_each_nested(a, [&](const nlattr& q) {
          if (attr_type(q) == DCB_ATTR_IEEE_PFC && attr_len(q) >= sizeof(ieee_pfc)) {
            ieee_pfc pfc;
            std::memcpy(&pfc, attr_payload(q), sizeof(pfc));
            r.pfc = pfc;
          }
          return true;
        });
        return true;
      });
    });
  } catch (const NetlinkError& e) {
    if (!e.kernel()) throw;
    r.error = -e.error();
  }
  return r;
}

PfcState kernel_get(const std::string& ifname) {
  NetlinkRequest get = request("DCB IEEE get (RTM_GETDCB)", RTM_GETDCB, DCB_CMD_IEEE_GET, ifname);
  Reply cur = transact(get);
  PfcState st;
  if (cur.error == -EOPNOTSUPP || (cur.error == 0 && !cur.pfc)) return st;
  st.error = cur.error;
  st.supported = cur.error == 0;
  if (cur.pfc) st.pfc_en = cur.pfc->pfc_en;
  return st;
}

int kernel_set(const std::string& ifname, uint8_t pfc_en) {
  NetlinkRequest get = request("DCB IEEE get (RTM_GETDCB)", RTM_GETDCB, DCB_CMD_IEEE_GET, ifname);
  Reply cur = transact(get);
  if (cur.error) return cur.error;
  if (!cur.pfc) return -EOPNOTSUPP;
  ieee_pfc pfc = *cur.pfc;
  pfc.pfc_en = pfc_en;
  NetlinkRequest set = request("DCB IEEE set PFC (RTM_SETDCB)", RTM_SETDCB, DCB_CMD_IEEE_SET, ifname);
  nlattr* ieee = set.nest_start(DCB_ATTR_IEEE);
  set.put(DCB_ATTR_IEEE_PFC, &pfc, sizeof(pfc));
  set.nest_end(ieee);
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
