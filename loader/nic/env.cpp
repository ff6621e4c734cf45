#include "nic/env.h"

#include <sstream>

#include "roceguard/nic_env.h"

namespace rg::nic {

// What the profile can hold must be what libroceguard_qp.so accepts.
static_assert(kAckTimeoutMinExp == RG_ENV_TIMEOUT_MIN && kAckTimeoutMaxExp == RG_ENV_TIMEOUT_MAX);

std::string render_env(const Profile& p, const std::vector<DeviceInfo>& devices, std::optional<double> rtt_us) {
  std::ostringstream o;
  const std::string eff = format_us(p.ack_timeout.effective_us);
  o << "# roceguard nic env: RoCE retransmit/QoS profile (systemd EnvironmentFile)\n"
    << "# DSCP " << unsigned(p.dscp) << ", ECN " << unsigned(p.ecn) << " -> ToS byte "
    << unsigned(p.tos()) << "; ack timeout " << p.ack_timeout_text << " -> exponent "
    << unsigned(p.ack_timeout.exponent) << " (effective " << eff << ")\n";
  if (rtt_us) {
    std::string why;
    const auto fit = ack_timeout_for_rtt(*rtt_us, &why);
    o << "# round trip " << format_us(*rtt_us) << ": ";
    if (fit)
      o << "the ACK timeout fitting it is exponent " << unsigned(fit->exponent) << " ("
        << format_us(fit->effective_us) << "); the profile's "
        << (p.ack_timeout.exponent >= fit->exponent ? "fits it"
                                                    : "is shorter: nic.ack_timeout = \"" +
                                                          format_us(fit->effective_us) + "\" fits")
        << "\n";
    else
      o << why << "\n";
  }

  std::string hca, ucx_devices;
  std::optional<int> gid = p.gid_index;
  for (const auto& d : devices)
    for (const auto& port : d.ports) {
      hca += (hca.empty() ? "" : ",") + d.name + ":" + std::to_string(port.num);
      ucx_devices += (ucx_devices.empty() ? "" : ",") + d.name + ":" + std::to_string(port.num);
      if (!gid) gid = roce_v2_gid_index(port);
    }

  // NCCL reads the whole traffic class byte and the IBA exponent.
  o << "NCCL_IB_TC=" << unsigned(p.tos()) << "\n"
    << "NCCL_IB_TIMEOUT=" << unsigned(p.ack_timeout.exponent) << "\n"
    << "NCCL_IB_RETRY_CNT=" << unsigned(p.retry_cnt) << "\n";
  if (gid)
    o << "NCCL_IB_GID_INDEX=" << *gid << "\n";
  else
    o << "# NCCL_IB_GID_INDEX: no RoCE v2 GID found (no RDMA device bound to the interfaces)\n";
  if (!hca.empty())
    o << "NCCL_IB_HCA==" << hca << "\n";
  else
    o << "# NCCL_IB_HCA: no RDMA device found\n";

  // UCX takes the traffic class byte too, but its RC timeout as a duration.
  o << "UCX_IB_TRAFFIC_CLASS=" << unsigned(p.tos()) << "\n"
    << "UCX_RC_TIMEOUT=" << eff << "\n"
    << "UCX_RC_RETRY_COUNT=" << unsigned(p.retry_cnt) << "\n"
    << "UCX_RC_RNR_RETRY_COUNT=" << unsigned(p.rnr_retry) << "\n";
  if (gid) o << "UCX_IB_GID_INDEX=" << *gid << "\n";
  if (!ucx_devices.empty()) o << "UCX_NET_DEVICES=" << ucx_devices << "\n";

  // libroceguard_qp.so (LD_PRELOAD) for applications linked to libibverbs.
  o << RG_ENV_TC "=" << unsigned(p.tos()) << "\n"
    << RG_ENV_TIMEOUT "=" << unsigned(p.ack_timeout.exponent) << "\n"
    << RG_ENV_RETRY_CNT "=" << unsigned(p.retry_cnt) << "\n";
  return o.str();
}

}  // namespace rg::nic
