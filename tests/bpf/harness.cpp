#include "harness.h"


#include "test_run.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdarg>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "dataplane/names.h"

namespace rg::test {
namespace {

int g_ifindex = 0;
int g_other_ifindex = 0;
std::string g_temp_dir;

void write_file(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  f << value;
  if (!f.flush()) throw std::runtime_error("cannot write " + path);
}

std::string mac_text(const Mac& m) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

// The whole process enters a fresh network namespace (it is root in CI), so
// the veth pair, addresses and neighbours below are private and vanish when
// it exits, whatever way it exits.
class TopologyEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) != 0)
      FAIL() << "unshare(CLONE_NEWNET): " << std::strerror(errno)
             << " (the data-plane tests need root: CAP_SYS_ADMIN, CAP_BPF, CAP_NET_ADMIN)";
    ASSERT_NO_THROW(run_command("ip link set lo up"));
    add_link(kDev, kDevMac, kPeerMac, std::string(kLocal4) + "/24", kPeer4,
             std::string(kLocal6) + "/64", kPeer6);
    if (::testing::Test::HasFatalFailure()) return;
    add_link(kOtherDev, kOtherDevMac, kOtherPeerMac, std::string(kOtherLocal4) + "/25",
             kOtherPeer4, std::string(kOtherLocal6) + "/64", kOtherPeer6);
    if (::testing::Test::HasFatalFailure()) return;
    // Forwarding lookups (bpf_fib_lookup without OUTPUT) need it.
    ASSERT_NO_THROW(write_file("/proc/sys/net/ipv4/ip_forward", "1"));
    ASSERT_NO_THROW(write_file("/proc/sys/net/ipv6/conf/all/forwarding", "1"));
    g_ifindex = static_cast<int>(if_nametoindex(kDev));
    g_other_ifindex = static_cast<int>(if_nametoindex(kOtherDev));
    ASSERT_GT(g_ifindex, 0);
    ASSERT_GT(g_other_ifindex, 0);

    std::string tmpl = "/tmp/rgdp-" + std::to_string(getpid()) + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr) << std::strerror(errno);
    g_temp_dir = buf.data();
    // A run cut short (ctest timeout, ^C, a closed pipe, a crash) still
    // removes the scratch directory; the namespace goes with the process.
    for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGABRT, SIGSEGV}) std::signal(sig, remove_and_die);
  }

  static void remove_and_die(int sig) {
    std::error_code ec;
    std::filesystem::remove_all(g_temp_dir, ec);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }

  // A veth pair whose far end is the one neighbour, resolved permanently.
  static void add_link(const std::string& dev, const Mac& mac, const Mac& peer_mac,
                       const std::string& addr4, const std::string& peer4,
                       const std::string& addr6, const std::string& peer6) {
    const std::vector<std::string> setup = {
        "ip link add " + dev + " address " + mac_text(mac) + " type veth peer name " + dev +
            "p address " + mac_text(peer_mac),
        "ip link set " + dev + "p up",
        "ip link set " + dev + " up",
        "ip addr add " + addr4 + " dev " + dev,
        "ip addr add " + addr6 + " dev " + dev + " nodad",
        "ip neigh replace " + peer4 + " lladdr " + mac_text(peer_mac) + " dev " + dev +
            " nud permanent",
        "ip -6 neigh replace " + peer6 + " lladdr " + mac_text(peer_mac) + " dev " + dev +
            " nud permanent",
    };
    for (const auto& cmd : setup) ASSERT_NO_THROW(run_command(cmd)) << cmd;
  }

  void TearDown() override {
    if (!g_temp_dir.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(g_temp_dir, ec);
    }
  }
};

// Brackets each test with a capture file.
class CaptureListener : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    if (!g_temp_dir.empty())
      Capture::current().begin(std::string(info.test_suite_name()) + "." + info.name());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    Capture::current().end(info.result()->Failed());
  }
};

}  // namespace

int dev_ifindex() { return g_ifindex; }
int other_dev_ifindex() { return g_other_ifindex; }
std::string temp_dir() { return g_temp_dir; }

std::string run_command(const std::string& cmd, bool with_stderr) {
  std::string out;
  FILE* p = popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!p) throw std::runtime_error("popen " + cmd);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    throw std::runtime_error("`" + cmd + "` failed: " + out);
  return out;
}

rg_config test_config() {
  rg_config c{};
  c.dscp = RG_DEFAULT_DSCP;
  c.cnp_dscp = RG_DEFAULT_CNP_DSCP;
  c.mtu_policy = RG_MTU_PASS;
  c.outer_ttl = RG_DEFAULT_OUTER_TTL;
  c.flags = RG_CFG_F_DEFAULT | RG_CFG_F_POISON;
  c.psn_jump_max = RG_DEFAULT_PSN_JUMP_MAX;
  c.qp_idle_ms = RG_DEFAULT_QP_IDLE_MS;
  c.tunnel_opt_class = RG_TUNNEL_OPT_CLASS_DEFAULT;
  c.tunnel_opt_type = RG_TUNNEL_OPT_TYPE_DEFAULT;
  c.tunnel_epoch = kTestEpoch;
  return c;
}

namespace {

// The maps a case can write: a program array holds what the load linked
// into it (link_xdp_forward), and the frozen .rodata the configuration.
bool case_writable(const bpf_map* m) {
  return bpf_map__type(m) != BPF_MAP_TYPE_PROG_ARRAY && !(bpf_map__map_flags(m) & BPF_F_RDONLY_PROG);
}

bool per_cpu(const bpf_map* m) {
  switch (bpf_map__type(m)) {
    case BPF_MAP_TYPE_PERCPU_ARRAY:
    case BPF_MAP_TYPE_PERCPU_HASH:
    case BPF_MAP_TYPE_LRU_PERCPU_HASH:
      return true;
    default:
      return false;
  }
}

// One lookup's worth of value: per-CPU maps give one 8-byte aligned slot
// per possible CPU.
uint32_t value_bytes(const bpf_map* m) {
  const uint32_t v = bpf_map__value_size(m);
  if (!per_cpu(m)) return v;
  return ((v + 7) & ~7u) * static_cast<uint32_t>(libbpf_num_possible_cpus());
}

bool is_array(const bpf_map* m) {
  return bpf_map__type(m) == BPF_MAP_TYPE_ARRAY || bpf_map__type(m) == BPF_MAP_TYPE_PERCPU_ARRAY;
}

MapImage image_of(bpf_object* obj) {
  MapImage img;
  bpf_map* m;
  bpf_object__for_each_map(m, obj) {
    if (!case_writable(m)) continue;
    auto& entries = img[bpf_map__name(m)];
    const uint32_t ks = bpf_map__key_size(m);
    const uint32_t vs = value_bytes(m);
    walk_map(bpf_map__fd(m), ks, vs, bpf_map__max_entries(m), [&](const uint8_t* k, const uint8_t* v) {
      entries.emplace(Bytes(k, k + ks), Bytes(v, v + vs));
    });
  }
  return img;
}

// Puts every map back to what img holds: array slots rewritten, every other
// map emptied and refilled.
void restore(bpf_object* obj, const MapImage& img) {
  bpf_map* m;
  bpf_object__for_each_map(m, obj) {
    if (!case_writable(m)) continue;
    const std::string name = bpf_map__name(m);
    const auto& want = img.at(name);
    const int fd = bpf_map__fd(m);
    if (!is_array(m)) {
      std::vector<Bytes> keys;
      const uint32_t ks = bpf_map__key_size(m);
      walk_map(fd, ks, value_bytes(m), bpf_map__max_entries(m),
               [&](const uint8_t* k, const uint8_t*) { keys.emplace_back(k, k + ks); });
      for (const Bytes& k : keys)
        if (bpf_map_delete_elem(fd, k.data()) && errno != ENOENT)
          throw std::runtime_error(name + " delete: " + std::strerror(errno));
    }
    for (const auto& [k, v] : want)
      if (bpf_map_update_elem(fd, k.data(), v.data(), BPF_ANY))
        throw std::runtime_error(name + " restore: " + std::strerror(errno));
  }
}

roceguard* load_object(const rg_config& cfg) {
  roceguard* skel = roceguard__open();
  if (!skel) throw std::runtime_error("roceguard__open: " + std::string(std::strerror(errno)));
  skel->rodata->rg_cfg = cfg;
  // A small QP table keeps each load cheap; a full table is not what
  // these tests are about.
  rg::set_qp_entries(skel->obj, 1024);
  if (int err = roceguard__load(skel)) {
    roceguard__destroy(skel);
    throw std::runtime_error("roceguard__load: " + std::string(std::strerror(-err)));
  }
  // As the loader does when the fast path is on; with it off the ingress
  // program never tail-calls.
  try {
    rg::link_xdp_forward(skel->obj);
  } catch (...) {
    roceguard__destroy(skel);
    throw;
  }
  return skel;
}

}  // namespace

struct LoadedObject {
  explicit LoadedObject(const rg_config& c) : cfg(c), skel(load_object(c)), fresh(image_of(skel->obj)) {}
  ~LoadedObject() { roceguard__destroy(skel); }
  LoadedObject(const LoadedObject&) = delete;
  LoadedObject& operator=(const LoadedObject&) = delete;

  // Back to the load's state, and proof of it: a map the restore missed
  // (a new map type, a key it cannot delete) fails the case that would
  // have inherited it, naming the map.
  void lend() {
    restore(skel->obj, fresh);
    const std::string left = image_difference(fresh, image_of(skel->obj));
    if (!left.empty()) throw std::runtime_error("state left by an earlier case: " + left);
    lent = true;
  }

  const rg_config cfg;
  roceguard* const skel;
  const MapImage fresh;  // every map as the load left it
  bool lent = false;
};

namespace {

// The objects loaded so far, for the life of the process.
std::vector<std::unique_ptr<LoadedObject>>& pool() {
  static std::vector<std::unique_ptr<LoadedObject>> objects;
  return objects;
}

bool same_config(const rg_config& a, const rg_config& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

}  // namespace

std::string image_difference(const MapImage& want, const MapImage& got) {
  std::string out;
  for (const auto& [name, entries] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      out += name + " (missing) ";
      continue;
    }
    if (entries == it->second) continue;
    out += name + " (" + std::to_string(it->second.size()) + " entries, " + std::to_string(entries.size()) +
           " after a load";
    for (const auto& [k, v] : it->second) {
      auto w = entries.find(k);
      if (w == entries.end() || w->second != v) {
        std::string key = hex(k);
        std::replace(key.begin(), key.end(), '\n', ' ');
        out += "; first differing key " + key;
        break;
      }
    }
    out += ") ";
  }
  for (const auto& [name, entries] : got)
    if (!want.count(name)) out += name + " (unexpected) ";
  return out;
}

Dataplane::Dataplane(const rg_config& cfg) {
  for (auto& o : pool())
    if (!o->lent && same_config(o->cfg, cfg)) {
      lent_ = o.get();
      break;
    }
  if (!lent_) {
    pool().push_back(std::make_unique<LoadedObject>(cfg));
    lent_ = pool().back().get();
  }
  lent_->lend();
  skel_ = lent_->skel;
  attach_reader();
}

Dataplane::Dataplane(const rg_config& cfg, FreshLoad) : own_(std::make_unique<LoadedObject>(cfg)) {
  skel_ = own_->skel;
  attach_reader();
}

void Dataplane::attach_reader() {
  reader_ = std::make_unique<MapReader>(bpf_map__fd(skel_->maps.rg_counters),
                                        QpMaps{bpf_map__fd(skel_->maps.rg_qp4), bpf_map__fd(skel_->maps.rg_qp6)});
  // As the loader registers every interface before attaching to it.
  iface(dev_ifindex(), kDevMac);
}

std::vector<PeerConfig> harness_peers() {
  std::vector<PeerConfig> peers(2);
  peers[kPeerSlot4].local = *parse_address(kLocal4);
  peers[kPeerSlot4].remote = *parse_address(kPeer4);
  peers[kPeerSlot6].local = *parse_address(kLocal6);
  peers[kPeerSlot6].remote = *parse_address(kPeer6);
  return peers;
}

MapImage Dataplane::image() const { return image_of(skel_->obj); }

void Dataplane::iface(int ifindex, const Mac& mac, uint16_t flags) {
  const uint32_t key = static_cast<uint32_t>(ifindex);
  rg_iface value{};
  std::copy(mac.begin(), mac.end(), value.mac);
  value.flags = flags;
  if (bpf_map__update_elem(skel_->maps.rg_ifaces, &key, sizeof(key), &value, sizeof(value), 0))
    throw std::runtime_error("rg_ifaces update: " + std::string(std::strerror(errno)));
}

Dataplane::~Dataplane() {
  reader_.reset();
  if (lent_) lent_->lent = false;
}

Verdict Dataplane::tc(const Bytes& in, uint32_t repeat) { return run_tc(in, repeat, 0); }

Verdict Dataplane::tc_with_priority(const Bytes& in, uint32_t skb_priority) { return run_tc(in, 1, skb_priority); }

Verdict Dataplane::run_tc(const Bytes& in, uint32_t repeat, uint32_t skb_priority) {
  Bytes buf(in.size() + 512);
  TestRun r = test_run_frame(bpf_program__fd(skel_->progs.rg_tc_egress), false, dev_ifindex(), in, buf,
                             repeat, skb_priority);
  if (r.err) throw std::runtime_error("test_run tc: " + std::string(std::strerror(-r.err)));
  buf.resize(r.size_out);
  Capture::current().record(buf);
  return {r.retval, buf, r.skb_priority, r.tstamp};
}

bool ingress_at_tc() {
  const char* v = std::getenv("ROCEGUARD_TEST_INGRESS");
  return v && std::string(v) == "tc";
}

Verdict Dataplane::xdp(const Bytes& in, uint32_t repeat) {
  Bytes buf(in.size() + 512);
  if (ingress_at_tc()) {
    TestRun r = test_run_frame(bpf_program__fd(skel_->progs.rg_tc_ingress), false, dev_ifindex(), in, buf, repeat);
    if (r.err) throw std::runtime_error("test_run tc ingress: " + std::string(std::strerror(-r.err)));
    buf.resize(r.size_out);
    // The XDP verdicts the cases expect, from the two rg_tc_ingress returns.
    if (r.retval != kTcPass && r.retval != kTcShot)
      throw std::runtime_error("rg_tc_ingress returned " + std::to_string(r.retval) + ", neither pass nor shot");
    const uint32_t verdict = r.retval == kTcShot ? kXdpDrop : kXdpPass;
    if (verdict != kXdpDrop) Capture::current().record(buf);
    return {verdict, buf, r.skb_priority};
  }
  TestRun r = test_run_frame(bpf_program__fd(skel_->progs.rg_xdp_ingress), true, dev_ifindex(), in, buf,
                             repeat);
  if (r.err) throw std::runtime_error("test_run xdp: " + std::string(std::strerror(-r.err)));
  buf.resize(r.size_out);
  if (r.retval != kXdpDrop) Capture::current().record(buf);
  return {r.retval, buf};
}

Verdict Dataplane::tc_ingress(const Bytes& in) {
  Bytes buf(in.size() + 512);
  TestRun r = test_run_frame(bpf_program__fd(skel_->progs.rg_tc_ingress), false, dev_ifindex(), in, buf, 1);
  if (r.err) throw std::runtime_error("test_run tc ingress: " + std::string(std::strerror(-r.err)));
  buf.resize(r.size_out);
  if (r.retval != kTcShot) Capture::current().record(buf);
  return {r.retval, buf, r.skb_priority};
}

Verdict Dataplane::xdp_at(const Bytes& in, int ifindex) {
  Bytes buf(in.size() + 512);
  TestRun r = test_run_frame(bpf_program__fd(skel_->progs.rg_xdp_ingress), true, ifindex, in, buf, 1);
  if (r.err) throw std::runtime_error("test_run xdp: " + std::string(std::strerror(-r.err)));
  buf.resize(r.size_out);
  if (r.retval != kXdpDrop) Capture::current().record(buf);
  return {r.retval, buf};
}

void Dataplane::forward_to(int ifindex) {
  // Its address first, as attaching an interface writes it (rg_ifaces).
  if (ifindex == other_dev_ifindex()) iface(ifindex, kOtherDevMac);
  if (ifindex == dev_ifindex()) iface(ifindex, kDevMac);
  const uint32_t key = static_cast<uint32_t>(ifindex);
  if (bpf_map__update_elem(skel_->maps.rg_xdp_tx, &key, sizeof(key), &key, sizeof(key), 0))
    throw std::runtime_error("rg_xdp_tx update: " + std::string(std::strerror(errno)));
}

void Dataplane::peer(uint32_t idx, const std::string& local, const std::string& remote,
                     uint32_t vni, uint16_t mtu) {
  rg_peer p{};
  Bytes l = ip_addr(local), r = ip_addr(remote);
  p.vni = vni;
  p.mtu = mtu;
  p.family = l.size() == 4 ? AF_INET : AF_INET6;
  std::memcpy(p.local, l.data(), l.size());
  std::memcpy(p.remote, r.data(), r.size());
  if (bpf_map__update_elem(skel_->maps.rg_peers, &idx, sizeof(idx), &p, sizeof(p), 0))
    throw std::runtime_error("rg_peers update: " + std::string(std::strerror(errno)));
}

void Dataplane::shield(uint32_t idx, uint8_t flags) {
  rg_peer p{};
  if (bpf_map__lookup_elem(skel_->maps.rg_peers, &idx, sizeof(idx), &p, sizeof(p), 0))
    throw std::runtime_error("rg_peers lookup: " + std::string(std::strerror(errno)));
  p.flags = static_cast<__u8>((p.flags & ~RG_PEER_F_SHIELD_MASK) | flags);
  if (bpf_map__update_elem(skel_->maps.rg_peers, &idx, sizeof(idx), &p, sizeof(p), 0))
    throw std::runtime_error("rg_peers update: " + std::string(std::strerror(errno)));
}

void Dataplane::peer_ctl(uint32_t idx, uint32_t feedback, uint8_t shield, uint64_t until_ns) {
  rg_peer_ctl c{};
  c.until_ns = until_ns;
  c.feedback = feedback;
  c.shield = shield;
  if (bpf_map__update_elem(skel_->maps.rg_peer_ctl, &idx, sizeof(idx), &c, sizeof(c), 0))
    throw std::runtime_error("rg_peer_ctl update: " + std::string(std::strerror(errno)));
}

void Dataplane::peer_cc(uint32_t idx, const rg_peer_cc& cc) {
  if (bpf_map__update_elem(skel_->maps.rg_peer_cc, &idx, sizeof(idx), &cc, sizeof(cc), 0))
    throw std::runtime_error("rg_peer_cc update: " + std::string(std::strerror(errno)));
}

rg_peer_pq Dataplane::peer_pq(uint32_t idx) const {
  rg_peer_pq q{};
  if (bpf_map__lookup_elem(skel_->maps.rg_peer_pq, &idx, sizeof(idx), &q, sizeof(q), 0))
    throw std::runtime_error("rg_peer_pq lookup: " + std::string(std::strerror(errno)));
  return q;
}

void Dataplane::auth(uint32_t idx, const std::vector<TunnelKey>& keys) {
  rg_peer peer{};
  if (bpf_map__lookup_elem(skel_->maps.rg_peers, &idx, sizeof(idx), &peer, sizeof(peer), 0))
    throw std::runtime_error("rg_peers lookup: " + std::string(std::strerror(errno)));
  const rg_peer_auth a = peer_auth_of(peer.local, peer.remote, peer.vni, keys);
  if (bpf_map__update_elem(skel_->maps.rg_peer_auth, &idx, sizeof(idx), &a, sizeof(a), 0))
    throw std::runtime_error("rg_peer_auth update: " + std::string(std::strerror(errno)));
}

rg_peer_rx Dataplane::peer_rx(uint32_t idx) const {
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<rg_peer_rx> per_cpu(static_cast<size_t>(ncpu));
  if (bpf_map__lookup_elem(skel_->maps.rg_peer_rx, &idx, sizeof(idx), per_cpu.data(),
                           per_cpu.size() * sizeof(rg_peer_rx), 0))
    throw std::runtime_error("rg_peer_rx lookup: " + std::string(std::strerror(errno)));
  rg_peer_rx sum{};
  for (const auto& r : per_cpu) {
    sum.copied += r.copied;
    sum.delay_n += r.delay_n;
    sum.delay_sum_us += r.delay_sum_us;
    if (r.at_ns > sum.at_ns) {
      sum.at_ns = r.at_ns;
      sum.feedback = r.feedback;
      sum.flags = r.flags;
    }
    if (r.report_at_ns > sum.report_at_ns) {
      sum.report_at_ns = r.report_at_ns;
      sum.report = r.report;
    }
  }
  return sum;
}

void Dataplane::route(const std::string& prefix, uint32_t prefixlen, uint32_t peer_idx) {
  Bytes a = ip_addr(prefix);
  int err;
  if (a.size() == 4) {
    rg_route4_key k{};
    k.prefixlen = prefixlen;
    std::memcpy(k.addr, a.data(), 4);
    err = bpf_map__update_elem(skel_->maps.rg_route4, &k, sizeof(k), &peer_idx,
                               sizeof(peer_idx), 0);
  } else {
    rg_route6_key k{};
    k.prefixlen = prefixlen;
    std::memcpy(k.addr, a.data(), 16);
    err = bpf_map__update_elem(skel_->maps.rg_route6, &k, sizeof(k), &peer_idx,
                               sizeof(peer_idx), 0);
  }
  if (err) throw std::runtime_error("route update: " + std::string(std::strerror(-err)));
}

void Dataplane::decap(const std::string& remote, uint32_t vni, uint32_t peer_idx) {
  rg_decap_key k{};
  Bytes r = ip_addr(remote);
  std::memcpy(k.remote, r.data(), r.size());
  k.family = r.size() == 4 ? AF_INET : AF_INET6;
  k.vni = vni;
  if (bpf_map__update_elem(skel_->maps.rg_decap, &k, sizeof(k), &peer_idx, sizeof(peer_idx), 0))
    throw std::runtime_error("rg_decap update: " + std::string(std::strerror(errno)));
}

void Dataplane::tunnels(uint16_t mtu) {
  peer(kPeerSlot4, kLocal4, kPeer4, kVni4, mtu);
  peer(kPeerSlot6, kLocal6, kPeer6, kVni6, mtu);
  route(kRemoteNet4, 24, kPeerSlot4);
  route(kRemoteNet6, 48, kPeerSlot6);
  decap(kPeer4, kVni4, kPeerSlot4);
  decap(kPeer6, kVni6, kPeerSlot6);
  // The same tunnels as the peers see them, so that what this gateway
  // encapsulates can be fed back and is decapsulated as the far end would.
  peer(kFarEnd4, kPeer4, kLocal4, kVni4, mtu);
  peer(kFarEnd6, kPeer6, kLocal6, kVni6, mtu);
  decap(kLocal4, kVni4, kFarEnd4);
  decap(kLocal6, kVni6, kFarEnd6);
}

void Dataplane::age_qps() {
  for (bpf_map* m : {skel_->maps.rg_qp4, skel_->maps.rg_qp6}) {
    std::vector<uint8_t> slot(bpf_map__value_size(m));
    for (uint32_t i = 0; i < bpf_map__max_entries(m); ++i) {
      if (bpf_map__lookup_elem(m, &i, sizeof(i), slot.data(), slot.size(), 0))
        throw std::runtime_error(std::string(bpf_map__name(m)) + " lookup: " + std::strerror(errno));
      auto* head = reinterpret_cast<rg_qp_slot_head*>(slot.data());
      if (rg_qp_id_state(head->id) != RG_QP_SLOT_READY) continue;
      head->last_seen = 1;  // long before now, in the slot clock
      if (bpf_map__update_elem(m, &i, sizeof(i), slot.data(), slot.size(), 0))
        throw std::runtime_error(std::string(bpf_map__name(m)) + " update: " + std::strerror(errno));
    }
  }
}

Events Dataplane::events(rg_direction dir) const {
  Events e;
  for (const auto& row : reader_->counters()) {
    if (row.direction != dir) continue;
    for (int ev = 0; ev < RG_EV_MAX; ++ev)
      if (row.ev[ev].packets)
        e[std::string(event_name(static_cast<rg_event>(ev)).name)] += row.ev[ev].packets;
  }
  return e;
}

uint64_t Dataplane::bytes(rg_direction dir, rg_event ev) const {
  uint64_t n = 0;
  for (const auto& row : reader_->counters())
    if (row.direction == dir) n += row.ev[ev].bytes;
  return n;
}

std::vector<QpRow> Dataplane::qps() const { return reader_->qps(); }

rg_qp_dir Dataplane::qp(rg_direction dir, uint32_t dest_qp) const {
  for (const auto& row : reader_->qps())
    if (row.key.dest_qp == dest_qp) return row.state.dir[dir];
  ADD_FAILURE() << "no rg_qp entry for dest QP " << dest_qp;
  return {};
}

namespace {

const std::vector<std::string> kTsharkFields = {
    "frame.protocols",      "ip.dsfield.dscp",     "ip.dsfield.ecn",    "ipv6.tclass.dscp",
    "ipv6.tclass.ecn",      "ip.checksum.status",  "udp.checksum.status", "geneve.vni",
    "geneve.proto_type",    "infiniband.bth.opcode", "infiniband.bth.destqp",
    "infiniband.bth.psn",   "_ws.malformed",       "_ws.expert.severity", "_ws.expert.message",
    "geneve.option.class",  "geneve.option.type",  "geneve.option.length"};

}  // namespace

std::vector<TsharkRow> tshark(const std::vector<Bytes>& frames, const std::string& name) {
  std::string path = temp_dir() + "/oracle-" + name + ".pcap";
  {
    PcapWriter w(path);
    for (const auto& f : frames) w.write(f);
  }
  std::string cmd = "tshark -n -r " + path +
                    " -o ip.check_checksum:TRUE -o udp.check_checksum:TRUE"
                    // RFC 6935/6936: zero UDP checksum on IPv6 tunnels.
                    " -o udp.ignore_ipv6_zero_checksum:TRUE"
                    // Test payloads are counting bytes, not RPC-over-RDMA.
                    " --disable-protocol rpcordma"
                    " -T fields -E separator=/t -E occurrence=a -E aggregator=,";
  for (const auto& f : kTsharkFields) cmd += " -e " + f;
  std::string out = run_command(cmd, false);
  std::remove(path.c_str());
  std::vector<TsharkRow> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    TsharkRow r;
    std::vector<std::string> cols;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
      cols.push_back(line.substr(start, tab - start));
    cols.push_back(line.substr(start));
    for (size_t i = 0; i < kTsharkFields.size() && i < cols.size(); ++i)
      r[kTsharkFields[i]] = cols[i];
    // The RDMA payload after the transport headers is plain data to tshark.
    std::string& proto = r["frame.protocols"];
    if (proto.size() > 5 && proto.compare(proto.size() - 5, 5, ":data") == 0)
      proto.resize(proto.size() - 5);
    rows.push_back(r);
  }
  return rows;
}

void expect_tshark_row(const TsharkRow& got, TsharkRow want, size_t index) {
  want.emplace("_ws.malformed", "");
  want.emplace("_ws.expert.severity", "");
  for (const auto& [field, value] : want) {
    auto it = got.find(field);
    ASSERT_NE(it, got.end()) << "frame " << index + 1 << ": tshark printed no " << field;
    EXPECT_EQ(it->second, value)
        << "frame " << index + 1 << " field " << field
        << (field.rfind("_ws", 0) == 0 ? " (" + got.at("_ws.expert.message") + ")" : "");
  }
}

Capture& Capture::current() {
  static Capture c;
  return c;
}

void Capture::begin(const std::string& test_name) {
  std::string safe;
  for (char ch : test_name) safe += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  dir_ = temp_dir() + "/" + safe;
  std::filesystem::create_directories(dir_);
  path_ = dir_ + "/emitted.pcap";
  writer_ = std::make_unique<PcapWriter>(path_);
}

void Capture::record(const Bytes& frame) {
  std::lock_guard<std::mutex> lock(writer_mutex_);
  if (writer_) writer_->write(frame);
}

void Capture::end(bool failed) {
  if (!writer_) return;
  size_t n = writer_->count();
  writer_.reset();
  if (failed && n) {
    try {
      std::printf("frames emitted by this test, as tshark decodes them:\n%s",
                  run_command("tshark -n -r " + path_ + " -o ip.check_checksum:TRUE"
                              " -o udp.check_checksum:TRUE").c_str());
    } catch (const std::exception& e) {
      std::printf("tshark: %s\n", e.what());
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace rg::test

namespace {

// libxdp's XDP_RUN_CONFIG section is for libxdp, not libbpf: drop libbpf's
// note about it so real warnings stand out.
int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list args) {
  if (level == LIBBPF_DEBUG || std::strstr(fmt, "skipping unrecognized data section"))
    return 0;
  return std::vfprintf(stderr, fmt, args);
}

}  // namespace

int main(int argc, char** argv) {
  libbpf_set_print(libbpf_log);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new rg::test::TopologyEnv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new rg::test::CaptureListener);
  return RUN_ALL_TESTS();
}
