#include "nic/selftest.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "common/error.h"

namespace rg::nic {

namespace {

template <typename T, auto Fn>
struct Deleter {
  void operator()(T* p) const { Fn(p); }
};
template <typename T, auto Fn>
using Handle = std::unique_ptr<T, Deleter<T, Fn>>;

// A profile attribute and the conventional value that stands in for it when
// finding out which one the device refuses.
struct Knob {
  const char* name;
  std::function<void(ibv_qp_attr&)> neutral;
};

struct Step {
  const char* name;
  ibv_qp_attr attr;
  int mask;
  std::vector<Knob> knobs;
};

}  // namespace

SelfTestResult self_test(const DeviceInfo& dev, const PortInfo& port, int gid_index,
                         const Profile& profile) {
  SelfTestResult r;
  auto fail = [&](const char* step, const std::string& what) {
    r.step = step;
    r.detail = what;
    return r;
  };

  int num = 0;
  ibv_device** list = ibv_get_device_list(&num);
  if (!list) return fail("open", errno_text(errno));
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> list_guard(list, ibv_free_device_list);
  ibv_device* ibdev = nullptr;
  for (int i = 0; i < num; i++)
    if (dev.name == ibv_get_device_name(list[i])) ibdev = list[i];
  if (!ibdev) return fail("open", "device " + dev.name + " disappeared");

  Handle<ibv_context, ibv_close_device> ctx(ibv_open_device(ibdev));
  if (!ctx) return fail("ibv_open_device", errno_text(errno));
  Handle<ibv_pd, ibv_dealloc_pd> pd(ibv_alloc_pd(ctx.get()));
  if (!pd) return fail("ibv_alloc_pd", errno_text(errno));
  Handle<ibv_cq, ibv_destroy_cq> cq(ibv_create_cq(ctx.get(), 4, nullptr, nullptr, 0));
  if (!cq) return fail("ibv_create_cq", errno_text(errno));
  ibv_qp_init_attr init{};
  init.send_cq = cq.get();
  init.recv_cq = cq.get();
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 1;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  Handle<ibv_qp, ibv_destroy_qp> qp(ibv_create_qp(pd.get(), &init));
  if (!qp) return fail("ibv_create_qp", errno_text(errno));

  ibv_gid gid{};
  if (ibv_query_gid(ctx.get(), port.num, gid_index, &gid))
    return fail("ibv_query_gid", "GID index " + std::to_string(gid_index) + ": " + errno_text(errno));

  std::vector<Step> steps(3);
  Step& to_init = steps[0];
  to_init.name = "INIT";
  to_init.attr.qp_state = IBV_QPS_INIT;
  to_init.attr.pkey_index = 0;
  to_init.attr.port_num = port.num;
  to_init.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  to_init.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;

  Step& rtr = steps[1];
  rtr.name = "RTR";
  rtr.attr.qp_state = IBV_QPS_RTR;
  rtr.attr.path_mtu = static_cast<ibv_mtu>(port.active_mtu_enum ? port.active_mtu_enum : IBV_MTU_1024);
  rtr.attr.dest_qp_num = qp->qp_num;
  rtr.attr.rq_psn = 0;
  rtr.attr.max_dest_rd_atomic = 1;
  rtr.attr.min_rnr_timer = profile.min_rnr_timer;
  rtr.attr.ah_attr.is_global = 1;
  rtr.attr.ah_attr.grh.dgid = gid;
  rtr.attr.ah_attr.grh.sgid_index = gid_index;
  rtr.attr.ah_attr.grh.hop_limit = 64;
  rtr.attr.ah_attr.grh.traffic_class = profile.tos();
  rtr.attr.ah_attr.port_num = port.num;
  rtr.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  rtr.knobs = {
      {"traffic_class", [](ibv_qp_attr& a) { a.ah_attr.grh.traffic_class = 0; }},
      {"min_rnr_timer", [](ibv_qp_attr& a) { a.min_rnr_timer = 12; }},
      {"path_mtu", [](ibv_qp_attr& a) { a.path_mtu = IBV_MTU_1024; }},
  };

  Step& rts = steps[2];
  rts.name = "RTS";
  rts.attr.qp_state = IBV_QPS_RTS;
  rts.attr.timeout = profile.ack_timeout.exponent;
  rts.attr.retry_cnt = profile.retry_cnt;
  rts.attr.rnr_retry = profile.rnr_retry;
  rts.attr.sq_psn = 0;
  rts.attr.max_rd_atomic = 1;
  rts.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC;
  rts.knobs = {
      {"timeout", [](ibv_qp_attr& a) { a.timeout = 14; }},
      {"retry_cnt", [](ibv_qp_attr& a) { a.retry_cnt = 7; }},
      {"rnr_retry", [](ibv_qp_attr& a) { a.rnr_retry = 7; }},
  };

  for (Step& s : steps) {
    int err = ibv_modify_qp(qp.get(), &s.attr, s.mask);
    if (!err) continue;
    r.step = s.name;
    r.detail = std::string("ibv_modify_qp to ") + s.name + ": " + std::strerror(err);
    // Which attribute? Put each profile value back to its conventional one
    // in turn; the one whose removal lets the transition pass is the culprit.
    for (const Knob& k : s.knobs) {
      ibv_qp_attr trial = s.attr;
      k.neutral(trial);
      if (ibv_modify_qp(qp.get(), &trial, s.mask) == 0) {
        r.refused = k.name;
        break;
      }
    }
    return r;
  }
  r.ok = true;
  return r;
}

}  // namespace rg::nic
