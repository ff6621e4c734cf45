// The roceguard binary against real interfaces: a veth pair between two
// network namespaces this test creates (and removes, with its pins, even on
// failure). The binary runs in the first namespace through nsenter, which
// keeps the host's mount namespace and so the host's bpffs: pins made by one
// invocation are seen by the next, as on a real machine.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_link.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dataplane/maps.h"
#include "packet.h"
#include "roceguard/roceguard.h"

namespace {

using nlohmann::json;

struct Result {
  int rc = -1;
  std::string out;
};

Result sh(const std::string& cmd) {
  Result r;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) r.out.append(buf, n);
  int st = pclose(f);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Runs fn in a child that joined network namespace ns; returns its result.
int in_netns(const std::string& ns, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(120);
    _exit(fn());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::vector<std::string> bad_configs() {
  std::vector<std::string> files;
  DIR* d = opendir(RG_BAD_CONFIGS);
  if (!d) return files;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".toml") files.push_back(std::string(RG_BAD_CONFIGS) + "/" + n);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

// First line of each corpus file: "# expect: <text the message must contain>".
std::string expected_of(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  const std::string tag = "# expect: ";
  return line.rfind(tag, 0) == 0 ? line.substr(tag.size()) : "";
}

TEST(BadConfigs, ConfigCheckRejectsEveryOneNamingTheKey) {
  auto files = bad_configs();
  ASSERT_GE(files.size(), 20u) << "corpus in " << RG_BAD_CONFIGS;
  for (const auto& f : files) {
    std::string expect = expected_of(f);
    ASSERT_FALSE(expect.empty()) << f << " lacks its '# expect: ' line";
    Result r = sh(std::string(RG_BIN) + " config check " + f);
    EXPECT_EQ(r.rc, 2) << f << ":\n" << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << f << ": message does not contain '" << expect << "':\n" << r.out;
  }
}

// The shipped file names no interface: config check (and run) refuse it as a
// usage error that says what to do, and with an interface it is valid.
TEST(BadConfigs, DefaultConfigIsValidOnceAnInterfaceIsNamed) {
  Result r = sh(std::string(RG_BIN) + " config check --offline " + RG_DEFAULT_CONFIG);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("interfaces: none given; use --interface IF"), std::string::npos) << r.out;
  r = sh(std::string(RG_BIN) + " config check --offline " + RG_DEFAULT_CONFIG + " --interface eth1");
  EXPECT_EQ(r.rc, 0) << r.out;
}

// True when s is UTF-8 (RFC 3629: no overlong forms, no surrogates, at
// most U+10FFFF): what a JSON parser and Prometheus accept as text.
bool is_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : 4;
    if (n > 3 || i + n >= s.size()) return false;  // not a lead byte, or cut short
    uint32_t cp = n == 0 ? c : n == 1 ? c & 0x1f : n == 2 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// A name that is not UTF-8 cannot go into the attach record (JSON): refused
// as a usage error naming the flag, in a message that is itself text.
TEST(BadConfigs, InterfaceNameThatIsNotTextIsRefusedNamingTheKey) {
  const std::string check = std::string(RG_BIN) + " config check --offline " + RG_DEFAULT_CONFIG +
                            " --interface \"$(printf '\\377rg0')\"";
  const std::string want = "--interface: \"\\xffrg0\"";
  Result r = sh(check);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find(want), std::string::npos) << r.out;
  EXPECT_TRUE(is_utf8(r.out)) << r.out;
  r = sh(check + " --json");
  EXPECT_EQ(r.rc, 2) << r.out;
  auto j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  bool named = false;
  for (const auto& problem : j.value("problems", json::array())) named |= problem.get<std::string>().find(want) == 0;
  EXPECT_TRUE(named) << r.out;
}

// In namespace b: RoCE packets for 203.0.113.5 from 198.51.100.9, PSNs from
// 100, out of veth1 (or a VLAN device on it, dev) to veth0; with geneve,
// each inside a Geneve frame (VNI 77, 198.51.100.2 -> .1). 0 when all were
// sent; 1: no socket; 2: a send failed.
int send_roce_from_veth1(const rg::test::Mac& veth0, const rg::test::Mac& veth1, int frames, bool geneve,
                         const char* dev = "veth1") {
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1;
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(if_nametoindex(dev));
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, veth0.data(), 6);
  for (uint32_t psn = 100; psn < 100 + static_cast<uint32_t>(frames); ++psn) {
    rg::test::Bth b;
    b.psn = psn;
    rg::test::Bytes frame = rg::test::PacketBuilder()
                                .eth(veth0, veth1)
                                .ipv4("198.51.100.9", "203.0.113.5")
                                .udp(49200, rg::test::kRoceV2Port)
                                .bth(b)
                                .payload(64)
                                .build();
    if (geneve)
      frame = rg::test::PacketBuilder()
                  .eth(veth0, veth1)
                  .ipv4("198.51.100.2", "198.51.100.1")
                  .udp(51000, rg::test::kGenevePort)
                  .udp_csum(rg::test::UdpCsum::kZero)
                  .geneve(77)
                  .payload(frame)
                  .build();
    if (sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) < 0) {
      close(fd);
      return 2;
    }
  }
  close(fd);
  return 0;
}

class LoaderNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    // The cases below were written for the XDP ingress hook, which a veth
    // would not get by default (dataplane.ingress_hook auto takes TC ingress
    // there); the IngressHook cases choose their own with --ingress-hook.
    setenv("ROCEGUARD_DATAPLANE_INGRESS_HOOK", "xdp", 1);
    // And for clsact, whose filters they look at with tc and bpftool; the
    // TcxLinks cases attach with tcx (--tc-attach).
    setenv("ROCEGUARD_DATAPLANE_TC_ATTACH", "clsact", 1);
    static int seq = 0;
    tag_ = "rgld-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
    ns_a_ = tag_ + "-a";
    ns_b_ = tag_ + "-b";
    pin_ = "/sys/fs/bpf/" + tag_;
    tmp_ = "/tmp/" + tag_;
    must("mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf");
    must("mkdir -p " + tmp_);
    must("ip netns add " + ns_a_);
    must("ip netns add " + ns_b_);
    create_veth();
    must("ip -n " + ns_a_ + " link set lo up");
    must("ip -n " + ns_b_ + " link set lo up");
  }

  void TearDown() override {
    for (pid_t p : children_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    sh(in_a(std::string(RG_BIN) + " detach --pin-path " + pin_));
    sh(in_a(std::string(RG_BIN) + " detach --pin-path " + other_pin()));
    sh("rm -rf " + pin_ + " " + other_pin() + " " + pin_ + "-tcx* " + tmp_);
    sh("ip netns del " + ns_a_);
    sh("ip netns del " + ns_b_);
  }

  // A permanent neighbour entry: sendto() then runs the egress hook before
  // it returns, instead of after an ARP exchange, so counters can be read
  // right away.
  void create_veth() {
    must("ip -n " + ns_a_ + " link add veth0 address 02:00:00:00:00:01 type veth peer name veth1 address "
         "02:00:00:00:00:02 netns " + ns_b_);
    must("ip -n " + ns_a_ + " addr add 198.51.100.1/24 dev veth0");
    must("ip -n " + ns_b_ + " addr add 198.51.100.2/24 dev veth1");
    must("ip -n " + ns_a_ + " link set veth0 up");
    must("ip -n " + ns_b_ + " link set veth1 up");
    must("ip -n " + ns_a_ + " neigh replace 198.51.100.2 lladdr 02:00:00:00:00:02 dev veth0 nud permanent");
  }

  // A second veth pair whose peer sends on more queues than vbig0 receives
  // on: the kernel refuses native XDP on vbig0 (veth_xdp_set, "XDP expects
  // number of rx queues not less than peer tx queues"), a late failure after
  // the interfaces before it in the list are already attached. (A peer MTU
  // above one page no longer refuses: the XDP program takes multi-buffer
  // frames.)
  void create_xdp_refusing_veth() {
    must("ip -n " + ns_a_ + " link add vbig0 numrxqueues 1 numtxqueues 1 type veth peer name vbig1 "
         "numtxqueues 4 numrxqueues 4 netns " + ns_b_);
    must("ip -n " + ns_b_ + " link set vbig1 up");
    must("ip -n " + ns_a_ + " link set vbig0 up");
  }

  // A veth pair at a jumbo MTU on both ends, as a gateway carrying RoCE at a
  // 4096 path MTU has.
  void create_jumbo_veth() {
    must("ip -n " + ns_a_ + " link add vbig0 mtu 9000 type veth peer name vbig1 mtu 9000 netns " + ns_b_);
    must("ip -n " + ns_b_ + " link set vbig1 up");
    must("ip -n " + ns_a_ + " link set vbig0 up");
  }

  // The pin path of a second roceguard instance in the same namespaces.
  std::string other_pin() const { return pin_ + "-other"; }

  void must(const std::string& cmd) {
    Result r = sh(cmd);
    ASSERT_EQ(r.rc, 0) << cmd << ":\n" << r.out;
  }

  std::string in_a(const std::string& cmd) const { return "nsenter --net=/run/netns/" + ns_a_ + " " + cmd; }

  Result rg(const std::string& args) { return sh(in_a(std::string(RG_BIN) + " " + args + " --pin-path " + pin_)); }

  std::string write_file(const std::string& name, const std::string& text) {
    std::string path = tmp_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  int ifindex_a(const std::string& dev = "veth0") {
    unsigned idx = 0;
    Result r = sh("ip -n " + ns_a_ + " -j link show dev " + dev);
    auto j = json::parse(r.out, nullptr, false);
    if (j.is_array() && !j.empty()) idx = j[0].value("ifindex", 0u);
    return static_cast<int>(idx);
  }

  // XDP and TC egress programs on veth0: names by program id.
  struct Hooks {
    std::vector<std::string> xdp;
    std::vector<std::string> tc;
    std::vector<std::string> tc_ingress;
  };
  Hooks hooks(const std::string& dev = "veth0") {
    Hooks h;
    Result r = sh(in_a("bpftool -j net show dev " + dev));
    auto j = json::parse(r.out, nullptr, false);
    if (!j.is_array() || j.empty()) return h;
    for (const auto& x : j[0].value("xdp", json::array())) {
      Result p = sh("bpftool -j prog show id " + std::to_string(x.value("id", 0)));
      auto pj = json::parse(p.out, nullptr, false);
      h.xdp.push_back(pj.is_object() ? pj.value("name", "?") : "?");
    }
    for (const auto& t : j[0].value("tc", json::array())) {
      std::string n = t.value("name", "");
      if (t.value("kind", "") == "clsact/egress") h.tc.push_back(n.substr(0, n.find(':')));
      if (t.value("kind", "") == "clsact/ingress") h.tc_ingress.push_back(n.substr(0, n.find(':')));
    }
    return h;
  }

  // Program ids on dev's XDP hook and TC egress, as the kernel reports them.
  std::vector<int> hook_ids(const std::string& dev = "veth0") {
    std::vector<int> ids;
    auto j = json::parse(sh(in_a("bpftool -j net show dev " + dev)).out, nullptr, false);
    if (!j.is_array() || j.empty()) return ids;
    for (const auto& x : j[0].value("xdp", json::array())) ids.push_back(x.value("id", 0));
    for (const auto& t : j[0].value("tc", json::array()))
      if (t.value("kind", "") == "clsact/egress") ids.push_back(t.value("id", 0));
    return ids;
  }

  // Names of the programs on dev's tcx hook (BPF_TCX_EGRESS = 47,
  // BPF_TCX_INGRESS = 46 in Linux 6.6's uapi) in the order they run; {"?"}
  // when the kernel has no tcx.
  std::vector<std::string> tcx_names(const std::string& dev = "veth0", bool egress = true) {
    const std::string out = tmp_ + "/tcx-names";
    unlink(out.c_str());
    int rc = in_netns(ns_a_, [&] {
      uint32_t ids[16], n = 16;
      if (bpf_prog_query(static_cast<int>(if_nametoindex(dev.c_str())), static_cast<bpf_attach_type>(egress ? 47 : 46),
                         0, nullptr, ids, &n))
        return 1;
      std::ofstream f(out);
      for (uint32_t i = 0; i < n && i < 16; ++i) {
        int fd = bpf_prog_get_fd_by_id(ids[i]);
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        f << (fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.name : "?") << "\n";
        if (fd >= 0) close(fd);
      }
      return 0;
    });
    if (rc != 0) return {"?"};
    std::vector<std::string> names;
    std::ifstream f(out);
    for (std::string line; std::getline(f, line);) names.push_back(line);
    return names;
  }

  // Another tool's foreign_tc_ok on dev's TC egress as a tcx link, pinned at
  // link_pin (TearDown's pin_-tcx* glob removes it); before: first on the
  // hook (BPF_F_BEFORE, no relative), else last. 3: no tcx in this kernel.
  int attach_foreign_tcx(const std::string& link_pin, bool before, const std::string& dev = "veth0") {
    return in_netns(ns_a_, [&] {
      bpf_object* obj = bpf_object__open_file(RG_FOREIGN_OBJ, nullptr);
      if (!obj || bpf_object__load(obj)) return 1;
      LIBBPF_OPTS(bpf_link_create_opts, o, .flags = before ? 1u << 3 : 0u);
      int link = bpf_link_create(bpf_program__fd(bpf_object__find_program_by_name(obj, "foreign_tc_ok")),
                                 static_cast<int>(if_nametoindex(dev.c_str())), static_cast<bpf_attach_type>(47), &o);
      if (link < 0) return 3;
      return bpf_obj_pin(link, link_pin.c_str()) ? 2 : 0;
    });
  }

  bool has_clsact(const std::string& dev = "veth0") {
    return sh(in_a("tc qdisc show dev " + dev)).out.find("clsact") != std::string::npos;
  }

  size_t map_entries(const char* map) {
    auto j = json::parse(sh("bpftool -j map dump pinned " + pin_ + "/" + map).out, nullptr, false);
    return j.is_array() ? j.size() : size_t{9999};
  }

  bool pins_exist() {
    struct stat st {};
    return stat(pin_.c_str(), &st) == 0;
  }

  // Loads the test's foreign object in namespace A and attaches its XDP
  // program directly and/or its TC program at handle/priority.
  int attach_foreign(bool xdp, uint32_t tc_handle, uint32_t tc_priority, const std::string& dev = "veth0") {
    return in_netns(ns_a_, [&] {
      bpf_object* obj = bpf_object__open_file(RG_FOREIGN_OBJ, nullptr);
      if (!obj || bpf_object__load(obj)) return 1;
      int ifindex = static_cast<int>(if_nametoindex(dev.c_str()));
      if (xdp) {
        int fd = bpf_program__fd(bpf_object__find_program_by_name(obj, "foreign_xdp"));
        if (bpf_xdp_attach(ifindex, fd, XDP_FLAGS_DRV_MODE, nullptr)) return 2;
      }
      if (tc_handle) {
        LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_EGRESS);
        int err = bpf_tc_hook_create(&hook);
        if (err && err != -EEXIST) return 3;
        LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(bpf_object__find_program_by_name(obj, "foreign_tc")),
                    .handle = tc_handle, .priority = tc_priority);
        if (bpf_tc_attach(&hook, &o)) return 4;
      }
      return 0;
    });
  }

  // An earlier build as an upgrade finds it: its TC egress program on dev
  // (at roceguard's default handle and priority) counting into rg_counters
  // pinned under the pin path with one event fewer than this build's.
  int attach_earlier_build(const std::string& dev) {
    if (mkdir(pin_.c_str(), 0700) != 0 && errno != EEXIST) return 10;
    return in_netns(ns_a_, [&] {
      bpf_object* obj = bpf_object__open_file(RG_EARLIER_OBJ, nullptr);
      if (!obj) return 1;
      bpf_map* counters = bpf_object__find_map_by_name(obj, "rg_counters");
      if (!counters || bpf_map__set_pin_path(counters, (pin_ + "/rg_counters").c_str())) return 2;
      if (bpf_object__load(obj)) return 3;
      LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = static_cast<int>(if_nametoindex(dev.c_str())),
                  .attach_point = BPF_TC_EGRESS);
      int err = bpf_tc_hook_create(&hook);
      if (err && err != -EEXIST) return 4;
      LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(bpf_object__find_program_by_name(obj, "rg_tc_egress")),
                  .handle = 0x52, .priority = 0x52);
      return bpf_tc_attach(&hook, &o) ? 5 : 0;
    });
  }

  // roce_packets summed over the entries and CPUs of the pinned
  // rg_counters, whatever its value size (stats needs every map pinned;
  // an earlier build's fixture pins this one alone).
  uint64_t pinned_roce_packets() {
    int fd = bpf_obj_get((pin_ + "/rg_counters").c_str());
    if (fd < 0) return ~0ull;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    uint64_t sum = 0;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
      const size_t stride = (info.value_size + 7) & ~7u, ncpu = static_cast<size_t>(libbpf_num_possible_cpus());
      std::vector<uint8_t> value(stride * ncpu);
      rg_counter_key key{}, next{};
      for (int n = 0; n < RG_MAX_COUNTER_KEYS && bpf_map_get_next_key(fd, n ? &key : nullptr, &next) == 0; ++n) {
        key = next;
        if (bpf_map_lookup_elem(fd, &key, value.data()) != 0) continue;
        for (size_t c = 0; c < ncpu; ++c) {
          rg_counter ev{};
          std::memcpy(&ev, value.data() + c * stride + RG_EV_ROCE_PACKETS * sizeof(rg_counter), sizeof(ev));
          sum += ev.packets;
        }
      }
    }
    close(fd);
    return sum;
  }

  // Sends n RoCE v2 SEND-only packets (PSN first..first+n-1, QP 0x11) from
  // namespace A to B through veth0's egress hook.
  int send_roce(uint32_t first_psn, int n) {
    return in_netns(ns_a_, [&] {
      int s = socket(AF_INET, SOCK_DGRAM, 0);
      if (s < 0) return 1;
      sockaddr_in dst{};
      dst.sin_family = AF_INET;
      dst.sin_port = htons(4791);
      inet_pton(AF_INET, "198.51.100.2", &dst.sin_addr);
      for (int i = 0; i < n; ++i) {
        rg::test::Bth bth;
        bth.psn = first_psn + static_cast<uint32_t>(i);
        auto frame = rg::test::PacketBuilder()
                         .eth(rg::test::mac("02:00:00:00:00:02"), rg::test::mac("02:00:00:00:00:01"))
                         .ipv4("198.51.100.1", "198.51.100.2")
                         .udp(49152, 4791)
                         .bth(bth)
                         .payload(32)
                         .build();
        // The kernel writes the headers; the socket carries BTH onwards.
        const size_t l4 = 14 + 20 + 8;
        if (sendto(s, frame.data() + l4, frame.size() - l4, 0, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) < 0)
          return 2;
      }
      close(s);
      return 0;
    });
  }

  // Sum over interfaces of one egress/ingress event, from `stats --json`.
  uint64_t counter(const std::string& event, const std::string& direction = "egress") {
    Result r = rg("stats --json");
    auto j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    uint64_t n = 0;
    if (j.is_discarded()) return n;
    for (const auto& c : j["counters"])
      if (c["direction"] == direction) n += c["events"][event]["packets"].get<uint64_t>();
    return n;
  }

  // expected_rc: 0 healthy, 5 when something configured is not attached.
  json status(int expected_rc = 0) {
    Result r = rg_stdout("status --json");
    auto j = json::parse(r.out, nullptr, false);
    EXPECT_EQ(r.rc, expected_rc) << r.out;
    return j;
  }

  // rg() with stdout alone in out (stderr to a file): what a script piping
  // --json output into a parser reads.
  Result rg_stdout(const std::string& args) {
    return sh("(" + in_a(std::string(RG_BIN) + " " + args + " --pin-path " + pin_) + " 2>" + tmp_ + "/stderr)");
  }

  // Starts a roceguard binary with args in namespace A, stdout and stderr
  // into a log, env on top of ours; returns its pid (a child of this test).
  pid_t spawn(const std::string& bin, const std::string& args, const std::vector<std::string>& env,
              const std::string& log) {
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> argv{"nsenter", "--net=/run/netns/" + ns_a_, bin};
      std::istringstream extra(args);
      for (std::string a; extra >> a;) argv.push_back(a);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      _exit(127);
    }
    children_.push_back(pid);
    return pid;
  }

  int wait_child(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    children_.erase(std::remove(children_.begin(), children_.end(), pid), children_.end());
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  // Namespace A forwards RoCE from 198.51.100.9 (behind veth1, in B) to
  // 203.0.113.5 (on vx1, in B), in at veth0 and out of vx0; vx1 takes
  // redirected frames (GRO on). Returns a configuration with the XDP fast
  // path on both.
  std::string create_fast_path() {
    create_second_veth();
    must("ip -n " + ns_a_ + " addr add 203.0.113.1/24 dev vx0");
    must("ip -n " + ns_b_ + " link set vx1 address 02:00:00:00:00:12");
    must("ip -n " + ns_b_ + " addr add 203.0.113.5/24 dev vx1");
    must("ip netns exec " + ns_b_ + " ethtool -K vx1 gro on");
    must("ip netns exec " + ns_b_ + " sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.vx1.rp_filter=0");
    must("ip -n " + ns_a_ + " neigh replace 203.0.113.5 lladdr 02:00:00:00:00:12 dev vx0 nud permanent");
    must(in_a("sysctl -qw net.ipv4.ip_forward=1"));
    return write_file("fast.toml", "interfaces = [\"veth0\", \"vx0\"]\n[dataplane]\nxdp_forward = true\n");
  }

  // Sends frames RoCE frames across create_fast_path()'s namespace A from
  // veth1 (or a VLAN device on it, dev); returns how many arrived on vx1
  // (waiting at most 3 s).
  int send_forwarded_roce(int frames, const char* dev = "veth1") {
    const rg::test::Mac veth0 = rg::test::mac("02:00:00:00:00:01"), veth1 = rg::test::mac("02:00:00:00:00:02");
    return in_netns(ns_b_, [&] {
      int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_in at{};
      at.sin_family = AF_INET;
      at.sin_port = htons(rg::test::kRoceV2Port);
      inet_pton(AF_INET, "203.0.113.5", &at.sin_addr);
      if (rx < 0 || bind(rx, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) return 100;
      if (int rc = send_roce_from_veth1(veth0, veth1, frames, false, dev)) {
        close(rx);
        return 100 + rc;
      }
      int n = 0;
      char buf[2048];
      for (int waits = 0; waits < 30 && n < frames; ++waits) {
        pollfd p{rx, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        while (n < frames && recv(rx, buf, sizeof(buf), MSG_DONTWAIT) > 0) ++n;
      }
      close(rx);
      return n;
    });
  }

  // The packets counted by the rule of `tool -L FORWARD` that names port 4791.
  uint64_t forward_rule_packets(const std::string& tool) {
    Result r = sh(in_a(tool + " -L FORWARD -v -x -n"));
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);)
      if (line.find("dpt:4791") != std::string::npos) return std::stoull(line);
    return ~uint64_t{0};
  }

  // A second plain veth pair, vx0 in A and vx1 in B.
  void create_second_veth() {
    must("ip -n " + ns_a_ + " link add vx0 type veth peer name vx1 netns " + ns_b_);
    must("ip -n " + ns_a_ + " link set vx0 up");
    must("ip -n " + ns_b_ + " link set vx1 up");
  }

  // Runs the pausable build with args until it reaches pause point `at`,
  // sends it sig (SIGTERM unless told) there, and returns its exit status
  // and output.
  Result signal_at_pause_point(const std::string& args, const std::string& at, int sig = SIGTERM) {
    const std::string mark = tmp_ + "/paused-" + at;
    const std::string log = tmp_ + "/pausable.log";
    pid_t pid = spawn(RG_PAUSABLE, args + " --pin-path " + pin_,
                      {"ROCEGUARD_PAUSE_AT=" + at, "ROCEGUARD_PAUSE_MARK=" + mark}, log);
    struct stat st {};
    bool paused = false;
    for (int i = 0; i < 600 && !paused; ++i) {
      paused = stat(mark.c_str(), &st) == 0;
      if (!paused) usleep(50 * 1000);
    }
    EXPECT_TRUE(paused) << "never reached " << at;
    kill(pid, sig);
    Result r;
    r.rc = wait_child(pid);
    std::ifstream in(log);
    r.out.assign(std::istreambuf_iterator<char>(in), {});
    return r;
  }

  // Starts `roceguard run` in namespace A; readiness is its sd_notify
  // READY=1 on a socket of this test.
  struct Daemon {
    pid_t pid = -1;
    int notify = -1;
    std::string log;
  };
  // private_mounts: through `ip netns exec`, which gives the loader a mount
  // namespace of its own without the host's bpffs.
  Daemon start_run(const std::string& args, bool private_mounts = false) {
    Daemon d;
    static int n = 0;
    std::string sock = tmp_ + "/notify" + std::to_string(n);
    d.log = tmp_ + "/run" + std::to_string(n++) + ".log";
    d.notify = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock.c_str());
    if (bind(d.notify, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return d;
    d.pid = fork();
    if (d.pid == 0) {
      int fd = open(d.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      setenv("NOTIFY_SOCKET", sock.c_str(), 1);
      std::string net = "--net=/run/netns/" + ns_a_;
      std::vector<std::string> argv{"nsenter", net, RG_BIN, "run", "--pin-path", pin_};
      if (private_mounts) argv = {"ip", "netns", "exec", ns_a_, RG_BIN, "run", "--pin-path", pin_};
      std::istringstream extra(args);
      for (std::string a; extra >> a;) argv.push_back(a);
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      execvp(cargv[0], cargv.data());
      _exit(127);
    }
    children_.push_back(d.pid);
    return d;
  }

  // Next sd_notify message containing what, or "" (bounded wait).
  std::string wait_notify(const Daemon& d, const std::string& what) {
    for (int i = 0; i < 60; ++i) {
      pollfd p{d.notify, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char buf[512] = {};
      ssize_t n = recv(d.notify, buf, sizeof(buf) - 1, 0);
      if (n > 0 && std::string(buf).find(what) != std::string::npos) return buf;
    }
    return "";
  }

  int wait_exit(Daemon& d) {
    int st = 0;
    waitpid(d.pid, &st, 0);
    children_.erase(std::remove(children_.begin(), children_.end(), d.pid), children_.end());
    close(d.notify);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }

  std::string read_log(const Daemon& d) {
    std::ifstream in(d.log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // With an earlier build's LRU QP tables of value_size pinned: an attach
  // that fails half-way keeps them, the one that completes carries them
  // into slot tables, and the programs count on from the carried values.
  void expect_upgrade_carries_lru_qp_tables(size_t value_size);

  std::string tag_, ns_a_, ns_b_, pin_, tmp_;
  std::vector<pid_t> children_;
};

TEST_F(LoaderNetns, BadConfigsAttachNothing) {
  for (const auto& f : bad_configs()) {
    Result r = rg("attach --config " + f);
    EXPECT_NE(r.rc, 0) << f << ":\n" << r.out;
    EXPECT_NE(r.out.find(expected_of(f)), std::string::npos) << f << ":\n" << r.out;
    EXPECT_FALSE(pins_exist()) << f;
    Hooks h = hooks();
    EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << f;
  }
}

// config check and run give the same verdict on every corpus file, in the
// same namespace: both refuse, naming the same key, and run leaves nothing.
// An interface that does not exist is the exception: run waits for it
// (RunWaitsForAnInterfaceThatDoesNotExistYet), so there the one-shot
// attach must refuse as check does.
// The timeout only ends a run that wrongly started (and so fails the case).
TEST_F(LoaderNetns, BadConfigsRefusedByCheckAndRunAlike) {
  for (const auto& f : bad_configs()) {
    const std::string expect = expected_of(f);
    const bool run_waits = expect.rfind("interfaces[", 0) == 0 && expect.find("does not exist") != std::string::npos;
    Result check = sh(in_a(std::string(RG_BIN) + " config check " + f));
    Result run = sh(in_a("timeout 60 " + std::string(RG_BIN) + (run_waits ? " attach" : " run") + " --config " +
                         f + " --pin-path " + pin_));
    EXPECT_EQ(check.rc, 2) << f << ":\n" << check.out;
    EXPECT_TRUE(run.rc == 2 || run.rc == 3) << f << ": run exited " << run.rc << ":\n" << run.out;
    EXPECT_NE(check.out.find(expect), std::string::npos) << f << ":\n" << check.out;
    EXPECT_NE(run.out.find(expect), std::string::npos) << f << ":\n" << run.out;
    EXPECT_FALSE(pins_exist()) << f;
  }
}

// What config check accepts, run starts with: the default configuration
// with this namespace's interface, given by variable.
TEST_F(LoaderNetns, CheckAcceptsWhatRunStartsWith) {
  const std::string env = "ROCEGUARD_INTERFACES=veth0 ROCEGUARD_METRICS_LISTEN=127.0.0.1:9741 ";
  Result check = sh(env + in_a(std::string(RG_BIN) + " config check " + RG_DEFAULT_CONFIG));
  EXPECT_EQ(check.rc, 0) << check.out;
  Result attach = sh(env + in_a(std::string(RG_BIN) + " attach --config " + RG_DEFAULT_CONFIG + " --pin-path " + pin_));
  EXPECT_EQ(attach.rc, 0) << attach.out;
  EXPECT_EQ(status()["config"]["interfaces"], json::array({"veth0"}));
}

TEST_F(LoaderNetns, EnvironmentIsCheckedLikeFlags) {
  Result r = sh("ROCEGUARD_DATAPLANE_DSCP=64 " + in_a(std::string(RG_BIN) + " attach --interface veth0 --pin-path " + pin_));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("ROCEGUARD_DATAPLANE_DSCP: 64 is out of range 0..63"), std::string::npos) << r.out;
  EXPECT_FALSE(pins_exist());
  r = sh("ROCEGUARD_DATAPLANE_DSCP=26 " + in_a(std::string(RG_BIN) + " attach --interface veth0 --pin-path " + pin_));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(status()["config"]["dataplane"]["dscp"], 26);
  r = sh("ROCEGUARD_DATAPLANE_DSCP=26 " +
         in_a(std::string(RG_BIN) + " attach --interface veth0 --dscp 30 --pin-path " + pin_));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(status()["config"]["dataplane"]["dscp"], 30) << "a flag beats the environment";
}

TEST_F(LoaderNetns, AttachTwiceLeavesOneProgramPerHook) {
  Result r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  json first = status();
  r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  Hooks h = hooks();
  EXPECT_EQ(h.xdp, std::vector<std::string>{"rg_xdp_ingress"});
  EXPECT_EQ(h.tc, std::vector<std::string>{"rg_tc_egress"});
  Result tc = sh(in_a("tc filter show dev veth0 egress"));
  size_t filters = 0;
  for (size_t at = tc.out.find(" handle "); at != std::string::npos; at = tc.out.find(" handle ", at + 1)) ++filters;
  EXPECT_EQ(filters, 1u) << tc.out;
  EXPECT_NE(tc.out.find("handle 0x52 rg_tc_egress"), std::string::npos) << tc.out;

  json st = status();
  ASSERT_EQ(st["interfaces"].size(), 1u);
  EXPECT_EQ(st["interfaces"][0]["name"], "veth0");
  EXPECT_EQ(st["interfaces"][0]["ifindex"], ifindex_a());
  EXPECT_TRUE(st["interfaces"][0]["xdp"]["attached"].get<bool>());
  EXPECT_TRUE(st["interfaces"][0]["tc"]["attached"].get<bool>());
  EXPECT_NE(st["interfaces"][0]["tc"]["prog_id"], first["interfaces"][0]["tc"]["prog_id"])
      << "the second attach replaced the program";
  EXPECT_EQ(st["interfaces"][0]["tc"]["handle"], 0x52);
  // Pinned maps are root's alone.
  struct stat sb {};
  ASSERT_EQ(stat((pin_ + "/rg_counters").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(pin_.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0700u);
}

// dataplane.ingress_hook: auto takes TC ingress on a veth; moving between
// the hooks leaves our ingress program on exactly one of them, and status
// says which.
TEST_F(LoaderNetns, IngressHookAutoTakesTcOnVethAndMovesBothWays) {
  unsetenv("ROCEGUARD_DATAPLANE_INGRESS_HOOK");
  Result r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  Hooks h = hooks();
  EXPECT_TRUE(h.xdp.empty()) << r.out;
  EXPECT_EQ(h.tc_ingress, std::vector<std::string>{"rg_tc_ingress"}) << r.out;
  EXPECT_EQ(h.tc, std::vector<std::string>{"rg_tc_egress"});
  json st = status();
  EXPECT_EQ(st["interfaces"][0]["ingress_hook"], "tc") << st.dump(2);
  EXPECT_TRUE(st["interfaces"][0]["tc_ingress"]["attached"].get<bool>()) << st.dump(2);
  EXPECT_FALSE(st["interfaces"][0]["xdp"]["attached"].get<bool>()) << st.dump(2);
  EXPECT_EQ(st["healthy"], true) << st.dump(2);
  Result text = rg("status");
  EXPECT_NE(text.out.find("veth0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" tc "), std::string::npos) << text.out;

  r = rg("attach --interface veth0 --ingress-hook xdp");
  ASSERT_EQ(r.rc, 0) << r.out;
  h = hooks();
  EXPECT_EQ(h.xdp, std::vector<std::string>{"rg_xdp_ingress"}) << r.out;
  EXPECT_TRUE(h.tc_ingress.empty()) << r.out;
  EXPECT_NE(r.out.find("removed TC ingress filter rg_tc_ingress"), std::string::npos) << r.out;
  st = status();
  EXPECT_EQ(st["interfaces"][0]["ingress_hook"], "xdp") << st.dump(2);
  EXPECT_EQ(st["healthy"], true) << st.dump(2);

  r = rg("attach --interface veth0 --ingress-hook tc");
  ASSERT_EQ(r.rc, 0) << r.out;
  h = hooks();
  EXPECT_TRUE(h.xdp.empty()) << r.out;
  EXPECT_EQ(h.tc_ingress, std::vector<std::string>{"rg_tc_ingress"}) << r.out;
  EXPECT_NE(r.out.find("removed XDP program rg_xdp_ingress"), std::string::npos) << r.out;

  // Taken off behind our back: status is unhealthy and names the hook.
  must(in_a("tc filter del dev veth0 ingress pref 82 handle 0x52 bpf"));
  Result bad = rg("status --json");
  EXPECT_EQ(bad.rc, 5) << bad.out;
  EXPECT_NE(bad.out.find("TC ingress program not attached"), std::string::npos) << bad.out;
  ASSERT_EQ(rg("attach --interface veth0 --ingress-hook tc").rc, 0);

  r = rg("detach");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("removed TC ingress filter rg_tc_ingress"), std::string::npos) << r.out;
  h = hooks();
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty() && h.tc_ingress.empty()) << r.out;
}

// dataplane.ingress_hook auto on the kernel's own VXLAN device: no native
// XDP there, and what it hands up is an skb already, so auto plans TC
// ingress from the start instead of trying XDP and falling back with a
// warning.
TEST_F(LoaderNetns, IngressHookAutoTakesTcOnAKernelVxlanWithoutTryingXdp) {
  unsetenv("ROCEGUARD_DATAPLANE_INGRESS_HOOK");
  must(in_a("ip link add kvx0 type vxlan id 77 dstport 4789 local 198.51.100.1 remote 198.51.100.2 dev veth0"));
  must(in_a("ip link set kvx0 up"));
  Result r = rg("attach --interface kvx0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("instead"), std::string::npos) << r.out;
  json st = status();
  EXPECT_EQ(st["interfaces"][0]["name"], "kvx0") << st.dump(2);
  EXPECT_EQ(st["interfaces"][0]["ingress_hook"], "tc") << st.dump(2);
  EXPECT_TRUE(st["interfaces"][0]["tc_ingress"]["attached"].get<bool>()) << st.dump(2);
  EXPECT_FALSE(st["interfaces"][0]["xdp"]["attached"].get<bool>()) << st.dump(2);
  ASSERT_EQ(rg("detach").rc, 0);
}

// Geneve from the far side is decapsulated by TC ingress as by XDP: a
// packet through the real veth, not a test run.
TEST_F(LoaderNetns, TcIngressDecapsulatesOnARealVeth) {
  unsetenv("ROCEGUARD_DATAPLANE_INGRESS_HOOK");  // the file says tc; the environment would beat it
  const std::string cfg = write_file("tunnel.toml", R"(interfaces = ["veth0"]
[dataplane]
ingress_hook = "tc"
[[tunnel.peer]]
name = "far"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 77
routes = ["203.0.113.0/24"]
)");
  Result r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_EQ(hooks().tc_ingress, std::vector<std::string>{"rg_tc_ingress"});
  // From veth1 (namespace b): Geneve frames whose inner RoCE packets are for 203.0.113.5.
  const rg::test::Mac veth0 = rg::test::mac("02:00:00:00:00:01"), veth1 = rg::test::mac("02:00:00:00:00:02");
  constexpr int kFrames = 5;
  const int sent = in_netns(ns_b_, [&] { return send_roce_from_veth1(veth0, veth1, kFrames, true); });
  ASSERT_EQ(sent, 0);
  uint64_t decapsulated = 0;
  for (int i = 0; i < 50 && decapsulated < kFrames; ++i) {
    decapsulated = counter("decapsulated", "ingress");
    if (decapsulated < kFrames) usleep(100 * 1000);
  }
  EXPECT_EQ(decapsulated, static_cast<uint64_t>(kFrames));
  EXPECT_EQ(counter("roce_packets", "ingress"), static_cast<uint64_t>(kFrames));
  EXPECT_EQ(counter("unknown_tunnel", "ingress"), 0u);
}

// The XDP fast path redirects only to an interface whose own ingress runs
// in XDP: a device without native XDP (a bridge here; a VLAN device, or
// virtio-net at a jumbo MTU on Linux 6.1) has no XDP transmit either, and a
// frame redirected there is dropped. Geneve from the far gateway on veth0,
// whose inner RoCE the kernel forwards out of br0 to a host behind it: with
// the fast path on, every frame arrives, by the slow path.
TEST_F(LoaderNetns, XdpFastPathLeavesAnInterfaceWithoutXdpToTheStack) {
  unsetenv("ROCEGUARD_DATAPLANE_INGRESS_HOOK");
  create_second_veth();
  must("ip -n " + ns_a_ + " link add br0 type bridge");
  must("ip -n " + ns_a_ + " link set vx0 master br0");
  must("ip -n " + ns_a_ + " link set br0 up");
  must("ip -n " + ns_a_ + " addr add 203.0.113.1/24 dev br0");
  must("ip -n " + ns_b_ + " link set vx1 address 02:00:00:00:00:12");
  must("ip -n " + ns_b_ + " addr add 203.0.113.5/24 dev vx1");
  must("ip -n " + ns_a_ + " neigh replace 203.0.113.5 lladdr 02:00:00:00:00:12 dev br0 nud permanent");
  must(in_a("sysctl -qw net.ipv4.ip_forward=1"));
  const std::string cfg = write_file("bridge.toml", R"(interfaces = ["veth0", "br0"]
[dataplane]
xdp_forward = true
[[tunnel.peer]]
name = "far"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 77
routes = ["192.0.2.0/24"]
)");
  Result r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_EQ(hooks("br0").tc_ingress, std::vector<std::string>{"rg_tc_ingress"}) << "no native XDP on a bridge";
  ASSERT_EQ(hooks("veth0").xdp, std::vector<std::string>{"rg_xdp_ingress"});
  EXPECT_NE(r.out.find("br0"), std::string::npos) << r.out;

  const rg::test::Mac veth0 = rg::test::mac("02:00:00:00:00:01"), veth1 = rg::test::mac("02:00:00:00:00:02");
  constexpr int kFrames = 20;
  // In namespace b: the far gateway sends on veth1, the host behind br0
  // receives on vx1; returns how many arrived (waiting at most 3 s).
  const int arrived = in_netns(ns_b_, [&] {
    int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(rg::test::kRoceV2Port);
    inet_pton(AF_INET, "203.0.113.5", &at.sin_addr);
    if (rx < 0 || bind(rx, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0) return 100;
    if (int e = send_roce_from_veth1(veth0, veth1, kFrames, true)) return 100 + e;
    int n = 0;
    char buf[2048];
    for (int waits = 0; waits < 30 && n < kFrames; ++waits) {
      pollfd p{rx, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      while (n < kFrames && recv(rx, buf, sizeof(buf), MSG_DONTWAIT) > 0) ++n;
    }
    close(rx);
    return n;
  });
  EXPECT_EQ(counter("decapsulated", "ingress"), static_cast<uint64_t>(kFrames));
  EXPECT_EQ(arrived, kFrames);
  EXPECT_EQ(counter("xdp_forwarded"), 0u) << "nothing redirected to br0";
}

// The XDP fast path meets no netfilter hook, so it stays off while a rule
// could apply to forwarded packets (design section 16): without one, RoCE
// across namespace A takes the fast path; with an iptables-nft FORWARD DROP
// for RoCE, an attach names the chain, leaves the fast path's slot empty,
// and the rule drops every frame; status and doctor say which chain keeps
// it off.
TEST_F(LoaderNetns, XdpFastPathStaysOffWhileAnNftablesRuleApplies) {
  const std::string cfg = create_fast_path();
  Result r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  constexpr int kFrames = 10;
  EXPECT_EQ(send_forwarded_roce(kFrames), kFrames);
  EXPECT_EQ(counter("xdp_forwarded"), static_cast<uint64_t>(kFrames)) << "no rule: the fast path forwards";
  json st = status();
  EXPECT_EQ(st["fast_path"], json({{"configured", true}, {"on", true}, {"netfilter", json::array()}})) << st.dump(2);

  must(in_a("iptables-nft -A FORWARD -p udp --dport 4791 -j DROP"));
  r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("XDP fast path off: nftables chain ip filter FORWARD (hook forward) has 1 rule"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(send_forwarded_roce(kFrames), 0);
  EXPECT_EQ(counter("xdp_forwarded"), static_cast<uint64_t>(kFrames)) << "nothing more past the rule";
  EXPECT_EQ(forward_rule_packets("iptables-nft"), static_cast<uint64_t>(kFrames));
  st = status();
  EXPECT_EQ(st["fast_path"].value("on", true), false) << st.dump(2);
  EXPECT_EQ(st["fast_path"]["netfilter"], json::array({"nftables chain ip filter FORWARD (hook forward) has 1 rule"}))
      << st.dump(2);

  Result d = sh("(" + in_a(std::string(RG_BIN) + " doctor --json --config " + cfg + " --pin-path " + pin_) +
                " 2>/dev/null)");
  json j = json::parse(d.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << d.out;
  json found;
  for (const auto& f : j["findings"])
    if (f["check"] == "dataplane.fast_path") found = f;
  ASSERT_TRUE(found.is_object()) << j.dump(2);
  EXPECT_EQ(found.value("verdict", ""), "warn") << found.dump();
  EXPECT_NE(found.value("what", "").find("nftables chain ip filter FORWARD"), std::string::npos) << found.dump();
}

// A VLAN device on the receiving interface: a frame tagged for it reaches
// XDP with the tag outside the frame (a veth hands on its peer's metadata
// tag) and looks untagged. The stack hands it to veth0.10, whose strict
// reverse-path check drops it (no route back there); the fast path leaves
// it to the stack rather than forward it. It leaves veth0's untagged frames
// too (it cannot tell them apart), until the VLAN device goes.
TEST_F(LoaderNetns, XdpFastPathLeavesFramesWhoseVlanTagItCannotSee) {
  if (sh("modprobe -q 8021q; test -d /proc/net/vlan").rc != 0)
    GTEST_SKIP() << "no VLAN devices in this kernel (8021q); the VM tier runs this case (vm_loader_xdp_coexist)";
  const std::string cfg = create_fast_path();
  must("ip -n " + ns_b_ + " link add link veth1 name veth1.10 type vlan id 10");
  must("ip -n " + ns_b_ + " link set veth1.10 up");
  must("ip -n " + ns_a_ + " link add link veth0 name veth0.10 type vlan id 10");
  must("ip -n " + ns_a_ + " link set veth0.10 up");
  must(in_a("sysctl -qw net.ipv4.conf.all.rp_filter=1 net.ipv4.conf.veth0/10.rp_filter=1"));
  Result r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("veth0: the XDP fast path leaves the frames received here to the stack: VLAN device "
                       "veth0.10 on it"),
            std::string::npos)
      << r.out;
  constexpr int kFrames = 10;
  EXPECT_EQ(send_forwarded_roce(kFrames, "veth1.10"), 0) << "the stack drops them: no route back by veth0.10";
  EXPECT_EQ(counter("xdp_forwarded"), 0u);
  EXPECT_EQ(send_forwarded_roce(kFrames), kFrames) << "the stack forwards the untagged ones";
  EXPECT_EQ(counter("xdp_forwarded"), 0u);

  must(in_a("ip link del veth0.10"));
  r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(send_forwarded_roce(kFrames), kFrames);
  EXPECT_EQ(counter("xdp_forwarded"), static_cast<uint64_t>(kFrames)) << "no VLAN device: the fast path again";

  // run follows the VLAN device: added, the frames go to the stack again;
  // removed, the fast path takes them.
  Daemon d = start_run("--config " + cfg + " --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  auto logged = [&](const std::string& what) {
    bool seen = false;
    for (int i = 0; i < 50 && !seen; ++i) {
      seen = read_log(d).find(what) != std::string::npos;
      if (!seen) usleep(200 * 1000);
    }
    return seen;
  };
  must("ip -n " + ns_a_ + " link add link veth0 name veth0.10 type vlan id 10");
  must("ip -n " + ns_a_ + " link set veth0.10 up");
  must(in_a("sysctl -qw net.ipv4.conf.veth0/10.rp_filter=1"));
  EXPECT_TRUE(logged("veth0: the XDP fast path leaves the frames received here to the stack")) << read_log(d);
  EXPECT_EQ(send_forwarded_roce(kFrames, "veth1.10"), 0) << read_log(d);
  must(in_a("ip link del veth0.10"));
  EXPECT_TRUE(logged("veth0: no VLAN tag can hide outside its frames any more")) << read_log(d);
  EXPECT_EQ(send_forwarded_roce(kFrames), kFrames);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
  EXPECT_EQ(counter("xdp_forwarded"), static_cast<uint64_t>(2 * kFrames)) << "the last frames by the fast path";
}

// The same with iptables-legacy, read through IPT_SO_GET_INFO/GET_ENTRIES.
TEST_F(LoaderNetns, XdpFastPathStaysOffWhileAnIptablesLegacyRuleApplies) {
  const std::string cfg = create_fast_path();
  must(in_a("iptables-legacy -A FORWARD -p udp --dport 4791 -j DROP"));
  Result r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("XDP fast path off: iptables-legacy chain filter FORWARD has 1 rule"), std::string::npos)
      << r.out;
  constexpr int kFrames = 10;
  EXPECT_EQ(send_forwarded_roce(kFrames), 0);
  EXPECT_EQ(counter("xdp_forwarded"), 0u);
  EXPECT_EQ(forward_rule_packets("iptables-legacy"), static_cast<uint64_t>(kFrames));

  // The rule gone, the next attach turns the fast path on.
  must(in_a("iptables-legacy -D FORWARD -p udp --dport 4791 -j DROP"));
  r = rg("attach --config " + cfg);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("XDP fast path off"), std::string::npos) << r.out;
  EXPECT_EQ(send_forwarded_roce(kFrames), kFrames);
  EXPECT_EQ(counter("xdp_forwarded"), static_cast<uint64_t>(kFrames));
}

// `run` follows the rules: one added later empties the fast path's slot,
// its removal fills it again, each change logged.
TEST_F(LoaderNetns, RunTurnsTheXdpFastPathOffAndOnWithNetfilterRules) {
  const std::string cfg = create_fast_path();
  Daemon d = start_run("--config " + cfg + " --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  auto wait_log = [&](const std::string& what) {
    for (int i = 0; i < 100; ++i) {
      if (read_log(d).find(what) != std::string::npos) return true;
      usleep(100 * 1000);
    }
    return false;
  };
  constexpr int kFrames = 10;
  must(in_a("iptables-nft -A FORWARD -p udp --dport 4791 -j DROP"));
  ASSERT_TRUE(wait_log("XDP fast path off: nftables chain ip filter FORWARD")) << read_log(d);
  EXPECT_EQ(send_forwarded_roce(kFrames), 0);
  EXPECT_EQ(counter("xdp_forwarded"), 0u);
  EXPECT_EQ(forward_rule_packets("iptables-nft"), static_cast<uint64_t>(kFrames));

  must(in_a("iptables-nft -D FORWARD -p udp --dport 4791 -j DROP"));
  ASSERT_TRUE(wait_log("XDP fast path on")) << read_log(d);
  EXPECT_EQ(send_forwarded_roce(kFrames), kFrames);
  EXPECT_EQ(counter("xdp_forwarded"), static_cast<uint64_t>(kFrames));
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// A map of the program with id prog_id, by name, opened by id (-1 if none).
int prog_map_fd(uint32_t prog_id, const std::string& name) {
  const json prog = json::parse(sh("bpftool -j prog show id " + std::to_string(prog_id)).out, nullptr, false);
  if (!prog.is_object()) return -1;
  for (const auto& id : prog.value("map_ids", json::array())) {
    const int fd = bpf_map_get_fd_by_id(id.get<uint32_t>());
    if (fd < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && name == info.name) return fd;
    close(fd);
  }
  return -1;
}

// `roceguard run` ends the next-hop cache's generation on every input of
// the kernel's route lookup that announces its change, not only routes,
// neighbours and links: a policy rule (`ip rule add to PEER lookup 100`
// steers the tunnel elsewhere) and the forwarding switch (netconf).
TEST_F(LoaderNetns, RunEndsTheNextHopGenerationOnRulesAndForwarding) {
  const std::string cfg = write_file("leases.toml", R"(interfaces = ["veth0"]
[[tunnel.peer]]
name = "far"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 77
routes = ["203.0.113.0/24"]
)");
  Daemon d = start_run("--config " + cfg);
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  std::vector<int> ids = hook_ids();
  ASSERT_EQ(ids.size(), 2u);
  const int lease_fd = prog_map_fd(static_cast<uint32_t>(ids[1]), "rg_nh_leases");
  ASSERT_GE(lease_fd, 0);
  auto generation = [&] {
    rg_nexthop_lease l{};
    uint32_t slot = 0;
    bpf_map_lookup_elem(lease_fd, &slot, &l);
    return l.gen;
  };
  // Whether the generation leaves `from` within 5 s.
  auto moves = [&](uint32_t from) {
    for (int i = 0; i < 50; ++i) {
      if (generation() != from) return true;
      usleep(100 * 1000);
    }
    return false;
  };
  // Quiet first: the new namespace's own IPv6 start (DAD, router
  // solicitation) raises events that end generations too.
  uint32_t g = generation();
  for (int stable = 0, i = 0; i < 100 && stable < 15; ++i) {
    usleep(100 * 1000);
    const uint32_t now = generation();
    stable = now == g ? stable + 1 : 0;
    g = now;
  }
  ASSERT_NE(g, 0u) << "the peer holds a lease\n" << read_log(d);
  must(in_a("ip rule add to 198.51.100.2 lookup 100 priority 100"));
  EXPECT_TRUE(moves(g)) << "a rule added";
  g = generation();
  const std::string fwd = sh(in_a("sysctl -n net.ipv4.conf.all.forwarding")).out;
  must(in_a(std::string("sysctl -qw net.ipv4.conf.all.forwarding=") + (fwd.find('1') == 0 ? "0" : "1")));
  EXPECT_TRUE(moves(g)) << "forwarding switched";
  close(lease_fd);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

TEST_F(LoaderNetns, DetachLeavesForeignTcFilterAndQdisc) {
  ASSERT_EQ(attach_foreign(false, 7, 7), 0);
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  Hooks h = hooks();
  EXPECT_EQ(h.tc.size(), 2u);
  Result r = rg("detach");
  ASSERT_EQ(r.rc, 0) << r.out;
  h = hooks();
  EXPECT_EQ(h.tc, std::vector<std::string>{"foreign_tc"});
  EXPECT_TRUE(h.xdp.empty());
  EXPECT_FALSE(pins_exist());
  EXPECT_NE(sh(in_a("tc qdisc show dev veth0")).out.find("clsact"), std::string::npos);
  // Nothing left to detach is reported, not an error that hides a typo.
  EXPECT_EQ(rg("detach").rc, 3);
}

TEST_F(LoaderNetns, ForeignXdpIsRefusedWithoutForce) {
  ASSERT_EQ(attach_foreign(true, 0, 0), 0);
  Result r = rg("attach --interface veth0");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("foreign_xdp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--force"), std::string::npos) << r.out;
  Hooks h = hooks();
  EXPECT_EQ(h.xdp, std::vector<std::string>{"foreign_xdp"});
  EXPECT_TRUE(h.tc.empty()) << "all or nothing: no TC filter either";
  EXPECT_FALSE(pins_exist());

  r = rg("attach --interface veth0 --force");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(hooks().xdp, std::vector<std::string>{"rg_xdp_ingress"});
}

TEST_F(LoaderNetns, ForeignTcFilterAtOurHandleIsRefused) {
  ASSERT_EQ(attach_foreign(false, 0x52, 0x52), 0);
  Result r = rg("attach --interface veth0");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("--tc-handle"), std::string::npos) << r.out;
  Hooks h = hooks();
  EXPECT_EQ(h.tc, std::vector<std::string>{"foreign_tc"});
  EXPECT_TRUE(h.xdp.empty());
  r = rg("attach --interface veth0 --tc-handle 0x99 --tc-priority 9");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(hooks().tc.size(), 2u);
  // Moving to another handle/priority takes our filter along, not a copy.
  r = rg("attach --interface veth0 --tc-handle 0x98 --tc-priority 8");
  ASSERT_EQ(r.rc, 0) << r.out;
  Result tc = sh(in_a("tc filter show dev veth0 egress"));
  EXPECT_NE(tc.out.find("handle 0x98 rg_tc_egress"), std::string::npos) << tc.out;
  EXPECT_EQ(tc.out.find("handle 0x99"), std::string::npos) << tc.out;
  EXPECT_EQ(hooks().tc.size(), 2u);
  ASSERT_EQ(rg("detach").rc, 0);
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"foreign_tc"});
}

TEST_F(LoaderNetns, ReattachKeepsCounters) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  ASSERT_EQ(send_roce(100, 5), 0);
  uint64_t before = counter("roce_packets");
  EXPECT_EQ(before, 5u);
  EXPECT_EQ(counter("dscp_rewritten"), 5u);
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  EXPECT_GE(counter("roce_packets"), before) << "pinned counters must carry over";
  ASSERT_EQ(send_roce(105, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 8u);
  // PSNs 100..107 on one QP, then a resend of 104: one retransmission.
  ASSERT_EQ(send_roce(104, 1), 0);
  EXPECT_EQ(counter("retransmits"), 1u);

  Result qp = rg("stats --json --qp --top 5");
  auto j = json::parse(qp.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << qp.out;
  ASSERT_EQ(j["qps"].size(), 1u);
  EXPECT_EQ(j["qps"][0]["dest_qp"], 0x11);
  EXPECT_EQ(j["qps"][0]["egress"]["retransmits"], 1);
  // bpftool reads the same pinned map with named fields.
  Result dump = sh("bpftool -j map dump pinned " + pin_ + "/rg_counters");
  EXPECT_NE(dump.out.find("\"ev\""), std::string::npos) << dump.out;
  EXPECT_NE(dump.out.find("\"packets\""), std::string::npos);
}

TEST_F(LoaderNetns, KillNineKeepsTrafficAndCounters) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_GT(d.pid, 0);
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  ASSERT_EQ(send_roce(1, 4), 0);
  json st = status();
  kill(d.pid, SIGKILL);
  EXPECT_EQ(wait_exit(d), 128 + SIGKILL);

  // The programs stay attached without their loader and keep counting.
  Hooks h = hooks();
  EXPECT_EQ(h.xdp, std::vector<std::string>{"rg_xdp_ingress"});
  EXPECT_EQ(h.tc, std::vector<std::string>{"rg_tc_egress"});
  ASSERT_EQ(send_roce(5, 4), 0);
  EXPECT_EQ(counter("roce_packets"), 8u);

  Daemon again = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(again, "READY=1"), "") << read_log(again);
  EXPECT_GE(counter("roce_packets"), 8u);
  ASSERT_EQ(send_roce(9, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 10u);
  kill(again.pid, SIGTERM);
  EXPECT_NE(wait_notify(again, "STOPPING=1"), "");
  EXPECT_EQ(wait_exit(again), 0) << read_log(again);
  // SIGTERM leaves everything attached too; detach is the explicit removal.
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"});
  EXPECT_TRUE(pins_exist());
  ASSERT_EQ(rg("detach").rc, 0);
  EXPECT_TRUE(hooks().xdp.empty());
  EXPECT_TRUE(hooks().tc.empty());
}

TEST_F(LoaderNetns, RunRefusesASecondInstance) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  Result r = rg("attach --interface veth0");
  EXPECT_EQ(r.rc, 4) << r.out;
  r = rg("detach");
  EXPECT_EQ(r.rc, 4) << r.out;
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0);
}

TEST_F(LoaderNetns, IncompatiblePinnedMapNeedsResetState) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  json before = status();
  Result r = rg("attach --interface veth0 --qp-entries 1024");
  EXPECT_EQ(r.rc, 4) << r.out;
  // The tables' max_entries are their slots: 3/2 of the QP directions they
  // are sized for, in whole buckets (65536 -> 98304, 1024 -> 1536).
  ASSERT_EQ(rg_qp_slots(RG_DEFAULT_QP_ENTRIES), 98304u);
  ASSERT_EQ(rg_qp_slots(1024), 1536u);
  EXPECT_NE(r.out.find("rg_qp4: max_entries 98304 pinned, 1536 wanted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rg_qp6: max_entries 98304 pinned, 1536 wanted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--reset-state"), std::string::npos) << r.out;
  json after = status();
  EXPECT_EQ(after["interfaces"][0]["tc"]["prog_id"], before["interfaces"][0]["tc"]["prog_id"])
      << "a refused attach changes nothing";
  EXPECT_EQ(counter("roce_packets"), 3u);

  r = rg("attach --interface veth0 --qp-entries 1024 --reset-state");
  ASSERT_EQ(r.rc, 0) << r.out;
  int qp_tables = 0;
  // Held: a range over status()["maps"] would outlive the temporary.
  const json st = status();
  for (const auto& m : st["maps"]) {
    if (m["name"] == "rg_qp4" || m["name"] == "rg_qp6") {
      EXPECT_EQ(m["max_entries"], rg_qp_slots(1024)) << m["name"] << ": slots for 1024 QP directions";
      ++qp_tables;
    }
  }
  EXPECT_EQ(qp_tables, 2);
  EXPECT_EQ(counter("roce_packets"), 0u) << "--reset-state starts from zero";
}

// An upgrade from a build that kept one rg_qp of both families and halves:
// the pin directory as that build left it (its counters, its rg_qp, no
// rg_qp4/rg_qp6). A first attach that fails half-way leaves the old table
// in place; the attach that completes carries its QPs over and removes it,
// and the programs count on from the carried values.
TEST_F(LoaderNetns, UpgradeCarriesAnEarlierBuildsQpTable) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  // The earlier build's layout, holding QP 0x11 (what send_roce sends) with
  // both halves counted.
  for (const char* name : {rg::kMapQp4, rg::kMapQp6}) ASSERT_EQ(unlink((pin_ + "/" + name).c_str()), 0) << name;
  int legacy = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, rg::kMapQpLegacy, sizeof(rg_qp_key), sizeof(rg::LegacyQpState),
                              65536, nullptr);
  ASSERT_GE(legacy, 0) << strerror(errno);
  rg_qp_key key{};
  key.family = AF_INET;
  inet_pton(AF_INET, "198.51.100.1", key.src);
  inet_pton(AF_INET, "198.51.100.2", key.dst);
  key.dest_qp = 0x11;
  rg::LegacyQpState old{};
  old.dir[RG_DIR_EGRESS] = {1000, 64000, 7, 2, 5, 1, 0, 0, 3, 4, 99, RG_QP_F_SEEN};
  old.dir[RG_DIR_INGRESS] = {500, 32000, 0, 1, 6, 0, 1, 2, 0, 0, 1234, RG_QP_F_SEEN};
  struct timespec now {};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  old.last_seen_ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + now.tv_nsec;  // not idle
  ASSERT_EQ(bpf_map_update_elem(legacy, &key, &old, BPF_NOEXIST), 0) << strerror(errno);
  const std::string legacy_pin = pin_ + "/" + rg::kMapQpLegacy;
  ASSERT_EQ(bpf_obj_pin(legacy, legacy_pin.c_str()), 0) << strerror(errno);
  close(legacy);
  struct stat st {};

  // Fails at vbig0, after veth0: everything is put back and the old table stays.
  create_xdp_refusing_veth();
  Result r = rg("attach --interface veth0 --interface vbig0");
  ASSERT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(stat(legacy_pin.c_str(), &st), 0) << "a failed upgrade keeps the earlier build's table\n" << r.out;

  r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("carried 2 QP directions"), std::string::npos) << r.out;
  EXPECT_NE(stat(legacy_pin.c_str(), &st), 0) << "removed once the attach completed";
  auto qp_of = [&] {
    Result q = rg("stats --json --qp --top 5");
    auto j = json::parse(q.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << q.out;
    EXPECT_EQ(j.value("qps", json::array()).size(), 1u) << q.out;
    return j.is_discarded() || j["qps"].empty() ? json{} : j["qps"][0];
  };
  json q = qp_of();
  EXPECT_EQ(q["dest_qp"], 0x11);
  EXPECT_EQ(q["egress"]["packets"], 1000);
  EXPECT_EQ(q["egress"]["retransmits"], 7);
  EXPECT_EQ(q["egress"]["lost"], 5);
  EXPECT_EQ(q["egress"]["max_psn"], 99);
  EXPECT_EQ(q["ingress"]["packets"], 500);
  EXPECT_EQ(q["ingress"]["rnr_nak"], 2);
  EXPECT_EQ(q["ingress"]["max_psn"], 1234);
  // The attached programs count on in the carried entry: PSN 100 after 99.
  ASSERT_EQ(send_roce(100, 2), 0);
  q = qp_of();
  EXPECT_EQ(q["egress"]["packets"], 1002);
  EXPECT_EQ(q["egress"]["retransmits"], 7);
  EXPECT_EQ(q["egress"]["gaps"], 2);
}

// rg_qp4 and rg_qp6 as an earlier build whose tables were LRU hashes of
// value_size (sizeof(rg::QpDirV80) or sizeof(rg::QpDirV64)) pinned them in
// pin, replacing this build's: QP 0x11 (what send_roce sends) leaving, its
// CE count past 2^32 where the value keeps 64 bits and its gaps past 2^16,
// and an IPv6 QP arriving, its RNR NAKs past 2^16.
void pin_lru_qp_tables(const std::string& pin, uint32_t value_size) {
  for (const char* name : {rg::kMapQp4, rg::kMapQp6}) ASSERT_EQ(unlink((pin + "/" + name).c_str()), 0) << name;
  int v4 = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, rg::kMapQp4, sizeof(rg_qp4_key), value_size,
                          RG_DEFAULT_QP_ENTRIES, nullptr);
  int v6 = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, rg::kMapQp6, sizeof(rg_qp6_key), value_size,
                          RG_DEFAULT_QP_ENTRIES, nullptr);
  ASSERT_GE(v4, 0) << strerror(errno);
  ASSERT_GE(v6, 0) << strerror(errno);
  // Either value from the 80-byte one: the 64-byte value keeps the four
  // counts below in 32 bits.
  auto put = [value_size](int fd, const void* key, const rg::QpDirV80& o) {
    if (value_size == sizeof(rg::QpDirV80)) return bpf_map_update_elem(fd, key, &o, BPF_NOEXIST);
    const rg::QpDirV64 n = rg::v64_of(o);
    return bpf_map_update_elem(fd, key, &n, BPF_NOEXIST);
  };
  struct timespec now {};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  rg_qp4_key k4{};
  inet_pton(AF_INET, "198.51.100.1", k4.src);
  inet_pton(AF_INET, "198.51.100.2", k4.dst);
  k4.dest_qp = 0x11;
  k4.direction = RG_DIR_EGRESS;
  rg::QpDirV80 o4{};
  o4.packets = 1000;
  o4.bytes = 64000;
  o4.max_psn = 99;
  o4.flags = RG_QP_F_SEEN;
  o4.last_seen_ns = static_cast<uint64_t>(now.tv_sec) * 1000000000ull + now.tv_nsec;  // not idle
  o4.retransmits = 7;
  o4.lost = 5;
  o4.cnp = 3;
  o4.ecn_ce = (1ull << 32) + 4;
  o4.gaps = 0x10000 + 2;
  ASSERT_EQ(put(v4, &k4, o4), 0) << strerror(errno);
  rg_qp6_key k6{};
  inet_pton(AF_INET6, "2001:db8::1", k6.src);
  inet_pton(AF_INET6, "2001:db8::2", k6.dst);
  k6.dest_qp = 0x22;
  k6.direction = RG_DIR_INGRESS;
  rg::QpDirV80 o6{};
  o6.packets = 500;
  o6.bytes = 32000;
  o6.flags = RG_QP_F_SEEN;
  o6.last_seen_ns = o4.last_seen_ns;
  o6.rnr_nak = 0x20000 + 2;
  ASSERT_EQ(put(v6, &k6, o6), 0) << strerror(errno);
  ASSERT_EQ(bpf_obj_pin(v4, (pin + "/" + rg::kMapQp4).c_str()), 0) << strerror(errno);
  ASSERT_EQ(bpf_obj_pin(v6, (pin + "/" + rg::kMapQp6).c_str()), 0) << strerror(errno);
  close(v4);
  close(v6);
}

// The value size of a pinned map; 0 when it cannot be read.
uint32_t pinned_value_size(const std::string& path) {
  const int fd = bpf_obj_get(path.c_str());
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  const bool ok = fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0;
  if (fd >= 0) close(fd);
  return ok ? info.value_size : 0u;
}

// The QPs of `stats --json --qp --top 5` by dest_qp.
std::map<uint32_t, json> qps_by_number(const Result& q) {
  std::map<uint32_t, json> qps;
  auto j = json::parse(q.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << q.out;
  if (j.is_discarded()) return qps;
  for (const auto& e : j.value("qps", json::array())) qps[e.value("dest_qp", 0u)] = e;
  return qps;
}

// What pin_lru_qp_tables pinned, in this build's slot tables: every count,
// those this build keeps in 32 or 16 bits by their low bits.
void expect_lru_qps_carried(const Result& q) {
  std::map<uint32_t, json> qps = qps_by_number(q);
  ASSERT_EQ(qps.size(), 2u) << q.out;
  EXPECT_EQ(qps[0x11]["egress"]["packets"], 1000);
  EXPECT_EQ(qps[0x11]["egress"]["retransmits"], 7);
  EXPECT_EQ(qps[0x11]["egress"]["lost"], 5);
  EXPECT_EQ(qps[0x11]["egress"]["cnp"], 3);
  EXPECT_EQ(qps[0x11]["egress"]["ecn_ce"], 4) << "the low 32 bits";
  EXPECT_EQ(qps[0x11]["egress"]["gaps"], 2) << "the low 16 bits";
  EXPECT_EQ(qps[0x11]["egress"]["max_psn"], 99);
  EXPECT_EQ(qps[0x22]["ingress"]["packets"], 500);
  EXPECT_EQ(qps[0x22]["ingress"]["rnr_nak"], 2) << "the low 16 bits";
}

void LoaderNetns::expect_upgrade_carries_lru_qp_tables(size_t value_size) {
  // Fails at vbig0, after veth0: everything is put back, the old tables too.
  create_xdp_refusing_veth();
  Result r = rg("attach --interface veth0 --interface vbig0");
  ASSERT_NE(r.rc, 0) << r.out;
  for (const char* name : {rg::kMapQp4, rg::kMapQp6})
    EXPECT_EQ(pinned_value_size(pin_ + "/" + name), value_size)
        << name << ": a failed upgrade keeps the earlier build's\n"
        << r.out;

  r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("carried 2 QP directions"), std::string::npos) << r.out;
  EXPECT_EQ(pinned_value_size(pin_ + "/" + rg::kMapQp4), sizeof(rg_qp4_slot));
  EXPECT_EQ(pinned_value_size(pin_ + "/" + rg::kMapQp6), sizeof(rg_qp6_slot));
  expect_lru_qps_carried(rg("stats --json --qp --top 5"));
  // The attached programs count on in the carried entry: PSN 100 after 99.
  ASSERT_EQ(send_roce(100, 2), 0);
  std::map<uint32_t, json> qps = qps_by_number(rg("stats --json --qp --top 5"));
  EXPECT_EQ(qps[0x11]["egress"]["packets"], 1002);
  EXPECT_EQ(qps[0x11]["egress"]["retransmits"], 7);
  EXPECT_EQ(qps[0x11]["egress"]["gaps"], 2);
}

// An upgrade from a build whose rg_qp4 and rg_qp6 were LRU hashes of the
// 80-byte value: a first attach that fails half-way pins the old tables
// again; the attach that completes carries their QPs into slot tables
// (instead of refusing them as of another type and value size), and the
// programs count on from the carried values.
TEST_F(LoaderNetns, UpgradeCarriesTheEarlierBuildsQpTablesOfThe80ByteValue) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  pin_lru_qp_tables(pin_, sizeof(rg::QpDirV80));
  ASSERT_FALSE(HasFatalFailure());
  expect_upgrade_carries_lru_qp_tables(sizeof(rg::QpDirV80));
}

// The same from the build just before the slot tables, whose LRU hashes
// held the 64-byte value (its counts in 32 bits).
TEST_F(LoaderNetns, UpgradeCarriesTheEarlierBuildsQpTablesOfThe64ByteValue) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  pin_lru_qp_tables(pin_, sizeof(rg::QpDirV64));
  ASSERT_FALSE(HasFatalFailure());
  // Until an attach carries them over, the readers refuse them by name.
  Result r = rg("stats --json --qp");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("type lru_hash, expected array"), std::string::npos) << r.out;
  expect_upgrade_carries_lru_qp_tables(sizeof(rg::QpDirV64));
}

// Pins rg_counters in the pin directory, with a value of `events` counters
// (an earlier build had fewer) and the given entries, before any attach.
// Every CPU's slot of an entry holds the same value.
void pin_counter_map(const std::string& pin, uint32_t events,
                     const std::vector<std::pair<rg_counter_key, std::vector<rg_counter>>>& entries) {
  ASSERT_EQ(mkdir(pin.c_str(), 0700), 0) << pin;
  LIBBPF_OPTS(bpf_map_create_opts, opts);
  int fd = bpf_map_create(BPF_MAP_TYPE_PERCPU_HASH, "rg_counters", sizeof(rg_counter_key),
                          events * sizeof(rg_counter), RG_MAX_COUNTER_KEYS, &opts);
  ASSERT_GE(fd, 0) << strerror(errno);
  const auto ncpu = static_cast<size_t>(libbpf_num_possible_cpus());
  for (const auto& [key, value] : entries) {
    std::vector<rg_counter> per_cpu(ncpu * events);
    for (size_t c = 0; c < ncpu; ++c) std::copy(value.begin(), value.end(), per_cpu.begin() + c * events);
    ASSERT_EQ(bpf_map_update_elem(fd, &key, per_cpu.data(), BPF_NOEXIST), 0) << strerror(errno);
  }
  ASSERT_EQ(bpf_obj_pin(fd, (pin + "/rg_counters").c_str()), 0) << strerror(errno);
  close(fd);
}

// rg_counters full of interfaces that are gone, as restarts on changing
// ifindexes leave it: attach prunes them, so the interface attached now is
// counted instead of silently not.
TEST_F(LoaderNetns, FullCounterMapOfGoneInterfacesIsPrunedAtAttach) {
  std::vector<std::pair<rg_counter_key, std::vector<rg_counter>>> stale;
  for (uint32_t i = 0; i < RG_MAX_COUNTER_KEYS; ++i)
    stale.push_back({{0x7fff0000u + i / RG_DIR_MAX, i % RG_DIR_MAX}, std::vector<rg_counter>(RG_EV_MAX)});
  pin_counter_map(pin_, RG_EV_MAX, stale);
  Result r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  ASSERT_EQ(send_roce(1, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 3u);
}

// An upgrade that appends events lengthens the counter value: attach
// carries the counters over instead of refusing the pinned map.
TEST_F(LoaderNetns, CountersOfABuildWithFewerEventsCarryOver) {
  const uint32_t events = RG_EV_MAX - 1;
  std::vector<rg_counter> value(events);
  value[RG_EV_ROCE_PACKETS] = {5, 500};
  pin_counter_map(pin_, events, {{{static_cast<uint32_t>(ifindex_a()), RG_DIR_EGRESS}, value}});
  const uint64_t ncpu = static_cast<uint64_t>(libbpf_num_possible_cpus());
  Result r = rg("attach --interface veth0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(counter("roce_packets"), 5 * ncpu);
  ASSERT_EQ(send_roce(1, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 5 * ncpu + 3);
}

TEST_F(LoaderNetns, RunSurvivesInterfaceDeletion) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  int old_index = ifindex_a();
  must("ip -n " + ns_a_ + " link del veth0");
  bool logged = false;
  for (int i = 0; i < 50 && !logged; ++i) {
    logged = read_log(d).find("interface veth0 disappeared") != std::string::npos;
    if (!logged) usleep(200 * 1000);
  }
  EXPECT_TRUE(logged) << read_log(d);
  EXPECT_EQ(kill(d.pid, 0), 0) << "the loader survives";

  create_veth();
  ASSERT_NE(ifindex_a(), old_index);
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    Hooks h = hooks();
    back = h.xdp == std::vector<std::string>{"rg_xdp_ingress"} && h.tc == std::vector<std::string>{"rg_tc_egress"};
    if (!back) usleep(200 * 1000);
  }
  EXPECT_TRUE(back) << read_log(d);
  ASSERT_EQ(send_roce(1, 2), 0);
  EXPECT_GE(counter("roce_packets"), 2u);
  json st = status();
  EXPECT_EQ(st["interfaces"][0]["ifindex"], ifindex_a()) << "the record follows the new interface";
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// An attached interface renamed to a name that is not UTF-8 (byte 0xff):
// /metrics, `stats --json` and `stats` still say what they count, writing
// the byte as \xff, and every answer is text a parser takes.
TEST_F(LoaderNetns, InterfaceRenamedToANameThatIsNotTextIsWrittenEscaped) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  ASSERT_EQ(send_roce(1, 3), 0);
  must("ip -n " + ns_a_ + " link set dev veth0 down");
  must("ip -n " + ns_a_ + " link set dev veth0 name \"$(printf '\\377rg0')\"");
  must("ip -n " + ns_a_ + " link set dev \"$(printf '\\377rg0')\" up");

  Result m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
  EXPECT_EQ(m.rc, 0) << m.out;
  EXPECT_TRUE(is_utf8(m.out)) << "the scrape is not UTF-8, Prometheus rejects all of it";
  // The label value \xffrg0, with its backslash escaped by the text format.
  EXPECT_NE(m.out.find("roceguard_roce_packets_total{interface=\"\\\\xffrg0\",direction=\"egress\"} 3"),
            std::string::npos) << m.out;

  Result j = rg_stdout("stats --json");
  EXPECT_EQ(j.rc, 0) << j.out;
  EXPECT_TRUE(is_utf8(j.out));
  auto stats = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(stats.is_object()) << j.out;
  ASSERT_FALSE(stats["counters"].empty()) << j.out;
  for (const auto& c : stats["counters"]) EXPECT_EQ(c["interface"], "\\xffrg0") << j.out;

  Result text = rg("stats");
  EXPECT_EQ(text.rc, 0) << text.out;
  EXPECT_TRUE(is_utf8(text.out)) << text.out;
  EXPECT_NE(text.out.find("\\xffrg0 egress"), std::string::npos) << text.out;
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// attach refuses what config check refuses: a name that is not UTF-8 (exit
// 2, naming the flag) and a name with a NUL, which is another listed name
// to the kernel: nothing is attached.
TEST_F(LoaderNetns, AttachRefusesNamesThatAreNotNames) {
  Result r = rg("attach --interface \"$(printf '\\377rg0')\"");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--interface: \"\\xffrg0\""), std::string::npos) << r.out;
  EXPECT_TRUE(is_utf8(r.out)) << r.out;
  const std::string cfg = write_file("nul.toml", "interfaces = [\"veth0\\u0000x\", \"veth0\"]\n");
  r = rg("attach --config " + cfg);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("interfaces[0]: "), std::string::npos) << r.out;
  EXPECT_FALSE(pins_exist());
  Hooks h = hooks();
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << "attached after all";
}

TEST_F(LoaderNetns, RunPutsBackAHookRemovedBehindItsBack) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  must(in_a("ip link set dev veth0 xdpdrv off"));
  must(in_a("tc filter del dev veth0 egress pref 82 handle 0x52 bpf"));
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    Hooks h = hooks();
    back = h.xdp == std::vector<std::string>{"rg_xdp_ingress"} && h.tc == std::vector<std::string>{"rg_tc_egress"};
    if (!back) usleep(200 * 1000);
  }
  EXPECT_TRUE(back) << read_log(d);
  EXPECT_NE(read_log(d).find("re-attached to veth0"), std::string::npos) << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// run exports the ingress hook in use, and puts back a TC ingress filter
// someone removed.
TEST_F(LoaderNetns, RunExportsAndKeepsTheTcIngressHook) {
  unsetenv("ROCEGUARD_DATAPLANE_INGRESS_HOOK");
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  Result m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
  EXPECT_NE(m.out.find("roceguard_attached{interface=\"veth0\",hook=\"tc_ingress\"} 1"), std::string::npos) << m.out;
  EXPECT_EQ(m.out.find("hook=\"xdp_ingress\""), std::string::npos) << "one series, the hook in use:\n" << m.out;
  must(in_a("tc filter del dev veth0 ingress pref 82 handle 0x52 bpf"));
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    back = hooks().tc_ingress == std::vector<std::string>{"rg_tc_ingress"};
    if (!back) usleep(200 * 1000);
  }
  EXPECT_TRUE(back) << read_log(d);
  EXPECT_TRUE(hooks().xdp.empty()) << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// `run` answers the probes on --health-listen, apart from /metrics:
// liveness while it serves, readiness while veth0 has its programs; when
// veth0 is deleted it is not ready (and still alive), and ready again once
// veth0 is back and re-attached.
TEST_F(LoaderNetns, RunAnswersProbesApartFromMetrics) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741 --health-listen 127.0.0.1:9742");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  auto status_of = [&](const std::string& path) {
    Result r = sh(in_a("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9742" + path));
    return r.out;
  };
  auto wait_status = [&](const std::string& path, const std::string& want) {
    std::string got;
    for (int i = 0; i < 50 && got != want; ++i) {
      got = status_of(path);
      if (got != want) usleep(200 * 1000);
    }
    return got;
  };
  EXPECT_EQ(status_of("/livez"), "200");
  EXPECT_EQ(status_of("/readyz"), "200") << read_log(d);
  EXPECT_EQ(sh(in_a("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9741/healthz")).out, "404");
  EXPECT_NE(read_log(d).find("http://127.0.0.1:9742/readyz"), std::string::npos) << read_log(d);

  must("ip -n " + ns_a_ + " link del veth0");
  EXPECT_EQ(wait_status("/readyz", "503"), "503") << read_log(d);
  Result body = sh(in_a("curl -s http://127.0.0.1:9742/readyz"));
  EXPECT_EQ(body.out, "not ready: nothing attached (not attached: veth0)\n");
  EXPECT_EQ(status_of("/livez"), "200");
  create_veth();
  EXPECT_EQ(wait_status("/readyz", "200"), "200") << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

TEST_F(LoaderNetns, TunnelMapsMatchTheConfiguration) {
  // Each peer's local address must be one of this host's.
  must("ip -n " + ns_a_ + " addr add 2001:db8::1/64 dev veth0 nodad");
  std::string two = write_file("two.toml", R"(
interfaces = ["veth0"]
[tunnel]
sequence = true
shield = "control"
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 4791
routes = ["203.0.113.0/24", "192.0.2.128/25"]
[[tunnel.peer]]
name = "v6"
local = "2001:db8::1"
remote = "2001:db8::2"
vni = 7
routes = ["2001:db8:2::/48"]
shield = "all"
)");
  // Each used slot's shield flags, by VNI, from the pinned rg_peers.
  auto shield_flags = [&] {
    std::map<uint32_t, uint32_t> by_vni;
    Result dump = sh("bpftool -j map dump pinned " + pin_ + "/rg_peers");
    for (const auto& e : json::parse(dump.out)) {
      const json& v = e["formatted"]["value"];  // bpftool's view through the map's BTF
      if (v["family"] != 0) by_vni[v["vni"].get<uint32_t>()] = v["flags"].get<uint32_t>();
    }
    return by_vni;
  };
  Result check = sh(in_a(std::string(RG_BIN) + " config check " + two));
  EXPECT_EQ(check.rc, 0) << check.out;
  ASSERT_EQ(rg("attach --config " + two).rc, 0);
  EXPECT_EQ(map_entries("rg_route4"), 2u);
  EXPECT_EQ(map_entries("rg_route6"), 1u);
  EXPECT_EQ(map_entries("rg_decap"), 2u);
  Result peers = sh("bpftool -j map dump pinned " + pin_ + "/rg_peers");
  EXPECT_NE(peers.out.find("\"vni\":4791"), std::string::npos) << peers.out.substr(0, 400);
  // The loss shield: tunnel.shield for west, v6's own for it.
  EXPECT_EQ(shield_flags(), (std::map<uint32_t, uint32_t>{{4791, RG_PEER_F_SHIELD_CONTROL}, {7, RG_PEER_F_SHIELD_ALL}}));
  EXPECT_EQ(status()["config"]["tunnel"]["peer"][1]["shield"], "all");

  std::string one = write_file("one.toml", R"(
interfaces = ["veth0"]
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 4792
routes = ["203.0.113.0/24"]
)");
  ASSERT_EQ(rg("attach --config " + one).rc, 0);
  EXPECT_EQ(map_entries("rg_route4"), 1u) << "stale routes are removed";
  EXPECT_EQ(map_entries("rg_route6"), 0u);
  EXPECT_EQ(map_entries("rg_decap"), 1u);
  peers = sh("bpftool -j map dump pinned " + pin_ + "/rg_peers");
  EXPECT_EQ(peers.out.find("\"vni\":4791"), std::string::npos) << "stale peer slot is cleared";
  EXPECT_NE(peers.out.find("\"vni\":4792"), std::string::npos);
  EXPECT_EQ(shield_flags(), (std::map<uint32_t, uint32_t>{{4792, 0}})) << "the shield is off again";
  json st = status();
  EXPECT_EQ(st["config"]["tunnel"]["peer"][0]["vni"], 4792);
}

// SIGHUP under run reads the file again: a peer's new VNI and routes are in
// force in the pinned maps and the record; a changed interface list is
// logged as needing a restart and not applied; a file that does not parse
// is refused and the peers in force stay.
TEST_F(LoaderNetns, SighupAppliesPeersAndNamesWhatNeedsARestart) {
  create_second_veth();
  const std::string peer = R"(
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
)";
  const std::string file = write_file("reload.toml", "interfaces = [\"veth0\"]\n" + peer +
                                                     "vni = 4791\nroutes = [\"203.0.113.0/24\"]\n");
  Daemon d = start_run("--config " + file + " --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  auto peers_dump = [&] { return sh("bpftool -j map dump pinned " + pin_ + "/rg_peers").out; };
  ASSERT_NE(peers_dump().find("\"vni\":4791"), std::string::npos);
  ASSERT_EQ(map_entries("rg_route4"), 1u);
  // Waits (bounded) for the count-th log line containing what.
  auto logged = [&](const std::string& what, size_t count = 1) {
    for (int i = 0; i < 100; ++i) {
      const std::string log = read_log(d);
      size_t n = 0;
      for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
      if (n >= count) return true;
      usleep(100 * 1000);
    }
    return false;
  };

  std::ofstream(file) << "interfaces = [\"veth0\", \"vx0\"]\n" << peer
                      << "vni = 4792\nroutes = [\"203.0.113.0/24\", \"192.0.2.0/24\"]\n";
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  EXPECT_TRUE(logged("SIGHUP: tunnel.peer applied")) << read_log(d);
  EXPECT_TRUE(logged("SIGHUP: interfaces changed: restart roceguard to apply it (not applied)")) << read_log(d);
  const std::string dump = peers_dump();
  EXPECT_NE(dump.find("\"vni\":4792"), std::string::npos) << dump.substr(0, 400);
  EXPECT_EQ(dump.find("\"vni\":4791"), std::string::npos) << dump.substr(0, 400);
  EXPECT_EQ(map_entries("rg_route4"), 2u);
  json st = status();
  EXPECT_EQ(st["config"]["tunnel"]["peer"][0]["vni"], 4792) << st.dump();
  EXPECT_EQ(st["config"]["interfaces"], json::array({"veth0"})) << st.dump();
  EXPECT_EQ(st["interfaces"].size(), 1u) << st.dump();
  EXPECT_TRUE(hooks("vx0").xdp.empty() && hooks("vx0").tc.empty()) << "vx0 is not attached before a restart";

  std::ofstream(file) << "interfaces = [\"veth0\"]\n" << peer << "vni = \"not a number\"\n";
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  EXPECT_TRUE(logged("SIGHUP: configuration refused, the one in force stays")) << read_log(d);
  EXPECT_NE(peers_dump().find("\"vni\":4792"), std::string::npos);
  EXPECT_EQ(map_entries("rg_route4"), 2u);
  EXPECT_EQ(status()["config"]["tunnel"]["peer"][0]["vni"], 4792);

  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// SIGHUP under run applies the metrics settings without a restart: the
// endpoint moves, the per-QP series and the probes start, the record says
// so; an address that cannot be served changes nothing. In exporter-only
// mode too.
TEST_F(LoaderNetns, SighupAppliesTheMetricsSettings) {
  const std::string file = write_file("metrics.toml", "interfaces = [\"veth0\"]\n[metrics]\nlisten = \"127.0.0.1:9741\"\n");
  Daemon d = start_run("--config " + file);
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  ASSERT_EQ(send_roce(1, 3), 0);
  auto logged = [&](const std::string& what) {
    for (int i = 0; i < 100; ++i) {
      if (read_log(d).find(what) != std::string::npos) return true;
      usleep(100 * 1000);
    }
    return false;
  };
  auto scrape = [&](const std::string& address) { return sh(in_a("curl -sf http://" + address + "/metrics")); };
  Result before = scrape("127.0.0.1:9741");
  ASSERT_EQ(before.rc, 0) << before.out;
  EXPECT_EQ(before.out.find("roceguard_qp_packets_total"), std::string::npos) << "per_qp is off";

  std::ofstream(file) << "interfaces = [\"veth0\"]\n[metrics]\nlisten = \"127.0.0.1:9743\"\n"
                      << "health_listen = \"127.0.0.1:9744\"\nper_qp = true\n";
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  EXPECT_TRUE(logged("SIGHUP: metrics.per_qp, metrics.listen, metrics.health_listen applied: serving metrics on "
                     "http://127.0.0.1:9743/metrics")) << read_log(d);
  Result after = scrape("127.0.0.1:9743");
  ASSERT_EQ(after.rc, 0) << read_log(d);
  EXPECT_NE(after.out.find("roceguard_qp_packets_total{"), std::string::npos) << after.out.substr(0, 2000);
  EXPECT_NE(scrape("127.0.0.1:9741").rc, 0) << "the old address is closed";
  EXPECT_EQ(sh(in_a("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9744/livez")).out, "200");
  json st = status();
  EXPECT_EQ(st["config"]["metrics"]["listen"], "127.0.0.1:9743") << st.dump();
  EXPECT_EQ(st["config"]["metrics"]["per_qp"], true) << st.dump();
  EXPECT_EQ(read_log(d).find("restart roceguard"), std::string::npos) << read_log(d);

  // An address another process serves: refused, the endpoint in force
  // stays. That other process is an exporter-only run, whose own reload
  // moves it.
  const std::string only = write_file("only.toml", "interfaces = [\"veth0\"]\n[dataplane]\nattach = false\n"
                                                   "[metrics]\nlisten = \"127.0.0.1:9745\"\n");
  Daemon e = start_run("--config " + only);
  ASSERT_NE(wait_notify(e, "READY=1"), "") << read_log(e);
  std::ofstream(file) << "interfaces = [\"veth0\"]\n[metrics]\nlisten = \"127.0.0.1:9745\"\n"
                      << "health_listen = \"127.0.0.1:9744\"\nper_qp = true\n";
  ASSERT_EQ(kill(d.pid, SIGHUP), 0);
  EXPECT_TRUE(logged("SIGHUP: metrics settings not applied: cannot serve metrics on 127.0.0.1:9745")) << read_log(d);
  after = scrape("127.0.0.1:9743");
  EXPECT_EQ(after.rc, 0) << read_log(d);
  EXPECT_NE(after.out.find("roceguard_qp_packets_total{"), std::string::npos);
  EXPECT_EQ(status()["config"]["metrics"]["listen"], "127.0.0.1:9743");
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);

  std::ofstream(only) << "interfaces = [\"veth0\"]\n[dataplane]\nattach = false\n"
                      << "[metrics]\nlisten = \"127.0.0.1:9746\"\n";
  ASSERT_EQ(kill(e.pid, SIGHUP), 0);
  bool moved = false;
  for (int i = 0; i < 100 && !moved; ++i) {
    moved = read_log(e).find("SIGHUP: metrics.listen applied") != std::string::npos;
    if (!moved) usleep(100 * 1000);
  }
  EXPECT_TRUE(moved) << read_log(e);
  EXPECT_EQ(scrape("127.0.0.1:9746").rc, 0) << read_log(e);
  EXPECT_NE(scrape("127.0.0.1:9745").rc, 0);
  kill(e.pid, SIGTERM);
  EXPECT_EQ(wait_exit(e), 0) << read_log(e);
}


// A re-attach that fails late (after veth0 is already re-attached) leaves
// every interface as it was: the previous programs (same ids), the previous
// tunnel maps and attach record, and the counters.
TEST_F(LoaderNetns, FailedReattachRestoresThePreviousAttachment) {
  create_xdp_refusing_veth();
  std::string one = write_file("one.toml", R"(
interfaces = ["veth0"]
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 4791
routes = ["203.0.113.0/24"]
)");
  std::string two = write_file("two.toml", R"(
interfaces = ["veth0", "vbig0"]
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 4792
routes = ["203.0.113.0/24", "192.0.2.0/25"]
[[tunnel.peer]]
name = "east"
local = "198.51.100.1"
remote = "198.51.100.3"
vni = 4793
routes = ["192.0.2.128/25"]
)");
  ASSERT_EQ(rg("attach --config " + one).rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  std::vector<int> before = hook_ids();
  ASSERT_EQ(before.size(), 2u);
  json st_before = status();

  Result r = rg("attach --config " + two);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("vbig0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("restored"), std::string::npos) << "the log says what was put back:\n" << r.out;
  EXPECT_EQ(hook_ids(), before) << "veth0 runs the programs it ran before:\n" << r.out;
  EXPECT_EQ(hooks().xdp, std::vector<std::string>{"rg_xdp_ingress"});
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"});
  EXPECT_TRUE(hook_ids("vbig0").empty());
  EXPECT_FALSE(has_clsact("vbig0"));
  json st = status();
  EXPECT_EQ(st["config"], st_before["config"]);
  EXPECT_EQ(st["interfaces"], st_before["interfaces"]);
  EXPECT_EQ(map_entries("rg_route4"), 1u);
  EXPECT_EQ(map_entries("rg_decap"), 1u);
  Result peers = sh("bpftool -j map dump pinned " + pin_ + "/rg_peers");
  EXPECT_NE(peers.out.find("\"vni\":4791"), std::string::npos) << peers.out.substr(0, 400);
  EXPECT_EQ(peers.out.find("\"vni\":4793"), std::string::npos) << peers.out.substr(0, 400);
  EXPECT_EQ(counter("roce_packets"), 3u);
  ASSERT_EQ(send_roce(4, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 5u) << "the restored programs still count";
}

// With --force a failed attach puts back the foreign programs it replaced.
TEST_F(LoaderNetns, FailedForcedAttachPutsTheForeignProgramsBack) {
  create_xdp_refusing_veth();
  ASSERT_EQ(attach_foreign(true, 0x52, 0x52), 0);
  std::vector<int> before = hook_ids();
  ASSERT_EQ(before.size(), 2u);
  Result r = rg("attach --interface veth0 --interface vbig0 --force");
  EXPECT_NE(r.rc, 0) << r.out;
  Hooks h = hooks();
  EXPECT_EQ(h.xdp, std::vector<std::string>{"foreign_xdp"}) << r.out;
  EXPECT_EQ(h.tc, std::vector<std::string>{"foreign_tc"}) << r.out;
  EXPECT_EQ(hook_ids(), before);
  EXPECT_TRUE(has_clsact()) << "the foreign filter's qdisc stays";
  EXPECT_FALSE(pins_exist());
}

// A failed first attach removes the clsact qdisc it created, and nothing
// else is left behind.
TEST_F(LoaderNetns, FailedFirstAttachLeavesNoQdisc) {
  create_xdp_refusing_veth();
  ASSERT_FALSE(has_clsact());
  Result r = rg("attach --interface veth0 --interface vbig0");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("vbig0"), std::string::npos) << r.out;
  EXPECT_TRUE(hook_ids().empty()) << r.out;
  EXPECT_FALSE(has_clsact()) << r.out;
  EXPECT_FALSE(has_clsact("vbig0"));
  EXPECT_FALSE(pins_exist());
}

// A tunnel map left full (by an earlier failed write, or stale keys) does
// not block the next attach: stale keys go before new ones are written.
TEST_F(LoaderNetns, TunnelMapsAreRewrittenAtCapacity) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  int fd = bpf_obj_get((pin_ + "/rg_decap").c_str());
  ASSERT_GE(fd, 0);
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(fd, &info, &len), 0);
  // Keys nothing configures: family 0, VNI 1..max_entries.
  std::vector<uint8_t> key(info.key_size, 0), value(info.value_size, 0);
  for (uint32_t i = 1; i <= info.max_entries; ++i) {
    std::memcpy(key.data() + info.key_size - 4, &i, 4);
    ASSERT_EQ(bpf_map_update_elem(fd, key.data(), value.data(), BPF_ANY), 0) << i;
  }
  close(fd);
  ASSERT_EQ(map_entries("rg_decap"), info.max_entries);

  std::string one = write_file("one.toml", R"(
interfaces = ["veth0"]
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 4791
routes = ["203.0.113.0/24"]
)");
  Result r = rg("attach --config " + one);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(map_entries("rg_decap"), 1u);
  EXPECT_EQ(map_entries("rg_route4"), 1u);
}

// Two instances (two pin paths) on one interface: the second refuses to
// take the first one's hooks, and detach with the second pin path leaves
// the first one's programs alone.
TEST_F(LoaderNetns, TwoPinPathsRefuseEachOther) {
  Daemon d = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  std::vector<int> before = hook_ids();
  ASSERT_EQ(before.size(), 2u);
  const std::string other = " --pin-path " + other_pin();
  // The timeout only ends a second run that wrongly started.
  Result r = sh(in_a("timeout 60 " + std::string(RG_BIN) + " run --interface veth0 --metrics-listen 127.0.0.1:9742" +
                     other));
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("another roceguard"), std::string::npos) << r.out;
  r = sh(in_a(std::string(RG_BIN) + " attach --interface veth0" + other));
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("another roceguard"), std::string::npos) << r.out;
  EXPECT_EQ(hook_ids(), before);
  struct stat sb {};
  EXPECT_NE(stat(other_pin().c_str(), &sb), 0) << "the refused instance pinned nothing";

  r = sh(in_a(std::string(RG_BIN) + " detach --interface veth0" + other));
  EXPECT_EQ(hook_ids(), before) << r.out;
  EXPECT_NE(r.out.find("another roceguard"), std::string::npos) << r.out;
  ASSERT_EQ(send_roce(1, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 2u);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// `run` at boot, before the interface exists: it starts, says it waits,
// reports the interface unattached, and attaches it when it appears; link
// events (rename, MTU change, deletion, a namesake) are followed as they
// come. `attach` still refuses a missing interface
// (MissingInterfaceIsNamedAndNothingAttached).
TEST_F(LoaderNetns, RunWaitsForAnInterfaceThatDoesNotExistYet) {
  auto log_has = [&](const Daemon& d, const std::string& text) {
    bool found = false;
    for (int i = 0; i < 50 && !found; ++i) {
      found = read_log(d).find(text) != std::string::npos;
      if (!found) usleep(200 * 1000);
    }
    return found;
  };
  auto attached = [&](bool want) {
    bool ok = false;
    for (int i = 0; i < 50 && !ok; ++i) {
      Hooks h = hooks("rgwait0");
      ok = want ? h.xdp == std::vector<std::string>{"rg_xdp_ingress"} && h.tc == std::vector<std::string>{"rg_tc_egress"}
                : sh(in_a("ip link show dev rgwait0")).rc != 0;
      if (!ok) usleep(200 * 1000);
    }
    return ok;
  };
  auto metric = [&](const std::string& series) {
    Result m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
    return m.out.find(series) != std::string::npos;
  };
  const std::string unattached = "roceguard_attached{interface=\"rgwait0\",hook=\"xdp_ingress\"} 0";
  const std::string attached_series = "roceguard_attached{interface=\"rgwait0\",hook=\"xdp_ingress\"} 1";

  Daemon d = start_run("--interface rgwait0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  EXPECT_EQ(kill(d.pid, 0), 0) << "run waits instead of exiting:\n" << read_log(d);
  EXPECT_NE(read_log(d).find("interface rgwait0 does not exist yet"), std::string::npos) << read_log(d);
  EXPECT_TRUE(metric(unattached));

  must("ip -n " + ns_a_ + " link add rgwait0 type veth peer name rgwait1");
  must("ip -n " + ns_a_ + " link set rgwait0 up");
  ASSERT_TRUE(attached(true)) << read_log(d);
  EXPECT_TRUE(log_has(d, "attached to rgwait0")) << read_log(d);
  EXPECT_TRUE(metric(attached_series));
  json st = status();
  ASSERT_EQ(st["interfaces"].size(), 1u) << st.dump();
  EXPECT_EQ(st["interfaces"][0]["name"], "rgwait0");
  EXPECT_EQ(st["interfaces"][0]["ifindex"], ifindex_a("rgwait0"));
  EXPECT_EQ(st["interfaces"][0]["xdp"]["attached"], true);

  must("ip -n " + ns_a_ + " link set rgwait0 mtu 1400");
  EXPECT_TRUE(log_has(d, "interface rgwait0 MTU changed from 1500 to 1400")) << read_log(d);

  must("ip -n " + ns_a_ + " link set rgwait0 down");
  must("ip -n " + ns_a_ + " link set rgwait0 name rgwaitx");
  EXPECT_TRUE(log_has(d, "interface rgwait0 (ifindex " + std::to_string(ifindex_a("rgwaitx")) +
                             ") was renamed to rgwaitx")) << read_log(d);
  EXPECT_TRUE(log_has(d, "interface rgwait0 disappeared")) << read_log(d);
  must("ip -n " + ns_a_ + " link set rgwaitx name rgwait0");
  must("ip -n " + ns_a_ + " link set rgwait0 up");
  EXPECT_TRUE(log_has(d, "interface rgwait0 is back")) << read_log(d);
  EXPECT_TRUE(attached(true)) << read_log(d);
  EXPECT_TRUE(metric(attached_series)) << read_log(d);

  must("ip -n " + ns_a_ + " link del rgwait0");
  ASSERT_TRUE(attached(false));
  for (int i = 0; i < 50 && !metric(unattached); ++i) usleep(200 * 1000);
  EXPECT_TRUE(metric(unattached)) << read_log(d);
  must("ip -n " + ns_a_ + " link add rgwait0 type veth peer name rgwait1");
  must("ip -n " + ns_a_ + " link set rgwait0 up");
  EXPECT_TRUE(attached(true)) << read_log(d);
  EXPECT_TRUE(log_has(d, "re-attached to rgwait0")) << read_log(d);
  EXPECT_EQ(kill(d.pid, 0), 0);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// With one interface there and one not, run attaches the one, records the
// other as not present (status) and unattached (metrics).
TEST_F(LoaderNetns, RunRecordsTheInterfaceItWaitsFor) {
  Daemon d = start_run("--interface veth0 --interface rgwait0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"});
  json st = status(5);
  ASSERT_EQ(st["interfaces"].size(), 2u) << st.dump();
  EXPECT_EQ(st["healthy"], false);
  EXPECT_EQ(st["problems"], json::array({"rgwait0: configured but not present"}));
  EXPECT_EQ(st["interfaces"][1]["name"], "rgwait0");
  EXPECT_EQ(st["interfaces"][1]["present"], false);
  EXPECT_EQ(st["interfaces"][1]["xdp"]["attached"], false);
  Result m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
  EXPECT_NE(m.out.find("roceguard_attached{interface=\"rgwait0\",hook=\"tc_egress\"} 0"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("roceguard_attached{interface=\"veth0\",hook=\"tc_egress\"} 1"), std::string::npos) << m.out;
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// Started through `ip netns exec`, run has a mount namespace of its own
// with no bpffs; the one it mounts there dies with it, and so do the pins:
// it says so in the log and in /metrics. Through nsenter (the host's
// mounts) it does not.
TEST_F(LoaderNetns, RunWarnsWhenItsPinsDieWithIt) {
  Daemon priv = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741", true);
  ASSERT_NE(wait_notify(priv, "READY=1"), "") << read_log(priv);
  EXPECT_NE(read_log(priv).find("PINS DO NOT SURVIVE THIS PROCESS"), std::string::npos) << read_log(priv);
  Result m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
  EXPECT_NE(m.out.find("roceguard_pins_persistent 0"), std::string::npos) << m.out;
  EXPECT_FALSE(pins_exist()) << "the pins are not on the host's bpffs";
  kill(priv.pid, SIGTERM);
  EXPECT_EQ(wait_exit(priv), 0) << read_log(priv);
  // Its programs stay on veth0 with their maps pinned nowhere: no pin path
  // owns them, so detach leaves them alone and the next run takes them over
  // only with --force.
  rg("detach --interface veth0");

  Daemon host = start_run("--interface veth0 --metrics-listen 127.0.0.1:9741 --force");
  ASSERT_NE(wait_notify(host, "READY=1"), "") << read_log(host);
  EXPECT_EQ(read_log(host).find("PINS DO NOT SURVIVE"), std::string::npos) << read_log(host);
  m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
  EXPECT_NE(m.out.find("roceguard_pins_persistent 1"), std::string::npos) << m.out;
  EXPECT_EQ(status()["pins_outlive_process"], true);
  kill(host.pid, SIGTERM);
  EXPECT_EQ(wait_exit(host), 0) << read_log(host);
}

TEST_F(LoaderNetns, MissingInterfaceIsNamedAndNothingAttached) {
  Result r = rg("attach --interface veth0 --interface rgld-absent0");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_NE(r.out.find("interface rgld-absent0 does not exist"), std::string::npos) << r.out;
  Hooks h = hooks();
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty());
  EXPECT_FALSE(pins_exist());
}

// The unit's CapabilityBoundingSet is what `attach` needs, measured: the
// full cycle works with exactly that set and fails without CAP_SYS_ADMIN.
std::string unit_capabilities() {
  std::ifstream in(RG_UNIT);
  std::string line;
  const std::string key = "CapabilityBoundingSet=";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return line.substr(key.size());
  return "";
}

std::string setpriv_caps(const std::string& unit_caps, const std::string& drop = "") {
  std::istringstream in(unit_caps);
  std::string caps = "-all";
  for (std::string c; in >> c;) {
    if (c == drop) continue;
    std::string name = c.substr(4);  // CAP_NET_ADMIN -> net_admin
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    caps += ",+" + name;
  }
  return "setpriv --bounding-set=" + caps + " --inh-caps=-all ";
}

TEST_F(LoaderNetns, UnitCapabilitiesAreEnoughAndNeeded) {
  std::string caps = unit_capabilities();
  ASSERT_NE(caps.find("CAP_SYS_ADMIN"), std::string::npos) << caps;
  std::string bin = std::string(RG_BIN);
  Result r = sh(in_a(setpriv_caps(caps) + bin + " attach --interface veth0 --pin-path " + pin_));
  ASSERT_EQ(r.rc, 0) << caps << ":\n" << r.out;
  EXPECT_EQ(sh(in_a(setpriv_caps(caps) + bin + " status --pin-path " + pin_)).rc, 0);
  EXPECT_EQ(sh(in_a(setpriv_caps(caps) + bin + " stats --pin-path " + pin_)).rc, 0);
  r = sh(in_a(setpriv_caps(caps) + bin + " detach --pin-path " + pin_));
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("removed XDP program rg_xdp_ingress"), std::string::npos) << r.out;
  EXPECT_TRUE(hooks().xdp.empty());

  r = sh(in_a(setpriv_caps(caps, "CAP_SYS_ADMIN") + bin + " attach --interface veth0 --pin-path " + pin_));
  EXPECT_NE(r.rc, 0) << r.out;
  Hooks h = hooks();
  EXPECT_TRUE(h.tc.empty() && h.xdp.empty()) << "refused without CAP_SYS_ADMIN, and nothing left behind";
  EXPECT_FALSE(pins_exist());
}

// status is a health check: 0 while both hooks are in place, 5 naming what
// is missing once one is gone, 3 when nothing is attached; with --json the
// last is an error object on stdout.
TEST_F(LoaderNetns, StatusExitCodeTellsHealth) {
  ASSERT_EQ(rg("attach --interface veth0").rc, 0);
  json st = status(0);
  EXPECT_EQ(st["healthy"], true);
  EXPECT_EQ(st["problems"], json::array());
  must(in_a("tc filter del dev veth0 egress pref 82 handle 0x52 bpf"));
  st = status(5);
  EXPECT_EQ(st["healthy"], false);
  EXPECT_EQ(st["problems"], json::array({"veth0: TC egress program not attached"}));
  Result text = rg("status");
  EXPECT_EQ(text.rc, 5);
  EXPECT_NE(text.out.find("UNHEALTHY"), std::string::npos) << text.out;
  ASSERT_EQ(rg("detach").rc, 0);
  Result r = rg_stdout("status --json");
  EXPECT_EQ(r.rc, 3);
  json err = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(err.is_object()) << r.out;
  EXPECT_EQ(err["error"]["exit_code"], 3);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("not attached"), std::string::npos) << r.out;
}

// Every command answers --json with JSON on stdout, failures included.
TEST_F(LoaderNetns, JsonOnEveryCommandErrorsIncluded) {
  Result r = rg_stdout("attach --interface veth0 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["interfaces"][0]["name"], "veth0");
  EXPECT_GT(j["interfaces"][0]["tc"]["prog_id"].get<int>(), 0);

  r = rg_stdout("attach --interface nosuch0 --json");
  EXPECT_EQ(r.rc, 3);
  j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["error"]["exit_code"], 3);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("nosuch0"), std::string::npos) << r.out;

  r = rg_stdout("status --json --no-such-flag");
  EXPECT_EQ(r.rc, 2);
  j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["error"]["exit_code"], 2);

  for (const auto& f : bad_configs()) {
    r = sh("(" + in_a(std::string(RG_BIN) + " config check --json " + f) + " 2>/dev/null)");
    EXPECT_EQ(r.rc, 2) << f;
    j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << f << ":\n" << r.out;
    EXPECT_EQ(j["ok"], false) << f;
    EXPECT_EQ(j["error"]["exit_code"], 2) << f;
    std::string all;
    for (const auto& p : j["problems"]) all += p.get<std::string>() + "\n";
    for (const auto& w : j["warnings"]) all += w.get<std::string>() + "\n";
    EXPECT_NE(all.find(expected_of(f)), std::string::npos) << f << ":\n" << r.out;
  }

  r = rg_stdout("detach --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["pins_removed"], true);
  EXPECT_EQ(j["programs_removed"], 2);
}

// The global -j and -p, before or after the subcommand, on every command
// that prints data: -j is one line of JSON, -p several lines of the same
// value; a command's own spelling (`status --json`) is the same flag.
TEST_F(LoaderNetns, GlobalJsonAndPrettyOnEveryCommand) {
  ASSERT_EQ(rg_stdout("attach --interface veth0").rc, 0);
  const std::string pin = " --pin-path " + pin_;
  const std::string config = " " + std::string(RG_DEFAULT_CONFIG);
  // Whether two runs print the same value: attach loads new programs, and
  // status, stats and doctor read counters, map fill and link state the
  // kernel changes between two runs (a veth's own IPv6 traffic); their
  // runs are held to the same keys.
  struct Command {
    std::string cmd, args;
    bool same_value;
  };
  const std::vector<Command> commands = {
      {"status", pin, false},
      {"stats", pin, false},
      {"stats", " --qp" + pin, false},
      {"config check", " --offline" + config, true},
      {"config check", " --offline --print" + config, true},
      {"config options", "", true},
      {"nic show", "", true},
      {"nic env", "", true},
      {"doctor", " -i veth0" + pin, false},
      {"version", "", true},
      {"attach", " --interface veth0" + pin, false},
  };
  auto out_of = [&](const std::string& args) {
    return sh("(" + in_a(std::string(RG_BIN) + " " + args) + " 2>/dev/null)").out;
  };
  auto one_line = [](const std::string& out) {
    return !out.empty() && out.back() == '\n' && out.find('\n') == out.size() - 1;
  };
  auto keys = [](const json& j) {
    std::vector<std::string> out;
    if (j.is_object())
      for (const auto& [k, v] : j.items()) out.push_back(k);
    return out;
  };
  for (const auto& [cmd, args, same_value] : commands) {
    const std::string before = out_of("-j " + cmd + args), after = out_of(cmd + args + " -j"),
                      long_form = out_of(cmd + args + " --json"), pretty = out_of(cmd + args + " -p"),
                      pretty_first = out_of("--pretty " + cmd + args);
    const json j = json::parse(before, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << cmd << args << ":\n" << before;
    EXPECT_TRUE(j.is_object()) << cmd << args << ":\n" << before;
    EXPECT_FALSE(keys(j).empty()) << cmd << args << ":\n" << before;
    EXPECT_TRUE(one_line(before)) << cmd << args << ":\n" << before;
    EXPECT_TRUE(one_line(after)) << cmd << args << ":\n" << after;
    EXPECT_GT(std::count(pretty.begin(), pretty.end(), '\n'), 1) << cmd << args << ":\n" << pretty;
    for (const auto& other : {after, long_form, pretty, pretty_first}) {
      const json o = json::parse(other, nullptr, false);
      ASSERT_FALSE(o.is_discarded()) << cmd << args << ":\n" << other;
      if (same_value) EXPECT_EQ(o, j) << cmd << args << ":\n" << other;
      else EXPECT_EQ(keys(o), keys(j)) << cmd << args << ":\n" << other;
    }
  }
  // --version stands alone and takes them too.
  const std::string v = out_of("--version -j");
  EXPECT_TRUE(one_line(v)) << v;
  EXPECT_EQ(json::parse(v, nullptr, false), json::parse(out_of("version -j"), nullptr, false)) << v;
  EXPECT_EQ(json::parse(out_of("-p --version"), nullptr, false), json::parse(v, nullptr, false));
  // Errors too: one line with -j, the same object with -p.
  const std::string e = out_of("-j status --pin-path " + tmp_ + "/nothing-here");
  EXPECT_TRUE(one_line(e)) << e;
  const json ej = json::parse(e, nullptr, false);
  EXPECT_EQ(ej["error"]["exit_code"], 3) << e;
  EXPECT_EQ(json::parse(out_of("status -p --pin-path " + tmp_ + "/nothing-here"), nullptr, false), ej);
  // Detach last: what it removed, as one line.
  const std::string d = out_of("detach -j" + pin);
  EXPECT_TRUE(one_line(d)) << d;
  EXPECT_EQ(json::parse(d, nullptr, false)["pins_removed"], true) << d;
}

// The log's format and level reach a real attach: JSON lines on stderr,
// info dropped at --log-level warn.
TEST_F(LoaderNetns, LogFormatAndLevelApplyToCommands) {
  Result r = sh("(" + in_a(std::string(RG_BIN) + " attach --interface veth0 --pin-path " + pin_ +
                           " --log-format json") + " 2>&1 >/dev/null)");
  ASSERT_EQ(r.rc, 0) << r.out;
  bool attached_line = false;
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    json j = json::parse(l, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a JSON line: " << l;
    attached_line |= j["level"] == "info" && j["message"].get<std::string>().rfind("attached to veth0", 0) == 0;
  }
  EXPECT_TRUE(attached_line) << r.out;
  r = sh("(" + in_a(std::string(RG_BIN) + " attach --interface veth0 --pin-path " + pin_ + " --log-level warn") +
         " 2>&1 >/dev/null)");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("attached to veth0"), std::string::npos) << r.out;
}

// A JSON log line about one interface carries it as a field of its own:
// the attach of each, under attach and under run, and run's re-attach.
TEST_F(LoaderNetns, JsonLogLinesNameTheirInterface) {
  create_second_veth();
  Result r = sh("(" + in_a(std::string(RG_BIN) + " attach -i veth0 -i vx0 --pin-path " + pin_ +
                           " --log-format json") + " 2>&1 >/dev/null)");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::map<std::string, std::string> attached;  // interface field -> message
  std::istringstream lines(r.out);
  for (std::string l; std::getline(lines, l);) {
    json j = json::parse(l, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a JSON line: " << l;
    const std::string msg = j.value("message", "");
    if (msg.rfind("attached to ", 0) == 0) attached[j.value("interface", "")] = msg;
  }
  ASSERT_EQ(attached.size(), 2u) << r.out;
  EXPECT_EQ(attached["veth0"].rfind("attached to veth0 ", 0), 0u) << r.out;
  EXPECT_EQ(attached["vx0"].rfind("attached to vx0 ", 0), 0u) << r.out;

  Daemon d = start_run("-i veth0 --metrics-listen 127.0.0.1:9741 --log-format json");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  must(in_a("tc filter del dev veth0 egress pref 82 handle 0x52 bpf"));  // run puts it back
  bool reattached = false;
  for (int i = 0; i < 100 && !reattached; ++i) {
    std::istringstream log(read_log(d));
    for (std::string l; std::getline(log, l);) {
      json j = json::parse(l, nullptr, false);
      reattached |= j.is_object() && j.value("message", "").rfind("re-attached to veth0", 0) == 0 &&
                    j.value("interface", "") == "veth0";
    }
    if (!reattached) usleep(100 * 1000);
  }
  EXPECT_TRUE(reattached) << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// A JSON log line about one tunnel peer carries it as a field too: the
// interface whose MTU is below the peer's tunnel MTU, under run.
TEST_F(LoaderNetns, JsonLogLinesNameTheirPeer) {
  const std::string file = write_file("peer-log.toml", R"(
interfaces = ["veth0"]
[tunnel]
mtu = 9000
[[tunnel.peer]]
name = "west"
local = "198.51.100.1"
remote = "198.51.100.2"
vni = 4791
routes = ["203.0.113.0/24"]
)");
  Daemon d = start_run("--config " + file + " --metrics-listen 127.0.0.1:9741 --log-format json");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  json line;
  for (int i = 0; i < 100 && line.is_null(); ++i) {
    std::istringstream log(read_log(d));
    for (std::string l; std::getline(log, l);) {
      json j = json::parse(l, nullptr, false);
      if (j.is_object() && j.value("message", "").find("below the tunnel MTU 9000 of peer west") != std::string::npos)
        line = j;
    }
    if (line.is_null()) usleep(100 * 1000);
  }
  ASSERT_FALSE(line.is_null()) << read_log(d);
  EXPECT_EQ(line.value("interface", ""), "veth0") << line.dump();
  EXPECT_EQ(line.value("peer", ""), "west") << line.dump();
  EXPECT_EQ(line.value("level", ""), "warning") << line.dump();
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// SIGTERM in the middle of attach (one interface done, the next not yet):
// attach completes, both interfaces end up with both programs.
TEST_F(LoaderNetns, SigtermInsideAttachLeavesItWhole) {
  create_second_veth();
  Result r = signal_at_pause_point("attach -i veth0 -i vx0", "attach-between-interfaces");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* dev : {"veth0", "vx0"}) {
    Hooks h = hooks(dev);
    EXPECT_EQ(h.xdp, std::vector<std::string>{"rg_xdp_ingress"}) << dev << "\n" << r.out;
    EXPECT_EQ(h.tc, std::vector<std::string>{"rg_tc_egress"}) << dev << "\n" << r.out;
  }
  EXPECT_EQ(status(0)["interfaces"].size(), 2u);
}

// SIGTERM in the middle of detach: both interfaces end up bare and the pins
// gone, not one interface attached with its record lost.
TEST_F(LoaderNetns, SigtermInsideDetachLeavesNothingHalfDone) {
  create_second_veth();
  ASSERT_EQ(rg("attach -i veth0 -i vx0").rc, 0);
  Result r = signal_at_pause_point("detach", "detach-between-interfaces");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* dev : {"veth0", "vx0"}) {
    Hooks h = hooks(dev);
    EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << dev << "\n" << r.out;
  }
  EXPECT_FALSE(pins_exist()) << r.out;
}

// The packaged unit runs as its own user, so its pin directory is not
// root's: root's `detach` accepts it where only root can have handed it
// over (a parent directory no one else may write), and still refuses it
// below a directory anyone may write to.
TEST_F(LoaderNetns, RootAcceptsAPinDirectoryDelegatedByRoot) {
  const std::string parent = "/sys/fs/bpf/" + tag_ + "-svc";
  struct Cleanup {
    std::string dir;
    ~Cleanup() { sh("rm -rf " + dir); }
  } cleanup{parent};
  const std::string pins = parent + "/pins";
  must("mkdir -m 0755 " + parent);
  auto rg_at = [&](const std::string& args) {
    return sh(in_a(std::string(RG_BIN) + " " + args + " --pin-path " + pins));
  };
  ASSERT_EQ(rg_at("attach --interface veth0").rc, 0);
  must("chown -R 65534:65534 " + pins);
  Result r = rg_at("detach");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(hooks().xdp.empty() && hooks().tc.empty()) << r.out;

  ASSERT_EQ(rg_at("attach --interface veth0").rc, 0);
  must("chown -R 65534:65534 " + pins);
  must("chmod 1777 " + parent);
  r = rg_at("detach");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("is owned by uid 65534"), std::string::npos) << r.out;
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"}) << "refused before touching anything";
  must("chown -R 0:0 " + pins);
  EXPECT_EQ(rg_at("detach").rc, 0);
}

// Exporter-only mode: run attaches nothing, pins nothing and still serves
// /metrics; attach refuses the setting.
TEST_F(LoaderNetns, RunWithoutDataplaneOnlyExports) {
  Daemon d = start_run("--interface veth0 --dataplane false --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  Hooks h = hooks();
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty());
  EXPECT_FALSE(pins_exist());
  Result m = sh(in_a("curl -sf http://127.0.0.1:9741/metrics"));
  EXPECT_EQ(m.rc, 0) << m.out;
  EXPECT_NE(m.out.find("roceguard_build_info"), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("roceguard_maps_up 0"), std::string::npos) << m.out;
  EXPECT_EQ(read_log(d).find("metrics:"), std::string::npos) << "no map warnings:\n" << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
  Result r = rg("attach --interface veth0 --dataplane false");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(hooks().tc.empty());
}

// doctor on a host (namespace A) as it is, then with forwarding on and a
// jumbo MTU: each finding follows the change.
TEST_F(LoaderNetns, DoctorFollowsForwardingAndMtu) {
  must(in_a("sysctl -qw net.ipv4.conf.all.forwarding=0 net.ipv4.conf.veth0.forwarding=0"));
  auto doctor = [&](const std::string& args) {
    Result r = sh("(" + in_a(std::string(RG_BIN) + " doctor --json " + args) + " 2>/dev/null)");
    json j = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.out;
    EXPECT_EQ(j.value("exit_code", -1), r.rc) << r.out;
    return j;
  };
  auto find = [](const json& j, const std::string& check, const std::string& subject) {
    for (const auto& f : j["findings"])
      if (f["check"] == check && f["subject"] == subject) return f;
    return json();
  };
  json j = doctor("-i veth0");
  json fwd = find(j, "interface.forwarding", "veth0");
  ASSERT_TRUE(fwd.is_object()) << j.dump(2);
  EXPECT_NE(fwd["what"].get<std::string>().find("net.ipv4.conf.veth0.forwarding = 0"), std::string::npos) << fwd;
  EXPECT_NE(fwd["verdict"], "ok") << fwd;
  json xdp = find(j, "interface.xdp", "veth0");
  EXPECT_EQ(xdp["verdict"], "ok") << j.dump(2);
  EXPECT_NE(xdp["what"].get<std::string>().find("driver veth, MTU 1500: native XDP"), std::string::npos) << xdp;
  EXPECT_TRUE(find(j, "interface.xdp", "vx0").is_null()) << "only the interfaces asked for";
  json lo = find(j, "forwarding.ipv4", "lo");
  ASSERT_TRUE(lo.is_object()) << j.dump(2);
  EXPECT_NE(lo["what"].get<std::string>().find("net.ipv4.conf.lo.forwarding = 0"), std::string::npos) << lo;

  must(in_a("sysctl -qw net.ipv4.conf.all.forwarding=1 net.ipv6.conf.all.forwarding=1"));
  create_jumbo_veth();
  j = doctor("");
  fwd = find(j, "interface.forwarding", "veth0");
  EXPECT_EQ(fwd["verdict"], "ok") << fwd;
  lo = find(j, "forwarding.ipv4", "lo");
  EXPECT_EQ(lo["verdict"], "ok") << lo;
  const bool multi_buffer = find(j, "kernel.xdp_multi_buffer", "")["verdict"] == "ok";
  json big = find(j, "interface.xdp", "vbig0");
  ASSERT_TRUE(big.is_object()) << "every interface but lo without a list:\n" << j.dump(2);
  EXPECT_EQ(big["verdict"], multi_buffer ? "ok" : "fail") << big;
  EXPECT_NE(big["what"].get<std::string>().find("MTU 9000"), std::string::npos) << big;
  EXPECT_EQ(j["exit_code"], multi_buffer ? 0 : 5) << j.dump(2);
  // The finding agrees with the kernel: native XDP at MTU 9000 attaches only
  // where the kernel has multi-buffer XDP (asked for: auto would take TC
  // ingress on a veth, as the doctor says).
  json ingress = find(j, "interface.ingress", "vbig0");
  EXPECT_NE(ingress["what"].get<std::string>().find("TC ingress (ingress_hook auto)"), std::string::npos) << ingress;
  Result attach = rg("attach -i vbig0 --ingress-hook xdp");
  EXPECT_EQ(attach.rc == 0, multi_buffer) << attach.out;
}

// doctor in a mount namespace without bpffs, with a private one, and on
// the host's.
TEST_F(LoaderNetns, DoctorTellsWhereBpffsIs) {
  auto bpffs = [&](const std::string& prepare) {
    const std::string cmd = "unshare -m --propagation private sh -c '" + prepare + std::string(RG_BIN) +
                            " doctor --json -i veth0 --pin-path " + pin_ + "'";
    Result r = sh("(" + in_a(cmd) + " 2>/dev/null)");
    json j = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.out;
    for (const auto& f : j.value("findings", json::array()))
      if (f["check"] == "bpffs") return f;
    return json();
  };
  json f = bpffs("");
  EXPECT_EQ(f["verdict"], "ok") << f;
  f = bpffs("umount -R -l /sys/fs/bpf && ");
  EXPECT_EQ(f["verdict"], "warn") << f;
  EXPECT_NE(f["what"].get<std::string>().find("no bpffs is mounted"), std::string::npos) << f;
  EXPECT_NE(f["fix"].get<std::string>().find("mount -t bpf"), std::string::npos) << f;
  f = bpffs("umount -R -l /sys/fs/bpf && mount -t bpf bpf /sys/fs/bpf && ");
  EXPECT_EQ(f["verdict"], "fail") << f;
  EXPECT_NE(f["what"].get<std::string>().find("private"), std::string::npos) << f;
}

// What each lifecycle case below checks: a pin path's programs are found
// wherever they run in the namespace, whatever the record says about them.

// kill -9 of run in the middle of its first attach: veth0 has the programs,
// vx0 not yet. The record said what run set out to do before it touched
// veth0, so status reports both; detach removes veth0's programs with the
// pins, and a later attach finds nothing in its way.
TEST_F(LoaderNetns, KilledFirstRunLeavesNothingDetachCannotFind) {
  create_second_veth();
  Result r = signal_at_pause_point("run -i veth0 -i vx0 --metrics-listen 127.0.0.1:9741",
                                   "attach-between-interfaces", SIGKILL);
  EXPECT_EQ(r.rc, 128 + SIGKILL) << r.out;
  ASSERT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"}) << r.out;
  json st = status(5);
  EXPECT_EQ(st.value("interfaces", json::array()).size(), 2u) << st.dump();
  if (st.value("interfaces", json::array()).size() == 2u) {
    EXPECT_EQ(st["interfaces"][0]["tc"]["attached"], true) << st.dump();
    EXPECT_EQ(st["interfaces"][1]["tc"]["attached"], false) << st.dump();
  }
  Result d = rg("detach");
  EXPECT_EQ(d.rc, 0) << d.out;
  Hooks h = hooks();
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << d.out;
  EXPECT_FALSE(pins_exist()) << d.out;
  Result a = rg("attach -i veth0");
  EXPECT_EQ(a.rc, 0) << a.out;
}

// --reset-state drops the record with the maps, but the interfaces the old
// record had are still roceguard's: one no longer configured loses its
// programs as with any re-attach, and detach finds nothing left anywhere.
TEST_F(LoaderNetns, ResetStateTakesAlongTheInterfacesTheOldRecordHad) {
  create_second_veth();
  ASSERT_EQ(rg("attach -i veth0 -i vx0").rc, 0);
  Result r = rg("attach -i veth0 --reset-state");
  ASSERT_EQ(r.rc, 0) << r.out;
  Hooks h = hooks("vx0");
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << "vx0 is no longer configured\n" << r.out;
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"});
  Result d = rg("detach");
  ASSERT_EQ(d.rc, 0) << d.out;
  EXPECT_TRUE(hook_ids("vx0").empty()) << d.out;
  EXPECT_TRUE(hook_ids().empty()) << d.out;
}

// A refused --reset-state resets nothing: the programs attached before
// keep counting into maps that stay pinned.
TEST_F(LoaderNetns, RefusedResetStateResetsNothing) {
  create_second_veth();
  ASSERT_EQ(rg("attach -i veth0").rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  ASSERT_EQ(attach_foreign(false, 0x52, 0x52, "vx0"), 0);
  Result r = rg("attach -i veth0 -i vx0 --reset-state");
  EXPECT_EQ(r.rc, 4) << r.out;
  ASSERT_EQ(send_roce(4, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 5u) << r.out;
  EXPECT_EQ(status()["interfaces"].size(), 1u);
}

// Renamed after the attach: detach finds the programs on the interface
// under its new name, named or not on the command line by its old one.
TEST_F(LoaderNetns, DetachFindsARenamedInterface) {
  create_second_veth();
  auto rename = [&](const std::string& from, const std::string& to) {
    must(in_a("ip link set " + from + " down"));
    must(in_a("ip link set " + from + " name " + to));
  };
  ASSERT_EQ(rg("attach -i veth0 -i vx0").rc, 0);
  rename("vx0", "vx0x");
  Result r = rg("detach -i vx0");
  EXPECT_EQ(r.rc, 0) << r.out;
  Hooks h = hooks("vx0x");
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << r.out;
  EXPECT_NE(r.out.find("vx0x"), std::string::npos) << r.out;
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"}) << "veth0 was not named:\n" << r.out;

  rename("vx0x", "vx0");
  ASSERT_EQ(rg("attach -i veth0 -i vx0").rc, 0);
  rename("vx0", "vx0x");
  r = rg("detach");
  EXPECT_EQ(r.rc, 0) << r.out;
  h = hooks("vx0x");
  EXPECT_TRUE(h.xdp.empty() && h.tc.empty()) << r.out;
  EXPECT_TRUE(hook_ids().empty()) << r.out;
  EXPECT_FALSE(pins_exist()) << r.out;
}

// Under run, an interface renamed away is no longer the configured one: a
// namesake that appears is attached, and the renamed one lets go of the
// programs rather than keep ones no record knows.
TEST_F(LoaderNetns, RunLetsGoOfAnInterfaceRenamedAway) {
  create_second_veth();
  Daemon d = start_run("-i veth0 -i vx0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  ASSERT_EQ(hooks("vx0").tc, std::vector<std::string>{"rg_tc_egress"}) << read_log(d);
  must(in_a("ip link set vx0 down"));
  must(in_a("ip link set vx0 name vx0x"));
  must("ip -n " + ns_a_ + " link add vx0 type veth peer name vx2 netns " + ns_b_);
  must(in_a("ip link set vx0 up"));
  bool settled = false;
  for (int i = 0; i < 50 && !settled; ++i) {
    Hooks now = hooks("vx0"), renamed = hooks("vx0x");
    settled = now.tc == std::vector<std::string>{"rg_tc_egress"} && renamed.tc.empty() && renamed.xdp.empty();
    if (!settled) usleep(200 * 1000);
  }
  EXPECT_TRUE(settled) << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
  Result r = rg("detach");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(hook_ids("vx0x").empty()) << r.out;
  EXPECT_TRUE(hook_ids("vx0").empty()) << r.out;
}

// Pins an rg_state this roceguard did not write in place of the record.
void plant_record(const std::string& pin, bpf_map_type type, uint32_t key_size, uint32_t value_size) {
  const std::string path = pin + "/rg_state";
  unlink(path.c_str());
  int fd = bpf_map_create(type, "rg_state", key_size, value_size, 1, nullptr);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(bpf_obj_pin(fd, path.c_str()), 0) << strerror(errno);
  close(fd);
}

// A record roceguard cannot read (another value size, another key size)
// does not lock roceguard out of its own programs: detach of the interface
// removes them, found by their maps, and refuses only to remove the pins it
// cannot account for; attach --reset-state, the way out the refusal names,
// then replaces them.
TEST_F(LoaderNetns, UnreadableRecordDoesNotBlockDetach) {
  ASSERT_EQ(rg("attach -i veth0").rc, 0);
  plant_record(pin_, BPF_MAP_TYPE_ARRAY, 4, 65536);
  Result r = rg("detach --interface veth0");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("--reset-state"), std::string::npos) << r.out;
  EXPECT_TRUE(hook_ids().empty()) << r.out;
  r = rg("attach -i veth0 --reset-state");
  EXPECT_EQ(r.rc, 0) << r.out;
  Hooks h = hooks();
  EXPECT_EQ(h.xdp, std::vector<std::string>{"rg_xdp_ingress"}) << r.out;
  EXPECT_EQ(h.tc, std::vector<std::string>{"rg_tc_egress"}) << r.out;
  EXPECT_EQ(status()["interfaces"].size(), 1u);
}

// ... and attach --reset-state, the way out its refusal names, replaces the
// record and takes the programs over, with either ingress hook and either
// kind of record.
TEST_F(LoaderNetns, UnreadableRecordIsReplacedByResetState) {
  struct Planted {
    bpf_map_type type;
    uint32_t key_size, value_size;
  };
  for (const char* ingress : {"xdp", "tc"})
    for (const Planted& p : {Planted{BPF_MAP_TYPE_ARRAY, 4, 65536}, Planted{BPF_MAP_TYPE_HASH, 8, 16384}}) {
      SCOPED_TRACE(std::string(ingress) + " ingress, record key_size " + std::to_string(p.key_size) +
                   " value_size " + std::to_string(p.value_size));
      const std::string hook = std::string(" --ingress-hook ") + ingress;
      ASSERT_EQ(rg("attach -i veth0" + hook).rc, 0);
      plant_record(pin_, p.type, p.key_size, p.value_size);
      Result r = rg("attach -i veth0 --reset-state" + hook);
      EXPECT_EQ(r.rc, 0) << r.out;
      Hooks h = hooks();
      EXPECT_EQ(h.tc, std::vector<std::string>{"rg_tc_egress"}) << r.out;
      EXPECT_EQ(status()["interfaces"].size(), 1u);
      ASSERT_EQ(rg("detach").rc, 0);
    }
}

// An upgrade refused on its second interface (a foreign filter there)
// leaves the earlier build exactly as it was: its counters stay pinned and
// keep counting. The upgrade that then succeeds carries every count over.
TEST_F(LoaderNetns, RefusedUpgradeLeavesTheEarlierBuildCounting) {
  create_second_veth();
  ASSERT_EQ(attach_earlier_build("veth0"), 0);
  ASSERT_EQ(send_roce(1, 100), 0);
  ASSERT_EQ(pinned_roce_packets(), 100u);
  ASSERT_EQ(attach_foreign(false, 0x52, 0x52, "vx0"), 0);
  Result r = rg("attach -i veth0 -i vx0");
  EXPECT_EQ(r.rc, 4) << r.out;
  ASSERT_EQ(send_roce(101, 1000), 0);
  EXPECT_EQ(pinned_roce_packets(), 1100u) << "the pinned counters are the ones counting:\n" << r.out;

  must(in_a("tc filter del dev vx0 egress pref 82 handle 0x52 bpf"));
  r = rg("attach -i veth0 -i vx0");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(counter("roce_packets"), 1100u) << r.out;
  ASSERT_EQ(send_roce(1101, 5), 0);
  EXPECT_EQ(counter("roce_packets"), 1105u);
}

// The earlier build goes on counting while the upgrade loads and attaches
// (here: veth0 waits while vx0 is attached first): what it counts after
// the counters were carried over is carried too.
TEST_F(LoaderNetns, UpgradeCarriesWhatTheEarlierBuildCountedDuringIt) {
  create_second_veth();
  ASSERT_EQ(attach_earlier_build("veth0"), 0);
  ASSERT_EQ(send_roce(1, 10), 0);
  const std::string at = "attach-between-interfaces";
  const std::string mark = tmp_ + "/paused-" + at;
  const std::string log = tmp_ + "/pausable.log";
  pid_t pid = spawn(RG_PAUSABLE, "attach -i vx0 -i veth0 --pin-path " + pin_,
                    {"ROCEGUARD_PAUSE_AT=" + at, "ROCEGUARD_PAUSE_MARK=" + mark}, log);
  struct stat st {};
  bool paused = false;
  for (int i = 0; i < 600 && !paused; ++i) {
    paused = stat(mark.c_str(), &st) == 0;
    if (!paused) usleep(50 * 1000);
  }
  EXPECT_TRUE(paused) << "never reached " << at;
  ASSERT_EQ(send_roce(11, 20), 0);
  EXPECT_EQ(wait_child(pid), 0);
  std::ifstream in(log);
  const std::string out(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"}) << out;
  EXPECT_EQ(counter("roce_packets"), 30u) << out;
  ASSERT_EQ(send_roce(31, 5), 0);
  EXPECT_EQ(counter("roce_packets"), 35u) << out;
}

// run whose first attach fails (native XDP refused) keeps retrying, and
// keeps the pin path locked meanwhile: a second roceguard is refused.
TEST_F(LoaderNetns, FailedFirstAttachUnderRunKeepsThePinLock) {
  Daemon d = start_run("--interface vbig0 --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  create_xdp_refusing_veth();
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i) {
    failed = read_log(d).find("cannot attach") != std::string::npos;
    if (!failed) usleep(200 * 1000);
  }
  ASSERT_TRUE(failed) << read_log(d);
  Result r = rg("attach --interface veth0");
  EXPECT_EQ(r.rc, 4) << r.out;
  EXPECT_NE(r.out.find("another roceguard is managing"), std::string::npos) << r.out;
  EXPECT_TRUE(hook_ids().empty()) << r.out;
  EXPECT_EQ(kill(d.pid, 0), 0) << "run keeps retrying:\n" << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
  EXPECT_FALSE(pins_exist()) << "run leaves no empty pin directory behind";
}

// Another tool's TC program ahead of roceguard's on egress that returns
// TC_ACT_OK ends the packet's path there: roceguard stays attached and
// never sees the packet. status and doctor name the program, whether it is
// a clsact filter at a lower priority number or (Linux 6.6+) a tcx program.
TEST_F(LoaderNetns, StatusAndDoctorNameAProgramAheadThatEndsThePath) {
  ASSERT_EQ(rg("attach -i veth0").rc, 0);
  auto ahead_of = [&](const json& st) {
    std::vector<std::string> out;
    for (const auto& a : st["interfaces"][0].value("ahead", json::array()))
      out.push_back(a.value("where", "") + " " + a.value("name", ""));
    return out;
  };
  auto doctor_says = [&] {
    Result r = sh("(" + in_a(std::string(RG_BIN) + " doctor --json -i veth0 --pin-path " + pin_) + " 2>/dev/null)");
    json j = json::parse(r.out, nullptr, false);
    std::string what;
    for (const auto& f : j.value("findings", json::array()))
      if (f.value("check", "") == "interface.tc_ahead" && f.value("verdict", "") == "warn") what += f.value("what", "");
    return what;
  };
  EXPECT_TRUE(ahead_of(status()).empty());
  EXPECT_EQ(doctor_says(), "");

  // clsact, priority 1: it runs before roceguard's filter at 82.
  int rc = in_netns(ns_a_, [&] {
    bpf_object* obj = bpf_object__open_file(RG_FOREIGN_OBJ, nullptr);
    if (!obj || bpf_object__load(obj)) return 1;
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = static_cast<int>(if_nametoindex("veth0")), .attach_point = BPF_TC_EGRESS);
    LIBBPF_OPTS(bpf_tc_opts, o, .prog_fd = bpf_program__fd(bpf_object__find_program_by_name(obj, "foreign_tc_ok")),
                .handle = 1, .priority = 1);
    return bpf_tc_attach(&hook, &o) ? 2 : 0;
  });
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 0u) << "the filter ahead ends the path";
  EXPECT_EQ(ahead_of(status()), std::vector<std::string>{"clsact priority 1 handle 0x1 foreign_tc_ok"});
  EXPECT_NE(doctor_says().find("foreign_tc_ok"), std::string::npos);
  must(in_a("tc filter del dev veth0 egress pref 1 handle 1 bpf"));

  // tcx, where the kernel has it (BPF_TCX_EGRESS = 47 in Linux 6.6's uapi):
  // a link, pinned so that it outlives the helper process.
  const std::string link_pin = pin_ + "-tcx";
  rc = in_netns(ns_a_, [&] {
    bpf_object* obj = bpf_object__open_file(RG_FOREIGN_OBJ, nullptr);
    if (!obj || bpf_object__load(obj)) return 1;
    int link = bpf_link_create(bpf_program__fd(bpf_object__find_program_by_name(obj, "foreign_tc_ok")),
                               static_cast<int>(if_nametoindex("veth0")), static_cast<bpf_attach_type>(47), nullptr);
    if (link < 0) return 3;
    return bpf_obj_pin(link, link_pin.c_str()) ? 2 : 0;
  });
  if (rc == 3) GTEST_SKIP() << "no tcx in this kernel";
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(send_roce(4, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 0u) << "the tcx program ahead ends the path";
  EXPECT_EQ(ahead_of(status()), std::vector<std::string>{"tcx foreign_tc_ok"});
  EXPECT_NE(doctor_says().find("foreign_tc_ok"), std::string::npos);
  unlink(link_pin.c_str());
}

// tcx (Linux 6.6+): roceguard's TC egress program is a link placed first on
// the hook, so another tool's tcx program that returns TC_ACT_OK behind it
// cannot switch roceguard off; one attached later in front of it is named
// by status and doctor. Detach takes roceguard's link and its pin, and
// nothing else.
TEST_F(LoaderNetns, TcxLinkRunsAheadOfAForeignProgramThatReturnsOk) {
  if (tcx_names() == std::vector<std::string>{"?"}) GTEST_SKIP() << "no tcx in this kernel";
  Result r = rg("attach -i veth0 --tc-attach tcx");
  ASSERT_EQ(r.rc, 0) << r.out;
  json st = status();
  EXPECT_EQ(st["interfaces"][0]["tc"].value("attach", ""), "tcx") << st.dump();
  EXPECT_TRUE(st["interfaces"][0]["tc"].value("attached", false)) << st.dump();
  EXPECT_TRUE(hooks().tc.empty()) << "no clsact filter beside the link";
  EXPECT_EQ(tcx_names(), std::vector<std::string>{"rg_tc_egress"});
  struct stat pin {};
  EXPECT_EQ(stat((pin_ + "/tcx_egress_" + std::to_string(ifindex_a())).c_str(), &pin), 0) << "the link is pinned";

  // Another tool attaches behind roceguard and lets every packet go.
  ASSERT_EQ(attach_foreign_tcx(pin_ + "-tcx-after", false), 0);
  EXPECT_EQ(tcx_names(), (std::vector<std::string>{"rg_tc_egress", "foreign_tc_ok"}));
  ASSERT_EQ(send_roce(1, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 3u) << "roceguard runs first and still sees RoCE";
  st = status();
  EXPECT_TRUE(st["interfaces"][0].value("ahead", json::array()).empty()) << st.dump();

  // One attached in front of roceguard's link is ahead, and said to be.
  ASSERT_EQ(attach_foreign_tcx(pin_ + "-tcx-before", true), 0);
  EXPECT_EQ(tcx_names(), (std::vector<std::string>{"foreign_tc_ok", "rg_tc_egress", "foreign_tc_ok"}));
  st = status();
  std::vector<std::string> ahead;
  for (const auto& a : st["interfaces"][0].value("ahead", json::array()))
    ahead.push_back(a.value("where", "") + " " + a.value("name", ""));
  EXPECT_EQ(ahead, std::vector<std::string>{"tcx foreign_tc_ok"}) << st.dump();
  Result doc = sh("(" + in_a(std::string(RG_BIN) + " doctor --json -i veth0 --pin-path " + pin_) + " 2>/dev/null)");
  json dj = json::parse(doc.out, nullptr, false);
  std::string warned;
  for (const auto& f : dj.value("findings", json::array()))
    if (f.value("check", "") == "interface.tc_ahead" && f.value("verdict", "") == "warn") warned += f.value("what", "");
  EXPECT_NE(warned.find("foreign_tc_ok"), std::string::npos) << doc.out;
  ASSERT_EQ(send_roce(4, 3), 0);
  EXPECT_EQ(counter("roce_packets"), 3u) << "the program in front ends the path";
  // An attach over it keeps the link's place behind the program in front,
  // and says so.
  r = rg("attach -i veth0 --tc-attach tcx");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("veth0: foreign_tc_ok (id"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("runs ahead of roceguard on TC egress"), std::string::npos) << r.out;
  EXPECT_EQ(tcx_names(), (std::vector<std::string>{"foreign_tc_ok", "rg_tc_egress", "foreign_tc_ok"}));

  r = rg("detach");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(tcx_names(), (std::vector<std::string>{"foreign_tc_ok", "foreign_tc_ok"})) << r.out;
  EXPECT_FALSE(pins_exist()) << "no link pin keeps the pin directory";
}

// An interface deleted and created again gets another ifindex: its old
// tcx link pins name a link that runs nowhere. The next attach, and run's
// re-attach, remove them; the new interface's links are pinned.
TEST_F(LoaderNetns, TcxLinkPinsOfARecreatedInterfaceAreRemoved) {
  if (tcx_names() == std::vector<std::string>{"?"}) GTEST_SKIP() << "no tcx in this kernel";
  create_second_veth();
  auto recreate = [&] {
    const int before = ifindex_a("vx0");
    must(in_a("ip link del vx0"));
    create_second_veth();
    EXPECT_NE(ifindex_a("vx0"), before);
    return before;
  };
  auto link_pins = [&] {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(pin_, ec))
      if (e.path().filename().string().rfind("tcx_", 0) == 0) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  auto pins_of = [](int ifindex) {
    return std::vector<std::string>{"tcx_egress_" + std::to_string(ifindex),
                                    "tcx_ingress_" + std::to_string(ifindex)};
  };
  auto expected = [&](std::vector<int> ifindexes) {
    std::vector<std::string> out;
    for (int i : ifindexes)
      for (const auto& p : pins_of(i)) out.push_back(p);
    std::sort(out.begin(), out.end());
    return out;
  };
  const std::string args = "-i veth0 -i vx0 --tc-attach tcx --ingress-hook tc";
  ASSERT_EQ(rg("attach " + args).rc, 0);
  EXPECT_EQ(link_pins(), expected({ifindex_a(), ifindex_a("vx0")}));
  recreate();
  Result r = rg("attach " + args);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(link_pins(), expected({ifindex_a(), ifindex_a("vx0")})) << r.out;
  EXPECT_EQ(tcx_names("vx0"), std::vector<std::string>{"rg_tc_egress"}) << r.out;

  Daemon d = start_run(args + " --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  recreate();
  bool settled = false;
  for (int i = 0; i < 50 && !settled; ++i) {
    settled = link_pins() == expected({ifindex_a(), ifindex_a("vx0")});
    if (!settled) usleep(200 * 1000);
  }
  EXPECT_TRUE(settled) << ::testing::PrintToString(link_pins()) << "\n" << read_log(d);
  EXPECT_EQ(tcx_names("vx0"), std::vector<std::string>{"rg_tc_egress"}) << read_log(d);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
  r = rg("detach");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(pins_exist()) << r.out;
}

// The program id in the tcx link pinned for dev's egress; 0 without one.
uint32_t linked_prog(const std::string& pin, int ifindex) {
  int fd = bpf_obj_get((pin + "/tcx_egress_" + std::to_string(ifindex)).c_str());
  if (fd < 0) return 0;
  bpf_link_info info{};
  uint32_t len = sizeof(info);
  const int rc = bpf_obj_get_info_by_fd(fd, &info, &len);
  close(fd);
  return rc == 0 ? info.prog_id : 0;
}

// On tcx, a re-attach that fails late (vbig0 refuses native XDP after veth0
// took the new programs) puts the previous program back into veth0's link:
// the same id runs, still counting, and vbig0 keeps no link.
TEST_F(LoaderNetns, FailedReattachOnTcxPutsTheLinksProgramBack) {
  if (tcx_names() == std::vector<std::string>{"?"}) GTEST_SKIP() << "no tcx in this kernel";
  create_xdp_refusing_veth();
  ASSERT_EQ(rg("attach -i veth0 --tc-attach tcx").rc, 0);
  ASSERT_EQ(send_roce(1, 3), 0);
  const uint32_t before = linked_prog(pin_, ifindex_a());
  ASSERT_NE(before, 0u);
  const json st_before = status();

  Result r = rg("attach -i veth0 -i vbig0 --tc-attach tcx");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("vbig0"), std::string::npos) << r.out;
  EXPECT_EQ(linked_prog(pin_, ifindex_a()), before) << r.out;
  EXPECT_EQ(tcx_names(), std::vector<std::string>{"rg_tc_egress"}) << r.out;
  EXPECT_TRUE(tcx_names("vbig0").empty()) << r.out;
  EXPECT_EQ(linked_prog(pin_, ifindex_a("vbig0")), 0u) << r.out;
  EXPECT_EQ(status()["interfaces"], st_before["interfaces"]);
  ASSERT_EQ(send_roce(4, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 5u) << "the restored program still counts";
}

// run on tcx puts back a link someone detached (bpftool link detach): the
// defunct link's pin gives way to a new link, first on the hook again.
TEST_F(LoaderNetns, RunPutsBackATcxLinkDetachedBehindItsBack) {
  if (tcx_names() == std::vector<std::string>{"?"}) GTEST_SKIP() << "no tcx in this kernel";
  Daemon d = start_run("--interface veth0 --tc-attach tcx --metrics-listen 127.0.0.1:9741");
  ASSERT_NE(wait_notify(d, "READY=1"), "") << read_log(d);
  const uint32_t first = linked_prog(pin_, ifindex_a());
  ASSERT_NE(first, 0u) << read_log(d);
  must("bpftool link detach pinned " + pin_ + "/tcx_egress_" + std::to_string(ifindex_a()));
  EXPECT_TRUE(tcx_names().empty());
  bool back = false;
  for (int i = 0; i < 50 && !back; ++i) {
    back = tcx_names() == std::vector<std::string>{"rg_tc_egress"};
    if (!back) usleep(200 * 1000);
  }
  EXPECT_TRUE(back) << read_log(d);
  EXPECT_NE(linked_prog(pin_, ifindex_a()), 0u) << "the new link is pinned where the old one was";
  EXPECT_NE(read_log(d).find("re-attached to veth0"), std::string::npos) << read_log(d);
  ASSERT_EQ(send_roce(1, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 2u);
  kill(d.pid, SIGTERM);
  EXPECT_EQ(wait_exit(d), 0) << read_log(d);
}

// An attach over a tcx attach gives the pinned links the new programs in
// place: one roceguard program per hook, always. Switching between tcx and
// clsact moves the programs and leaves none behind the other way.
TEST_F(LoaderNetns, TcxReattachKeepsOneProgramPerHook) {
  if (tcx_names() == std::vector<std::string>{"?"}) GTEST_SKIP() << "no tcx in this kernel";
  Result r = rg("attach -i veth0 --tc-attach tcx --ingress-hook tc");
  ASSERT_EQ(r.rc, 0) << r.out;
  const uint32_t first = status()["interfaces"][0]["tc"].value("prog_id", 0u);
  r = rg("attach -i veth0 --tc-attach tcx --ingress-hook tc");
  ASSERT_EQ(r.rc, 0) << r.out;
  json st = status();
  EXPECT_NE(st["interfaces"][0]["tc"].value("prog_id", 0u), first) << "the upgrade's program runs";
  EXPECT_EQ(tcx_names(), std::vector<std::string>{"rg_tc_egress"}) << r.out;
  EXPECT_EQ(tcx_names("veth0", false), std::vector<std::string>{"rg_tc_ingress"}) << r.out;
  EXPECT_EQ(st["interfaces"][0]["tc_ingress"].value("attach", ""), "tcx") << st.dump();
  EXPECT_TRUE(st["interfaces"][0]["tc_ingress"].value("attached", false)) << st.dump();
  ASSERT_EQ(send_roce(1, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 2u);

  // To clsact and back.
  r = rg("attach -i veth0 --tc-attach clsact --ingress-hook tc");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(tcx_names().empty()) << r.out;
  EXPECT_TRUE(tcx_names("veth0", false).empty()) << r.out;
  EXPECT_EQ(hooks().tc, std::vector<std::string>{"rg_tc_egress"});
  EXPECT_EQ(hooks().tc_ingress, std::vector<std::string>{"rg_tc_ingress"});
  EXPECT_EQ(status()["interfaces"][0]["tc"].value("attach", ""), "clsact");
  r = rg("attach -i veth0 --tc-attach tcx --ingress-hook tc");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(hooks().tc.empty()) << r.out;
  EXPECT_TRUE(hooks().tc_ingress.empty()) << r.out;
  EXPECT_EQ(tcx_names(), std::vector<std::string>{"rg_tc_egress"}) << r.out;
  EXPECT_EQ(tcx_names("veth0", false), std::vector<std::string>{"rg_tc_ingress"}) << r.out;
  ASSERT_EQ(send_roce(3, 2), 0);
  EXPECT_EQ(counter("roce_packets"), 4u);

  r = rg("detach");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(tcx_names().empty()) << r.out;
  EXPECT_TRUE(tcx_names("veth0", false).empty()) << r.out;
  EXPECT_FALSE(pins_exist());
}

}  // namespace
