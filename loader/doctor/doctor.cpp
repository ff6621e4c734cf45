#include "doctor/doctor.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "dataplane/attach.h"
#include "dataplane/bpf_object.h"
#include "dataplane/hooks.h"
#include "dataplane/maps.h"
#include "dataplane/netfilter.h"
#include "dataplane/pin_scope.h"
#include "dataplane/state.h"
#include "metrics/presentation.h"
#include "nic/apply.h"
#include "nic/counters.h"
#include "nic/devices.h"
#include "nic/profile.h"
#include "roceguard.skel.h"

namespace rg {
namespace {

// Drivers with native XDP (ndo_bpf) in mainline Linux. A driver missing here
// is reported as unknown, not as refused: the attach is the final word.
const std::set<std::string> kNativeXdpDrivers{
    "atlantic", "bnxt_en", "bond", "cpsw", "dpaa2-eth", "ena", "enetc", "fec", "gve", "hv_netvsc", "i40e", "iavf",
    "ice", "idpf", "igb", "igc", "ionic", "ixgbe", "ixgbevf", "lan966x-switch", "mana", "mlx4_en", "mlx5_core",
    "mvneta", "mvpp2", "netdevsim", "nfp", "nicvf", "octeontx2-nicpf", "qede", "sfc", "stmmaceth", "tsnep", "tun",
    "veth", "virtio_net", "vmxnet3", "xen-netfront"};

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// "-1" when the sysctl does not exist (IPv6 disabled, interface gone).
int sysctl_int(const std::string& path) {
  const std::string text = read_line(path);
  return text.empty() ? -1 : std::atoi(text.c_str());
}

std::string driver_of(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  ethtool_drvinfo info{};
  info.cmd = ETHTOOL_GDRVINFO;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  ifr.ifr_data = reinterpret_cast<char*>(&info);
  const int rc = ioctl(fd, SIOCETHTOOL, &ifr);
  close(fd);
  return rc == 0 ? std::string(info.driver) : "";
}

int mtu_of(const std::string& ifname) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
  const int rc = ioctl(fd, SIOCGIFMTU, &ifr);
  close(fd);
  return rc == 0 ? ifr.ifr_mtu : 0;
}

// One BPF instruction; the probes below are a handful of them, not worth
// a second BPF object.
bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// A program the kernel accepts with BPF_F_XDP_HAS_FRAGS (5.18+), i.e. XDP
// multi-buffer: frames larger than a page reach XDP as fragments.
bool kernel_has_xdp_frags() {
  const bpf_insn prog[] = {insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, XDP_PASS),
                           insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)};
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .prog_flags = BPF_F_XDP_HAS_FRAGS);
  int fd = bpf_prog_load(BPF_PROG_TYPE_XDP, "rg_probe_frags", "GPL", prog, 2, &opts);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// Whether roceguard's own XDP program is declared multi-buffer
// (SEC("xdp.frags")): read from the object, nothing loaded. libbpf turns the
// section into BPF_F_XDP_HAS_FRAGS only when it loads the program, so an
// opened object says it by its section name.
bool program_has_xdp_frags() {
  roceguard* skel = roceguard__open();
  if (!skel) return false;
  bpf_program* prog = bpf_object__find_program_by_name(skel->obj, kProgXdp);
  const char* section = prog ? bpf_program__section_name(prog) : nullptr;
  const bool frags = prog && ((bpf_program__flags(prog) & BPF_F_XDP_HAS_FRAGS) ||
                              (section && std::string_view(section) == "xdp.frags"));
  roceguard__destroy(skel);
  return frags;
}

// Runs bpf_fib_lookup from the loopback device, as the data plane routes to
// tunnel peers (bpf/route.h), to a documentation address. The result that
// matters is BPF_FIB_LKUP_RET_FWD_DISABLED: the kernel checks forwarding
// on that device before anything else, and some kernels refuse there.
// -1 when the probe itself cannot run.
long fib_lookup_from_loopback(int family) {
  constexpr int16_t kParams = -64;  // struct bpf_fib_lookup on the stack
  std::vector<bpf_insn> p;
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0));
  for (int16_t off = kParams; off < 0; off += 8) p.push_back(insn(BPF_ST | BPF_MEM | BPF_DW, BPF_REG_10, 0, off, 0));
  p.push_back(insn(BPF_ST | BPF_MEM | BPF_B, BPF_REG_10, 0, kParams + 0, family));  // family
  p.push_back(insn(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, kParams + 8, 1));       // ifindex: lo
  if (family == AF_INET) {
    uint32_t dst;
    std::memcpy(&dst, "\xc0\x00\x02\x01", 4);  // 192.0.2.1 (RFC 5737)
    p.push_back(insn(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, kParams + 32, static_cast<int32_t>(dst)));
  } else {
    uint32_t first;
    std::memcpy(&first, "\x20\x01\x0d\xb8", 4);  // 2001:db8::1 (RFC 3849)
    uint32_t last;
    std::memcpy(&last, "\x00\x00\x00\x01", 4);
    p.push_back(insn(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, kParams + 32, static_cast<int32_t>(first)));
    p.push_back(insn(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, kParams + 44, static_cast<int32_t>(last)));
  }
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0));
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0));
  p.push_back(insn(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, kParams));
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_3, 0, 0, 64));
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_4, 0, 0, 0));
  p.push_back(insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_fib_lookup));
  p.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  int fd = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "rg_probe_fib", "GPL", p.data(), p.size(), nullptr);
  if (fd < 0) return -1;
  unsigned char frame[64] = {};
  LIBBPF_OPTS(bpf_test_run_opts, run, .data_in = frame, .data_size_in = sizeof(frame), .repeat = 1);
  const int err = bpf_prog_test_run_opts(fd, &run);
  close(fd);
  return err ? -1 : static_cast<long>(run.retval);
}

// Largest MTU at which native XDP without multi-buffer takes a frame: one
// page minus XDP headroom, skb_shared_info and the Ethernet header (the
// kernel's veth check; other drivers are close to it).
int single_buffer_xdp_mtu() {
  const long page = sysconf(_SC_PAGESIZE);
  return static_cast<int>((page > 0 ? page : 4096) - XDP_PACKET_HEADROOM - 320 - 14);
}

class Doctor {
 public:
  explicit Doctor(const DoctorInput& in) : in_(in) {}

  std::vector<Finding> run() {
    check_bpffs();
    check_kernel();
    check_interfaces();
    check_fast_path();
    check_rdma();
    check_scrape();
    check_ack_timeout();
    check_shield_peers();
    check_tunnel_keys();
    return std::move(out_);
  }

 private:
  void add(std::string check, std::string subject, Verdict v, std::string what, std::string fix = "") {
    out_.push_back({std::move(check), std::move(subject), v, std::move(what), std::move(fix)});
  }

  void check_bpffs() {
    const std::string& pin = in_.pin_path;
    const std::string parent = parent_of(pin);
    if (!is_bpffs(parent)) {
      if (pin.rfind("/sys/fs/bpf/", 0) == 0 && !is_bpffs("/sys/fs/bpf"))
        add("bpffs", "", Verdict::kWarn,
            "no bpffs is mounted on /sys/fs/bpf; run and attach mount one when they start as root",
            "mount it at boot (systemd's sys-fs-bpf.mount does) or: mount -t bpf bpf /sys/fs/bpf");
      else
        add("bpffs", "", Verdict::kFail, "pin path " + pin + " is not on a bpffs (" + parent + " is not bpf)",
            "choose a --pin-path under /sys/fs/bpf");
      return;
    }
    const PinScope scope = pin_scope(pin);
    if (scope.outlives_process)
      add("bpffs", "", Verdict::kOk, "bpffs on " + parent + " is the host's: pins outlive roceguard");
    else
      add("bpffs", "", Verdict::kFail, "bpffs on " + parent + " is private to this mount namespace: " + scope.why,
          "run roceguard in the host's mount namespace, or bind-mount the host's /sys/fs/bpf into its container");
  }

  void check_kernel() {
    if (access("/sys/kernel/btf/vmlinux", R_OK) == 0)
      add("kernel.btf", "", Verdict::kOk, "kernel BTF present (/sys/kernel/btf/vmlinux)");
    else
      add("kernel.btf", "", Verdict::kFail, "no kernel BTF: the programs' CO-RE relocations cannot be resolved",
          "a kernel built with CONFIG_DEBUG_INFO_BTF=y");

    const bool tcx = tcx_supported();
    const bool clsact = in_.config.tc_attach == TcAttach::kClsact;
    add("kernel.tcx", "", Verdict::kInfo,
        !tcx     ? "no tcx: TC programs attach through clsact only, as roceguard's do"
        : clsact ? "tcx present (6.6+), but dataplane.tc_attach is clsact: every tcx program of another tool runs "
                   "before roceguard's clsact filters"
                 : "tcx present (6.6+): roceguard attaches its TC programs as tcx links, first on their hooks");

    frags_kernel_ = kernel_has_xdp_frags();
    frags_program_ = program_has_xdp_frags();
    if (frags_kernel_ && frags_program_)
      add("kernel.xdp_multi_buffer", "", Verdict::kOk, "XDP multi-buffer: jumbo frames reach the XDP program");
    else if (frags_kernel_)
      add("kernel.xdp_multi_buffer", "", Verdict::kInfo,
          "the kernel has XDP multi-buffer, but this roceguard's XDP program is single-buffer: native XDP needs an "
          "MTU of at most " + std::to_string(single_buffer_xdp_mtu()));
    else
      add("kernel.xdp_multi_buffer", "", Verdict::kWarn,
          "no XDP multi-buffer (kernel before 5.18): native XDP needs an MTU of at most " +
              std::to_string(single_buffer_xdp_mtu()),
          "keep gateway MTUs at or below that, or use xdp_mode = \"skb\"");

    if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_SCHED_CLS, BPF_FUNC_fib_lookup, nullptr) == 1)
      add("kernel.fib_lookup", "", Verdict::kOk, "bpf_fib_lookup available to TC programs");
    else
      add("kernel.fib_lookup", "", Verdict::kFail, "bpf_fib_lookup unavailable: no Geneve encapsulation",
          "a kernel of 4.18 or later with CONFIG_INET");

    // Only the families tunnels use matter; with no peer, both are shown.
    bool v4 = in_.config.peers.empty(), v6 = in_.config.peers.empty();
    for (const auto& p : in_.config.peers) (p.remote.family == AF_INET ? v4 : v6) = true;
    for (int family : {AF_INET, AF_INET6}) {
      if (!(family == AF_INET ? v4 : v6)) continue;
      const std::string fam = family == AF_INET ? "ipv4" : "ipv6";
      const int lo_forwarding = sysctl_int("/proc/sys/net/" + fam + "/conf/lo/forwarding");
      const long rc = fib_lookup_from_loopback(family);
      const std::string sysctl = "net." + fam + ".conf.lo.forwarding = " + std::to_string(lo_forwarding);
      if (rc == BPF_FIB_LKUP_RET_FWD_DISABLED)
        add("forwarding." + fam, "lo", in_.config.peers.empty() ? Verdict::kWarn : Verdict::kFail,
            sysctl + ", and this kernel's bpf_fib_lookup refuses to route from a device that does not forward: "
                     "packets to " + fam + " tunnel peers would leave unencapsulated (counted as fib_miss)",
            "sysctl -w net." + fam + ".conf.all.forwarding=1 (a gateway forwards anyway)");
      else if (rc < 0)
        add("forwarding." + fam, "lo", Verdict::kWarn, "could not run the bpf_fib_lookup probe: " +
                                                           errno_text(errno) + " (needs CAP_BPF and CAP_NET_ADMIN)");
      else
        add("forwarding." + fam, "lo", Verdict::kOk,
            sysctl + ": bpf_fib_lookup routes to " + fam + " tunnel peers from the loopback device");
    }
  }

  // The XDP fast path carries forwarded RoCE past every netfilter hook, so
  // roceguard leaves its slot empty while a rule could apply (section 16);
  // a slot filled (by an attach from before the rule, the daemon not
  // running) while one does is the bypass itself.
  void check_fast_path() {
    const std::string check = "dataplane.fast_path";
    if (!in_.config.xdp_forward) {
      add(check, "", Verdict::kInfo, "the XDP fast path is not configured (dataplane.xdp_forward is off)");
      return;
    }
    const NetfilterProbe nf = probe_netfilter();
    const std::optional<bool> filled = pinned_xdp_forward_linked(in_.pin_path);
    if (!nf.applies()) {
      add(check, "", Verdict::kOk,
          std::string("the XDP fast path is configured, and no netfilter rule applies to forwarded packets "
                      "(nftables prerouting, forward, postrouting, ingress and netdev chains; iptables-legacy)") +
              (filled && !*filled ? "; its pinned slot is empty until `roceguard run` or an attach fills it" : ""));
      return;
    }
    if (filled && *filled) {
      add(check, "", Verdict::kFail,
          "the XDP fast path runs, past netfilter rules that apply to forwarded packets: " + nf.summary(),
          "`roceguard attach` again (it leaves the fast path off while such rules exist), or run `roceguard run`, "
          "which follows the rules");
      return;
    }
    add(check, "", Verdict::kWarn,
        "the XDP fast path is configured, but netfilter keeps it off (forwarded RoCE takes the stack): " +
            nf.summary(),
        "remove those rules if they are not meant for forwarded RoCE, or turn dataplane.xdp_forward off");
  }

  std::vector<std::string> interfaces() const {
    if (in_.interfaces_given) return in_.config.interfaces;
    std::vector<std::string> names;
    if (struct if_nameindex* list = if_nameindex()) {
      for (struct if_nameindex* i = list; i->if_index; ++i)
        if (std::string(i->if_name) != "lo") names.push_back(i->if_name);
      if_freenameindex(list);
    }
    return names;
  }

  // Where attach will run the ingress program on name, and why.
  std::string ingress_plan(const std::string& name, const std::string& driver) const {
    const Config& cfg = in_.config;
    if (planned_ingress_hook(cfg, name) == IngressHook::kTc) {
      if (cfg.ingress_hook == IngressHook::kTc) return "ingress program at TC ingress, as configured";
      if (cfg.xdp_mode == XdpMode::kSkb)
        return "ingress program at TC ingress (ingress_hook auto): generic XDP would run on an skb anyway";
      return "ingress program at TC ingress (ingress_hook auto): " + driver +
             "'s native XDP copies every frame the stack built into a page first";
    }
    if (cfg.ingress_hook == IngressHook::kXdp) return "ingress program at XDP, as configured; a refusal fails the attach";
    return "ingress program at XDP (ingress_hook auto); TC ingress if the driver refuses the native attach";
  }

  // Another tool's TC program that runs before roceguard's on the same hook
  // (tcx, or a clsact filter at a lower priority number) can end the
  // packet's path there: roceguard is attached and never sees the packet.
  void check_programs_ahead(const std::string& name) {
    const Config& cfg = in_.config;
    const bool tc_ingress = planned_ingress_hook(cfg, name) == IngressHook::kTc;
    std::vector<ProgramAhead> ahead;
    try {
      ahead = programs_ahead(HookOwner(in_.pin_path), static_cast<int>(if_nametoindex(name.c_str())), cfg.tc_priority,
                             tc_ingress);
    } catch (const std::exception& e) {
      add("interface.tc_ahead", name, Verdict::kWarn, std::string("cannot list the TC programs: ") + e.what());
      return;
    }
    if (ahead.empty()) {
      add("interface.tc_ahead", name, Verdict::kOk,
          std::string("no other program runs before roceguard's on TC egress") + (tc_ingress ? " or ingress" : ""));
      return;
    }
    for (const auto& a : ahead)
      add("interface.tc_ahead", name, Verdict::kWarn,
          a.name + " (id " + std::to_string(a.prog_id) + ", " + a.where + ") runs before roceguard on TC " +
              tc_hook_name(a.hook) + ": if it returns a verdict (TC_ACT_OK, TCX_PASS, a drop or a redirect) the "
              "packet never reaches roceguard's program",
          a.where == "tcx" ? "have that tool return TCX_NEXT for RoCE v2 (UDP 4791), or detach it; roceguard "
                             "attached with tcx (dataplane.tc_attach) takes the first place again on `roceguard "
                             "detach` and attach"
                           : "move roceguard ahead of it (--tc-priority below " + std::to_string(a.priority) +
                                 "), or have that filter return TC_ACT_UNSPEC");
  }

  void check_interfaces() {
    const auto names = interfaces();
    if (names.empty()) add("interface", "", Verdict::kInfo, "no interface to look at besides lo");
    for (const auto& name : names) {
      if (!if_nametoindex(name.c_str())) {
        add("interface", name, Verdict::kFail, "does not exist", "create it, or fix the interface list");
        continue;
      }
      const std::string driver = driver_of(name);
      const int mtu = mtu_of(name);
      const std::string drv = driver.empty() ? "an unknown driver" : "driver " + driver;
      if (in_.config.xdp_mode == XdpMode::kSkb) {
        add("interface.xdp", name, Verdict::kOk,
            drv + ", MTU " + std::to_string(mtu) + ": generic (skb) XDP as configured; any driver and MTU");
      } else if (!kNativeXdpDrivers.contains(driver)) {
        add("interface.xdp", name, Verdict::kWarn,
            drv + " is not known to have native XDP: the native attach will likely be refused",
            "set dataplane.xdp_mode = \"skb\" (--xdp-mode skb)");
      } else if (mtu > single_buffer_xdp_mtu() && !(frags_kernel_ && frags_program_)) {
        add("interface.xdp", name, Verdict::kFail,
            drv + ", MTU " + std::to_string(mtu) + ": native XDP without multi-buffer takes at most MTU " +
                std::to_string(single_buffer_xdp_mtu()) +
                (driver == "veth" ? " (on veth the peer's MTU counts)" : "") + "; the kernel refuses the attach",
            "lower the MTU to " + std::to_string(single_buffer_xdp_mtu()) +
                " or set dataplane.xdp_mode = \"skb\" (--xdp-mode skb)");
      } else {
        add("interface.xdp", name, Verdict::kOk, drv + ", MTU " + std::to_string(mtu) + ": native XDP");
      }
      add("interface.ingress", name, Verdict::kOk, ingress_plan(name, driver));
      check_programs_ahead(name);
      const int v4 = sysctl_int("/proc/sys/net/ipv4/conf/" + name + "/forwarding");
      const int v6 = sysctl_int("/proc/sys/net/ipv6/conf/" + name + "/forwarding");
      const std::string what = "net.ipv4.conf." + name + ".forwarding = " + std::to_string(v4) + ", net.ipv6.conf." +
                               name + ".forwarding = " + std::to_string(v6);
      if (v4 == 0 || v6 == 0)
        add("interface.forwarding", name, in_.config.peers.empty() ? Verdict::kInfo : Verdict::kWarn,
            what + ": a gateway must forward the RoCE it carries",
            "sysctl -w net.ipv4.conf." + name + ".forwarding=1 (and ipv6) on a gateway; nothing on an RDMA host");
      else
        add("interface.forwarding", name, Verdict::kOk, what);
    }
  }

  void check_rdma() {
    const auto devices = nic::discover();
    if (devices.empty())
      add("rdma", "", Verdict::kInfo, "no RDMA device: no RoCE traffic bypasses the data plane on this host");
    for (const auto& dev : devices) {
      std::string netdevs;
      for (const auto& port : dev.ports)
        if (!port.netdev.empty()) netdevs += (netdevs.empty() ? "" : ", ") + port.netdev;
      const std::string where = netdevs.empty() ? "" : " on " + netdevs;
      if (dev.driver == "rxe" || dev.driver == "siw" || dev.name.rfind("rxe", 0) == 0)
        add("rdma", dev.name, Verdict::kOk,
            "software RoCE" + where + ": its packets pass through TC and XDP, the data plane sees them");
      else
        add("rdma", dev.name, Verdict::kWarn,
            "hardware RNIC (" + (dev.driver.empty() ? std::string("driver unknown") : dev.driver) + ")" + where +
                ": its RoCE traffic is sent and received by the NIC and bypasses TC and XDP; only the NIC half "
                "applies here",
            "`roceguard nic apply` for the profile, and `roceguard run --dataplane false` to export its counters "
            "without attaching programs");
    }
    nic::NicSystem sys;
    sys.state_dir = in_.nic_state_dir;
    const auto applied = nic::saved_devices(sys);
    std::string list;
    for (const auto& d : applied) list += (list.empty() ? "" : ", ") + d;
    if (applied.empty())
      add("nic.profile", "", Verdict::kInfo, "the NIC profile is not applied on this host (nothing saved in " +
                                                 in_.nic_state_dir + ")",
          devices.empty() ? "" : "`roceguard nic apply --dry-run` shows what it would change");
    else
      add("nic.profile", "", Verdict::kOk,
          "the NIC profile is applied to " + list + "; `roceguard nic revert` restores the saved values");
  }

  // What a /metrics scrape reads, read once and timed: the pinned maps (as
  // the exporter does) and the NIC counters.
  void check_scrape() {
    const auto start = std::chrono::steady_clock::now();
    std::string what;
    if (any_map_pinned(in_.pin_path)) {
      try {
        MapReader reader(in_.pin_path);
        const size_t rows = reader.counters().size();
        QpEntries qps;
        if (in_.config.per_qp) reader.top_qps(in_.config.top_qps, qp_ranks_before, &qps);
        what = std::to_string(rows) + " counter row(s)" +
               (in_.config.per_qp ? ", " + std::to_string(size_t{qps.v4} + qps.v6) + " QP direction(s) tracked"
                                  : "");
      } catch (const std::exception& e) {
        add("scrape", "", Verdict::kFail, std::string("the pinned maps cannot be read: ") + e.what(),
            "`roceguard status` names the map; `attach --reset-state` replaces incompatible maps");
        return;
      }
    } else {
      what = "no pinned maps under " + in_.pin_path;
    }
    const size_t nic_counters = nic::read_nic_counters(interfaces()).size();
    const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    char ms[32];
    std::snprintf(ms, sizeof(ms), "%.1f", took.count());
    add("scrape", "", Verdict::kInfo,
        std::string("reading what a scrape reads took ") + ms + " ms (" + what + ", " + std::to_string(nic_counters) +
            " NIC counter(s))");
  }

  // The tunnels as the pinned maps show them (none without pins); nullopt,
  // with check skipped and the reason said, when the pins cannot be read.
  std::optional<std::vector<TunnelPeer>> pinned_tunnels(const char* check) {
    if (!any_map_pinned(in_.pin_path)) return std::vector<TunnelPeer>{};
    try {
      MapReader reader(in_.pin_path);
      return tunnel_peers(reader.peer_stats(), reader.tunnel_streams(), peer_names(in_.pin_path),
                          monotonic_now_ns());
    } catch (const std::exception&) {
      add(check, "", Verdict::kInfo, "skipped: the pinned maps cannot be read (see scrape)");
      return std::nullopt;
    }
  }

  // The NIC profile's ACK timeout against each tunnel's round trip as the
  // data plane measured it (2 x the p99 one-way delay): a timeout shorter
  // than the path calls for resends what was not lost. A warning, not a
  // failure: the RDMA hosts behind the tunnel may use another profile.
  void check_ack_timeout() {
    const char* check = "nic.ack_timeout";
    const auto read = pinned_tunnels(check);
    if (!read) return;
    const std::vector<TunnelPeer>& tunnels = *read;
    nic::Profile profile = in_.config.nic;
    std::string source = in_.config_given ? "the configuration's profile" : "the default profile";
    if (!in_.config_given)
      if (auto recorded = recorded_nic_profile(in_.pin_path)) {
        profile = *recorded;
        source = "the running configuration's profile";
      }
    bool measured = false;
    for (const auto& t : tunnels) {
      std::string clocks;
      if (tunnel_clocks(t, &clocks) == TunnelClocks::kNotComparable) {
        measured = true;
        add(check, t.name, Verdict::kWarn,
            "clocks not comparable: " + clocks + "; the one-way delay is unknown, so no round trip to hold the "
            "ACK timeout against (the queueing delay is measured all the same)",
            "synchronise both gateways' clocks (PTP or NTP) with the same TAI offset on both (the time daemon "
            "sets it, chrony with `leapsectz right/UTC`; `adjtimex --print` shows it as tai)");
        continue;
      }
      const auto rtt = tunnel_rtt_us(t);
      if (!rtt) continue;
      measured = true;
      const std::string figures = "round trip " + nic::format_us(*rtt) + " (2 x p99 one-way delay from the peer)";
      if (auto warning = nic::ack_timeout_below_path(profile, *rtt)) {
        const auto fit = nic::ack_timeout_for_rtt(*rtt);
        add(check, t.name, Verdict::kWarn,
            *warning + " (" + source + "; the round trip is 2 x the p99 one-way delay from the peer)",
            fit ? "on the RDMA hosts whose traffic takes this tunnel, nic.ack_timeout = \"" +
                      nic::format_us(fit->effective_us) + "\" (--ack-timeout), then `roceguard nic apply` and "
                      "`roceguard nic env`"
                : "");
      } else {
        const auto fit = nic::ack_timeout_for_rtt(*rtt);
        add(check, t.name, Verdict::kOk,
            figures + ": " + source + "'s " + profile.ack_timeout_text + " (exponent " +
                std::to_string(profile.ack_timeout.exponent) + ") fits it; exponent " +
                std::to_string(fit->exponent) + " (" + nic::format_us(fit->effective_us) + ") would be enough");
      }
    }
    if (!measured)
      add(check, "", Verdict::kInfo,
          "skipped: no tunnel has delay samples (no pinned maps, tunnel.sequence off, or nothing arrived from a "
          "peer), so no round trip to hold the ACK timeout against");
  }

  // A shielded peer must eliminate the second copies, or its host gets
  // both: a peer that numbers its own tunnel in an epoch does (a roceguard
  // that knows the shield); one whose numbers carry none does not (an
  // older roceguard); one that sent nothing numbered cannot be told.
  void check_shield_peers() {
    const char* check = "tunnel.shield";
    std::vector<std::string> shielded;
    if (in_.config_given) {
      for (const auto& p : in_.config.peers)
        if (p.shield != Shield::kOff) shielded.push_back(p.name);
    } else {
      shielded = recorded_shielded_peers(in_.pin_path);
    }
    if (shielded.empty()) return;
    const auto read = pinned_tunnels(check);
    if (!read) return;
    const std::vector<TunnelPeer>& tunnels = *read;
    for (const auto& name : shielded) {
      const auto t = std::find_if(tunnels.begin(), tunnels.end(), [&](const TunnelPeer& p) { return p.name == name; });
      if (t == tunnels.end() || !t->streams)
        add(check, name, Verdict::kInfo,
            "the loss shield is on towards this peer, and nothing numbered came from it yet: whether it drops the "
            "second copies cannot be told (it does if it runs roceguard with the shield and tunnel.sequence on)");
      else if (t->epoch_streams)
        add(check, name, Verdict::kOk, "the peer numbers its tunnel in an epoch: it drops the second copies");
      else
        add(check, name, Verdict::kWarn,
            "the loss shield is on towards this peer, but its own numbers carry no epoch: a roceguard before the "
            "shield, which hands both copies of every shielded packet to its host",
            "upgrade roceguard on the peer, or set shield = \"off\" for it");
    }
  }

  // What acts on the peer's option must know the option is the peer's:
  // the shield's "auto" mode turns copies on from the loss the option
  // reports. Without a key anyone who can send UDP 6081 from the peer's
  // address writes that report (docs/design.md section 14,
  // "Authentication").
  void check_tunnel_keys() {
    const char* check = "tunnel.key";
    std::vector<std::pair<std::string, bool>> peers;  // shielded "auto": name, keyed
    if (in_.config_given) {
      for (const auto& p : in_.config.peers)
        if (p.shield == Shield::kAuto) peers.emplace_back(p.name, !p.key_file.empty());
    } else {
      peers = recorded_auto_shield_peers(in_.pin_path);
    }
    for (const auto& [name, keyed] : peers) {
      if (keyed)
        add(check, name, Verdict::kOk,
            "the loss shield's auto mode acts on the peer's loss reports, which the tunnel's key authenticates");
      else
        add(check, name, Verdict::kWarn,
            "the loss shield's auto mode acts on the peer's loss reports, and the tunnel has no key: anyone who "
            "can send UDP 6081 from the peer's address can forge them (turning the copies on), fill the stream "
            "table, and mark sequence numbers as arrived (the genuine packets are then dropped as copies)",
            "give the peer a key_file, the same key at both gateways (docs/design.md section 14)");
    }
  }

  const DoctorInput& in_;
  std::vector<Finding> out_;
  bool frags_kernel_ = false;
  bool frags_program_ = false;
};

}  // namespace

std::vector<Finding> run_doctor(const DoctorInput& in) { return Doctor(in).run(); }

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kOk: return "ok";
    case Verdict::kInfo: return "info";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "fail";
  }
  return "?";
}

nlohmann::json findings_json(const std::vector<Finding>& findings) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : findings)
    list.push_back({{"check", f.check}, {"subject", f.subject}, {"verdict", std::string(verdict_name(f.verdict))},
                    {"what", f.what}, {"fix", f.fix}});
  return list;
}

int doctor_exit_code(const std::vector<Finding>& findings) {
  for (const auto& f : findings)
    if (f.verdict == Verdict::kFail) return kExitUnhealthy;
  return kExitOk;
}

}  // namespace rg
