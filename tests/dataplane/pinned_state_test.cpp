// What roceguard reads back from its pin path when that state is not what
// it wrote: maps of another type or size, an attach record of another
// layout or shape, a counter map left by a build with fewer events, a
// counter map full of interfaces that are gone, and QP tables churned while
// they are walked. Every map here is created by the test in
// a private bpffs directory of its own, removed even when a case fails; no
// packet is sent.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/config_check.h"
#include "common/error.h"
#include "config/config.h"
#include "dataplane/bpf_object.h"
#include "dataplane/map_writer.h"
#include "dataplane/maps.h"
#include "dataplane/state.h"
#include "metrics/presentation.h"
#include "roceguard.skel.h"

namespace {

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

int create_map(bpf_map_type type, uint32_t key_size, uint32_t value_size, uint32_t max_entries,
               const char* name = "rg_test", uint32_t map_flags = 0) {
  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = map_flags);
  return bpf_map_create(type, name, key_size, value_size, max_entries, &opts);
}

// A per-QP slot table of this build (rg_qp4 or rg_qp6, by family) sized
// for entries QP directions, as the object creates it.
int create_slot_table(int family, uint32_t entries, const char* name = "rg_test") {
  return create_map(BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), family == AF_INET ? sizeof(rg_qp4_slot) : sizeof(rg_qp6_slot),
                    rg_qp_slots(entries), name, BPF_F_MMAPABLE);
}

// A CLOCK_MONOTONIC time as a slot keeps it: to the slot clock's resolution.
uint64_t on_slot_clock(uint64_t ns) { return ns >> RG_QP_CLOCK_SHIFT << RG_QP_CLOCK_SHIFT; }

class PinnedState : public ::testing::Test {
 protected:
  void SetUp() override {
    static int seq = 0;
    ASSERT_EQ(system("mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf"), 0);
    pin_ = "/sys/fs/bpf/rgst-" + std::to_string(getpid()) + "-" + std::to_string(seq++);
    ASSERT_EQ(mkdir(pin_.c_str(), 0700), 0) << pin_ << ": " << strerror(errno);
  }

  void TearDown() override {
    for (int fd : fds_) close(fd);
    sh("rm -rf " + pin_);
  }

  // Creates a map and pins it as <pin>/<name>; the fd stays open.
  int pin(const std::string& name, bpf_map_type type, uint32_t key_size, uint32_t value_size,
          uint32_t max_entries, uint32_t map_flags = 0) {
    int fd = create_map(type, key_size, value_size, max_entries, name.c_str(), map_flags);
    EXPECT_GE(fd, 0) << name << ": " << strerror(errno);
    if (fd < 0) return fd;
    fds_.push_back(fd);
    EXPECT_EQ(bpf_obj_pin(fd, (pin_ + "/" + name).c_str()), 0) << name << ": " << strerror(errno);
    return fd;
  }

  int pin_counters(uint32_t value_size = sizeof(rg_counters)) {
    return pin(rg::kMapCounters, BPF_MAP_TYPE_PERCPU_HASH, sizeof(rg_counter_key), value_size,
               RG_MAX_COUNTER_KEYS);
  }
  // rg_qp4 and rg_qp6 as this build pins them: slot tables for 1024 QP
  // directions.
  int pin_qp4() {
    return pin(rg::kMapQp4, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp4_slot), rg_qp_slots(1024),
               BPF_F_MMAPABLE);
  }
  int pin_qp6() {
    return pin(rg::kMapQp6, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp6_slot), rg_qp_slots(1024),
               BPF_F_MMAPABLE);
  }
  void pin_qp() {
    pin_qp4();
    pin_qp6();
  }

  // rg_state holding text, in the layout roceguard writes.
  void pin_record(const std::string& text) {
    int fd = pin(rg::kMapState, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), rg::kStateValueSize, 1);
    std::string value(rg::kStateValueSize, '\0');
    std::memcpy(value.data(), text.data(), text.size());
    uint32_t key = 0;
    ASSERT_EQ(bpf_map_update_elem(fd, &key, value.data(), BPF_ANY), 0) << strerror(errno);
  }

  Result rg(const std::string& args) { return sh(std::string(RG_BIN) + " " + args + " --pin-path " + pin_); }

  std::string pin_;
  std::vector<int> fds_;
};

// The message of the rg::Error fn throws, or "" when it throws none.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const rg::Error& e) {
    return e.what();
  }
  return "";
}

// --- Maps of another layout are refused by name, never read ---------------

TEST_F(PinnedState, CounterMapOfAnotherTypeIsRefusedByName) {
  pin(rg::kMapCounters, BPF_MAP_TYPE_HASH, sizeof(rg_counter_key), sizeof(rg_counters), RG_MAX_COUNTER_KEYS);
  pin_qp();
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find(rg::kMapCounters), std::string::npos) << msg;
  EXPECT_NE(msg.find("type hash, expected percpu_hash"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--reset-state"), std::string::npos) << msg;

  Result r = rg("stats --json");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapCounters), std::string::npos) << r.out;
}

// rg_qp4 a hash of another key and value (the slot table is an array of
// 64-byte slots by a 4-byte index): every difference is named.
TEST_F(PinnedState, QpMapOfAnotherKeyOrValueSizeIsRefusedByName) {
  pin_counters();
  pin(rg::kMapQp4, BPF_MAP_TYPE_HASH, sizeof(rg_qp4_key) + 8, 65536, 1024);
  pin_qp6();
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find(rg::kMapQp4), std::string::npos) << msg;
  EXPECT_NE(msg.find("type hash, expected array"), std::string::npos) << msg;
  EXPECT_NE(msg.find("key_size 24, expected 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("value_size 65536, expected 64"), std::string::npos) << msg;

  Result r = rg("stats --qp");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapQp4), std::string::npos) << r.out;
}

TEST_F(PinnedState, Ipv6QpMapOfAnotherValueSizeIsRefusedByName) {
  pin_counters();
  pin_qp4();
  pin(rg::kMapQp6, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp6_slot) + 8, rg_qp_slots(1024),
      BPF_F_MMAPABLE);
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find(rg::kMapQp6), std::string::npos) << msg;
  EXPECT_NE(msg.find("value_size 136, expected 128"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("type "), std::string::npos) << "the type is right: " << msg;

  Result r = rg("stats --qp");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapQp6), std::string::npos) << r.out;
}

// An array of the slots' sizes that the reader cannot map as a slot table
// (not BPF_F_MMAPABLE, or slots in no whole buckets) is refused by name too,
// never read.
TEST_F(PinnedState, QpArrayThatIsNoSlotTableIsRefusedByName) {
  pin_counters();
  pin(rg::kMapQp4, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp4_slot), rg_qp_slots(1024));
  pin_qp6();
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find(rg::kMapQp4), std::string::npos) << msg;
  EXPECT_NE(msg.find("no per-QP slot table"), std::string::npos) << msg;
  Result r = rg("stats --qp");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapQp4), std::string::npos) << r.out;

  const int odd = create_map(BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(rg_qp6_slot), rg_qp_slots(1024) + 1,
                             "rg_qp6", BPF_F_MMAPABLE);
  ASSERT_GE(odd, 0) << strerror(errno);
  fds_.push_back(odd);
  msg = error_of([&] { rg::QpSlotTable t(odd, AF_INET6); });
  EXPECT_NE(msg.find(rg::kMapQp6), std::string::npos) << msg;
  EXPECT_NE(msg.find("no per-QP slot table"), std::string::npos) << msg;
}

// Mappings of BPF maps in this process (/proc/self/maps names them).
static int bpf_map_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("bpf-map") != std::string::npos;
  return n;
}

// A reader maps the QP tables (megabytes at scale) only when it reads QPs:
// the daemon's shield reads peers every second, and the lab reads counters
// several times a second, through readers that never look at a QP. And the
// entries of a QP table are its occupied slots, not its capacity.
TEST_F(PinnedState, ReaderMapsTheQpTablesOnlyToReadQps) {
  pin_counters();
  const int qp4 = pin_qp4();
  pin_qp6();
  {
    rg::QpSlotTable table(qp4, AF_INET, true);
    for (uint32_t i = 1; i <= 3; ++i) {
      rg_qp_key k{};
      k.family = AF_INET;
      inet_pton(AF_INET, "192.0.2.1", k.src);
      inet_pton(AF_INET, "192.0.2.2", k.dst);
      k.dest_qp = i;
      rg_qp_dir v{};
      v.packets = i;
      ASSERT_TRUE(table.place(k, RG_DIR_EGRESS, v, rg::qp_clock_now()));
    }
  }
  const int before = bpf_map_mappings();
  rg::MapReader reader(pin_);
  reader.counters();
  reader.peer_stats();
  EXPECT_EQ(bpf_map_mappings(), before) << "a reader of counters and peers mapped a QP table";
  EXPECT_EQ(reader.usage(qp4, rg::kMapQp4).entries, 3u);
  EXPECT_EQ(reader.qps().size(), 3u);
  EXPECT_EQ(bpf_map_mappings(), before + 2) << "reading QPs maps each QP table once";
  reader.qps();
  EXPECT_EQ(bpf_map_mappings(), before + 2) << "and keeps its mappings";
}

// A counter value longer than this build's (a later build with more events)
// cannot be read into this build's rows.
TEST_F(PinnedState, LongerCounterValueIsRefused) {
  pin_counters(sizeof(rg_counters) + 4 * sizeof(rg_counter));
  pin_qp();
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find("value_size"), std::string::npos) << msg;
}

// The other pinned maps are checked before status counts their entries.
TEST_F(PinnedState, PeerMapOfAnotherValueSizeIsRefusedByStatus) {
  pin_counters();
  pin_qp();
  pin(rg::kMapPeers, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), 65536, RG_MAX_PEERS);
  pin_record(R"({"layout":2,"version":"0","interfaces":[]})");
  Result r = rg("status --json");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapPeers), std::string::npos) << r.out;
}

// --- The attach record -----------------------------------------------------

// Status and detach read the record first: a 64 KiB value read into a
// 16 KiB buffer corrupted the heap.
TEST_F(PinnedState, RecordMapOfAnotherSizeIsRefusedByStatusAndDetach) {
  pin_counters();
  pin_qp();
  pin(rg::kMapState, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), 65536, 1);
  std::string msg = error_of([&] { rg::read_state(pin_); });
  EXPECT_NE(msg.find(rg::kMapState), std::string::npos) << msg;
  EXPECT_NE(msg.find("value_size 65536, expected 16384"), std::string::npos) << msg;
  EXPECT_EQ(rg::state_map_mismatch(pin_), "value_size 65536, expected 16384");

  for (const char* cmd : {"status", "status --json", "detach"}) {
    Result r = rg(cmd);
    EXPECT_EQ(r.rc, rg::kExitConflict) << cmd << ":\n" << r.out;
    EXPECT_NE(r.out.find(rg::kMapState), std::string::npos) << cmd << ":\n" << r.out;
    EXPECT_NE(r.out.find("--reset-state"), std::string::npos) << cmd << ":\n" << r.out;
  }
}

TEST_F(PinnedState, RecordWithAFieldOfTheWrongTypeNamesTheField) {
  pin_counters();
  pin_qp();
  pin_record(R"({"version":"0","interfaces":[{"name":5,"ifindex":"x"}]})");
  for (const char* cmd : {"status", "detach"}) {
    Result r = rg(cmd);
    EXPECT_EQ(r.rc, rg::kExitConflict) << cmd << ":\n" << r.out;
    EXPECT_NE(r.out.find("record.interfaces[0].name is number"), std::string::npos) << cmd << ":\n" << r.out;
    EXPECT_NE(r.out.find("--reset-state"), std::string::npos) << cmd << ":\n" << r.out;
    EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << cmd << ":\n" << r.out;
  }
}

TEST_F(PinnedState, RecordThatIsNotJsonIsRefused) {
  pin_record("{\"version\": ");
  std::string msg = error_of([&] { rg::read_state(pin_); });
  EXPECT_NE(msg.find("is not JSON"), std::string::npos) << msg;
}

// A record from before the layout was versioned, without the fields added
// since, is read with their defaults.
TEST_F(PinnedState, OlderRecordIsReadWithDefaults) {
  pin_record(R"({"version":"0.1","config_hash":"abc","interfaces":[{"name":"eth9","ifindex":7}]})");
  auto st = rg::read_state(pin_);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->layout, 1);
  EXPECT_EQ(st->version, "0.1");
  ASSERT_EQ(st->interfaces.size(), 1u);
  EXPECT_EQ(st->interfaces[0].name, "eth9");
  EXPECT_EQ(st->interfaces[0].ifindex, 7);
  EXPECT_EQ(st->interfaces[0].tc_handle, 0u);
  EXPECT_TRUE(st->config.is_object());

  // Written back in this build's layout.
  rg::write_state(pin_, *st);
  auto again = rg::read_state(pin_);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->layout, rg::kStateLayout);
  EXPECT_EQ(again->interfaces[0].name, "eth9");
}

TEST_F(PinnedState, RecordOfALaterLayoutIsRefused) {
  pin_record(R"({"layout":99,"version":"9.0","interfaces":[]})");
  std::string msg = error_of([&] { rg::read_state(pin_); });
  EXPECT_NE(msg.find("layout 99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--reset-state"), std::string::npos) << msg;
}

TEST_F(PinnedState, WriteRefusesARecordMapOfAnotherSize) {
  pin(rg::kMapState, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), 65536, 1);
  std::string msg = error_of([&] { rg::write_state(pin_, rg::State{}); });
  EXPECT_NE(msg.find(rg::kMapState), std::string::npos) << msg;
}

// --- Counters across an upgrade that adds events ---------------------------

TEST_F(PinnedState, ShorterCounterValueIsMigratedKeepingEveryCount) {
  const uint32_t old_events = RG_EV_MAX - 2;
  const uint32_t old_size = old_events * sizeof(rg_counter);
  int fd = pin_counters(old_size);
  pin_qp();
  const int ncpu = libbpf_num_possible_cpus();
  ASSERT_GT(ncpu, 0);
  // Event e on CPU c of interface i counts 1000*i + 10*e + c packets.
  for (uint32_t ifindex = 1; ifindex <= 3; ++ifindex) {
    std::vector<rg_counter> value(static_cast<size_t>(ncpu) * old_events);
    for (int c = 0; c < ncpu; ++c)
      for (uint32_t e = 0; e < old_events; ++e)
        value[static_cast<size_t>(c) * old_events + e] = {1000ull * ifindex + 10 * e + c, 64};
    rg_counter_key key{ifindex, RG_DIR_EGRESS};
    ASSERT_EQ(bpf_map_update_elem(fd, &key, value.data(), BPF_NOEXIST), 0) << strerror(errno);
  }
  const uint64_t cpu_sum = static_cast<uint64_t>(ncpu) * (ncpu - 1) / 2;

  // The old, shorter value is readable as it is: the new events read zero.
  auto before = rg::MapReader(pin_).counters();
  ASSERT_EQ(before.size(), 3u);

  ASSERT_TRUE(rg::migrate_counters(pin_, sizeof(rg_counters)));
  rg::MapUsage u = rg::map_info(fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapCounters).c_str())),
                                rg::kMapCounters);
  EXPECT_EQ(u.value_size, sizeof(rg_counters));
  EXPECT_EQ(u.max_entries, static_cast<uint32_t>(RG_MAX_COUNTER_KEYS));

  auto after = rg::MapReader(pin_).counters();
  ASSERT_EQ(after.size(), 3u);
  for (const auto& row : after) {
    for (uint32_t e = 0; e < old_events; ++e) {
      EXPECT_EQ(row.ev[e].packets, ncpu * (1000ull * row.ifindex + 10 * e) + cpu_sum) << row.ifindex << " " << e;
      EXPECT_EQ(row.ev[e].bytes, 64ull * ncpu);
    }
    for (uint32_t e = old_events; e < RG_EV_MAX; ++e) EXPECT_EQ(row.ev[e].packets, 0u);
  }
  for (const auto& row : before) {
    for (const auto& a : after) {
      if (a.ifindex != row.ifindex) continue;
      for (uint32_t e = 0; e < RG_EV_MAX; ++e) EXPECT_EQ(a.ev[e].packets, row.ev[e].packets);
    }
  }
  // Nothing is left beside it.
  struct stat st {};
  EXPECT_NE(stat((pin_ + "/" + rg::kMapCounters + "_migrating").c_str(), &st), 0);
  // The same length again is nothing to migrate.
  EXPECT_FALSE(rg::migrate_counters(pin_, sizeof(rg_counters)));
}

// --- QPs across the upgrade to per-family, per-direction tables ------------

using rg::LegacyQpDir;
using rg::LegacyQpState;

// The earlier build's key of IPv4 QP dest_qp from 192.0.2.1 to dst.
rg_qp_key legacy_qp4(uint32_t dest_qp, const char* dst) {
  rg_qp_key k{};
  k.family = AF_INET;
  inet_pton(AF_INET, "192.0.2.1", k.src);
  inet_pton(AF_INET, dst, k.dst);
  k.dest_qp = dest_qp;
  return k;
}

TEST_F(PinnedState, LegacyQpTableIsCarriedIntoThePerFamilyTables) {
  pin_counters();
  int legacy = pin(rg::kMapQpLegacy, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp_key), sizeof(LegacyQpState), 4096);
  // An IPv4 QP seen both ways, and an IPv6 one seen only leaving.
  const rg_qp_key k4 = legacy_qp4(0x11, "198.51.100.2");
  LegacyQpState v4{};
  v4.dir[RG_DIR_EGRESS] = {100, 102400, 3, 2, 7, 1, 0, 4, 5, 6, 0x123456, RG_QP_F_SEEN};
  v4.dir[RG_DIR_INGRESS] = {50, 51200, 1, (1ull << 33) + 5, 9, 0, 2, 0, 0, 8, 0x654321, RG_QP_F_SEEN};
  v4.last_seen_ns = 777'123'456'789ull;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k4, &v4, BPF_NOEXIST), 0) << strerror(errno);
  rg_qp_key k6{};
  k6.family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", k6.src);
  inet_pton(AF_INET6, "2001:db8::2", k6.dst);
  k6.dest_qp = 0x22;
  LegacyQpState v6{};
  v6.dir[RG_DIR_EGRESS] = {10, 10240, 0, 0, 0, 0, 0, 0, 0, 0, 9, RG_QP_F_SEEN};
  v6.last_seen_ns = 888'987'654'321ull;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k6, &v6, BPF_NOEXIST), 0) << strerror(errno);

  auto carried = rg::migrate_qp_table(pin_, 2048);
  ASSERT_TRUE(carried);
  EXPECT_EQ(carried->carried(), 3u);  // the IPv6 QP's ingress was never seen
  // Until the attach completes the earlier build keeps its table.
  struct stat st {};
  EXPECT_EQ(stat((pin_ + "/" + rg::kMapQpLegacy).c_str(), &st), 0);
  for (const char* name : {rg::kMapQp4, rg::kMapQp6}) {
    rg::MapUsage u = rg::map_info(fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str())), name);
    EXPECT_EQ(u.max_entries, rg_qp_slots(2048)) << name << ": slot tables for 2048 QP directions";
    EXPECT_EQ(u.max_entries, 3072u) << name;
    EXPECT_EQ(u.value_size, name == std::string(rg::kMapQp4) ? sizeof(rg_qp4_slot) : sizeof(rg_qp6_slot)) << name;
    EXPECT_NE(stat((pin_ + "/" + name + "_migrating").c_str(), &st), 0) << name;
  }

  auto rows = rg::MapReader(pin_).qps();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    if (row.key.family == AF_INET) {
      EXPECT_EQ(std::memcmp(&row.key, &k4, sizeof(k4)), 0);
      for (int d = 0; d < RG_DIR_MAX; ++d) {
        const LegacyQpDir& o = v4.dir[d];
        const rg_qp_dir& n = row.state.dir[d];
        EXPECT_EQ(n.packets, o.packets) << d;
        EXPECT_EQ(n.bytes, o.bytes) << d;
        EXPECT_EQ(n.retransmits, o.retransmits) << d;
        EXPECT_EQ(n.lost, o.lost) << d;
        EXPECT_EQ(n.nak_seq_err, o.nak_seq_err) << d;
        EXPECT_EQ(n.nak_other, o.nak_other) << d;
        EXPECT_EQ(n.rnr_nak, o.rnr_nak) << d;
        EXPECT_EQ(n.cnp, o.cnp) << d;
        EXPECT_EQ(n.ecn_ce, o.ecn_ce) << d;
        EXPECT_EQ(n.max_psn, o.max_psn) << d;
        EXPECT_EQ(n.flags, o.flags) << d;
        EXPECT_EQ(row.state.last_seen_ns[d], on_slot_clock(v4.last_seen_ns)) << d << ": to the slot clock's resolution";
      }
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].gaps, 2u);
      EXPECT_EQ(row.state.dir[RG_DIR_INGRESS].gaps, 5u) << "16 bits now: modulo 2^16, as the programs' own adds";
    } else {
      EXPECT_EQ(std::memcmp(&row.key, &k6, sizeof(k6)), 0);
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].packets, 10u);
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].max_psn, 9u);
      EXPECT_EQ(row.state.last_seen_ns[RG_DIR_EGRESS], on_slot_clock(v6.last_seen_ns));
      EXPECT_EQ(row.state.dir[RG_DIR_INGRESS].packets, 0u);
      EXPECT_EQ(row.state.last_seen_ns[RG_DIR_INGRESS], 0u) << "never seen";
    }
  }

  // Again (an upgrade that failed and is retried): the tables are rebuilt
  // from the earlier build's, not added to.
  ASSERT_TRUE(rg::migrate_qp_table(pin_, 2048));
  rows = rg::MapReader(pin_).qps();
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows)
    if (row.key.family == AF_INET) {
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].packets, 100u);
    }

  rg::remove_legacy_qp_table(pin_);
  EXPECT_NE(stat((pin_ + "/" + rg::kMapQpLegacy).c_str(), &st), 0);
  EXPECT_FALSE(rg::migrate_qp_table(pin_, 2048));
  EXPECT_NO_THROW(rg::remove_legacy_qp_table(pin_));
}

// The earlier build's programs go on counting into the old rg_qp until the
// attach takes their hooks: once none runs, what each direction counted
// since the copy is added to the new tables (its PSN tracking is the new
// programs'), and a QP met first after the copy comes whole.
TEST_F(PinnedState, WhatTheEarlierBuildCountsInItsQpTableDuringTheUpgradeIsCarried) {
  pin_counters();
  const int legacy = pin(rg::kMapQpLegacy, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp_key), sizeof(LegacyQpState), 64);
  const rg_qp_key k4 = legacy_qp4(0x11, "192.0.2.2");
  LegacyQpState v4{};
  v4.dir[RG_DIR_EGRESS] = {100, 102400, 3, 0xfffe, 7, 1, 0, 4, 5, 6, 0x123456, RG_QP_F_SEEN};
  v4.last_seen_ns = 777'123'456'789ull;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k4, &v4, BPF_NOEXIST), 0) << strerror(errno);
  auto carried = rg::migrate_qp_table(pin_, 2048);
  ASSERT_TRUE(carried);

  // 10 more packets, 2 more resent, 3 more gaps (past 2^16), a later PSN;
  // and a new QP.
  LegacyQpState later = v4;
  later.dir[RG_DIR_EGRESS].packets += 10;
  later.dir[RG_DIR_EGRESS].bytes += 10240;
  later.dir[RG_DIR_EGRESS].retransmits += 2;
  later.dir[RG_DIR_EGRESS].gaps += 3;
  later.dir[RG_DIR_EGRESS].max_psn = 0x123500;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k4, &later, BPF_EXIST), 0) << strerror(errno);
  const rg_qp_key k_new = legacy_qp4(0x12, "192.0.2.2");
  LegacyQpState v_new{};
  v_new.dir[RG_DIR_INGRESS] = {4, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 77, RG_QP_F_SEEN};
  v_new.last_seen_ns = 999'987'654'321ull;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k_new, &v_new, BPF_NOEXIST), 0) << strerror(errno);
  EXPECT_EQ(carried->carry_since_copy(), 2u);

  std::map<uint32_t, rg::QpRow> rows;
  for (const auto& row : rg::MapReader(pin_).qps()) rows[row.key.dest_qp] = row;
  ASSERT_EQ(rows.size(), 2u);
  const rg_qp_dir& e = rows[0x11].state.dir[RG_DIR_EGRESS];
  EXPECT_EQ(e.packets, 110u);
  EXPECT_EQ(e.bytes, 112640u);
  EXPECT_EQ(e.retransmits, 5u);
  EXPECT_EQ(e.gaps, 1u) << "0xfffe + 3 modulo 2^16";
  EXPECT_EQ(e.lost, 7u);
  EXPECT_EQ(e.max_psn, 0x123456u) << "the tracking is the new programs'";
  const rg_qp_dir& n = rows[0x12].state.dir[RG_DIR_INGRESS];
  EXPECT_EQ(n.packets, 4u);
  EXPECT_EQ(n.max_psn, 77u);
  EXPECT_EQ(rows[0x12].state.last_seen_ns[RG_DIR_INGRESS], on_slot_clock(v_new.last_seen_ns));
}

TEST_F(PinnedState, LegacyQpTableOfAnotherLayoutIsRefusedByName) {
  pin_counters();
  pin(rg::kMapQpLegacy, BPF_MAP_TYPE_HASH, sizeof(rg_qp_key), sizeof(LegacyQpState), 64);
  std::string msg = error_of([&] { rg::migrate_qp_table(pin_, 1024); });
  EXPECT_NE(msg.find(std::string(pin_) + "/" + rg::kMapQpLegacy), std::string::npos) << msg;
  EXPECT_NE(msg.find("--reset-state"), std::string::npos) << msg;
  struct stat st {};
  EXPECT_NE(stat((pin_ + "/" + rg::kMapQp4).c_str(), &st), 0);
}

// --- Tunnel state across the upgrade to the loss shield --------------------

using rg::LegacyPeerStats;
using rg::LegacyTunnelStream;

// Per-CPU values of one key, from an open map.
template <typename T>
std::vector<T> per_cpu(int fd, uint32_t key) {
  const int ncpu = libbpf_num_possible_cpus();
  const size_t stride = (sizeof(T) + 7) & ~size_t{7};
  std::vector<uint8_t> raw(stride * static_cast<size_t>(ncpu));
  std::vector<T> out;
  if (bpf_map_lookup_elem(fd, &key, raw.data()) != 0) return out;
  for (int c = 0; c < ncpu; ++c) {
    T v;
    std::memcpy(&v, raw.data() + stride * static_cast<size_t>(c), sizeof(v));
    out.push_back(v);
  }
  return out;
}

class ShieldUpgrade : public PinnedState {
 protected:
  // rg_peer_stats and rg_tunnel_streams as the build before the shield
  // pinned them, filled: peer slots 1 and 3 counted every event on every
  // CPU (event e on CPU c of slot s: 1000*s + 10*e + c packets, 64*e
  // bytes) and numbered packets; peer 1 sent from CPUs 0 and 2, peer 2
  // from CPU 5. The old streams' lock needs no BTF here: the migration
  // reads the values as bytes.
  void pin_old_tunnel_state() {
    ncpu_ = libbpf_num_possible_cpus();
    ASSERT_GT(ncpu_, 0);
    int stats = pin(rg::kMapPeerStats, BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(LegacyPeerStats),
                    RG_MAX_PEERS);
    const size_t stride = (sizeof(LegacyPeerStats) + 7) & ~size_t{7};
    for (uint32_t slot : {1u, 3u}) {
      std::vector<uint8_t> value(stride * static_cast<size_t>(ncpu_), 0);
      for (int c = 0; c < ncpu_; ++c) {
        LegacyPeerStats v{};
        v.tx_seq = 500 + c;
        for (uint32_t e = 0; e < rg::kLegacyPeerEvents; ++e) v.ev[e] = {1000ull * slot + 10 * e + c, 64ull * e};
        std::memcpy(value.data() + stride * static_cast<size_t>(c), &v, sizeof(v));
      }
      ASSERT_EQ(bpf_map_update_elem(stats, &slot, value.data(), BPF_ANY), 0) << strerror(errno);
    }
    int streams = pin(rg::kMapTunnelStreams, BPF_MAP_TYPE_HASH, sizeof(rg_tunnel_stream_key),
                      sizeof(LegacyTunnelStream), 4096);
    for (auto [peer, cpu] : {std::pair{1u, 0u}, std::pair{1u, 2u}, std::pair{2u, 5u}}) {
      rg_tunnel_stream_key k{peer, cpu};
      ASSERT_EQ(bpf_map_update_elem(streams, &k, &old_stream(peer, cpu), BPF_NOEXIST), 0) << strerror(errno);
    }
  }

  static const LegacyTunnelStream& old_stream(uint32_t peer, uint32_t cpu) {
    static std::map<std::pair<uint32_t, uint32_t>, LegacyTunnelStream> made;
    auto [it, fresh] = made.try_emplace({peer, cpu});
    if (fresh) {
      LegacyTunnelStream& v = it->second;
      v = {};
      const uint64_t n = 100 * peer + cpu;
      v.max_seq = static_cast<uint32_t>(1000 + n);
      v.window = ~0ull & ~(1ull << 3);  // one hole still open
      v.last_ns = 777 + n;
      v.received = 1000 + n;
      v.lost = 7 + n;
      v.reordered = 3 + n;
      v.duplicated = 2 + n;
      v.resyncs = 1 + n;
      v.delay_sum_ns = 5000 + n;
      for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) v.delay[k] = k + n;
    }
    return it->second;
  }

  // The migrated state, through the one reader stats and the exporter use.
  void expect_carried_over() {
    int stats = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapPeerStats).c_str()));
    ASSERT_GE(stats, 0);
    rg::MapUsage u = rg::map_info(stats, rg::kMapPeerStats);
    EXPECT_EQ(u.value_size, sizeof(rg_peer_stats));
    EXPECT_EQ(u.max_entries, static_cast<uint32_t>(RG_MAX_PEERS));
    const auto rows = rg::read_peer_stats(stats);
    ASSERT_EQ(rows.size(), 2u);
    const uint64_t cpu_sum = static_cast<uint64_t>(ncpu_) * (ncpu_ - 1) / 2;
    for (const auto& row : rows) {
      EXPECT_TRUE(row.slot == 1 || row.slot == 3) << row.slot;
      for (uint32_t e = 0; e < rg::kLegacyPeerEvents; ++e) {
        EXPECT_EQ(row.ev[e].packets, ncpu_ * (1000ull * row.slot + 10 * e) + cpu_sum) << row.slot << " " << e;
        EXPECT_EQ(row.ev[e].bytes, ncpu_ * 64ull * e) << row.slot << " " << e;
      }
      for (uint32_t e = rg::kLegacyPeerEvents; e < RG_PEER_EV_MAX; ++e) EXPECT_EQ(row.ev[e].packets, 0u) << e;
      // A new numbering: from 0, in no epoch yet (the programs take the load's).
      for (const rg_peer_stats& v : per_cpu<rg_peer_stats>(stats, row.slot)) {
        EXPECT_EQ(v.epoch, 0);
        for (uint32_t lane = 0; lane < RG_TUNNEL_LANES; ++lane) EXPECT_EQ(v.tx_seq[lane], 0u);
      }
    }

    int streams = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapTunnelStreams).c_str()));
    ASSERT_GE(streams, 0);
    u = rg::map_info(streams, rg::kMapTunnelStreams);
    EXPECT_EQ(u.value_size, sizeof(rg_tunnel_stream));
    EXPECT_EQ(u.max_entries, static_cast<uint32_t>(RG_MAX_TUNNEL_STREAMS));
    // Read under the lock (BPF_F_LOCK): the new map's BTF must show it.
    const auto got = rg::read_tunnel_streams(streams);
    ASSERT_EQ(got.size(), 3u);
    std::set<std::pair<uint32_t, uint32_t>> keys;
    for (const auto& row : got) {
      keys.insert({row.key.peer, row.key.stream});
      const uint32_t cpu = row.key.stream >> RG_TUNNEL_LANE_BITS;
      EXPECT_EQ(row.key.stream & (RG_TUNNEL_LANES - 1), 0u) << "lane 0";
      const LegacyTunnelStream& o = old_stream(row.key.peer, cpu);
      const rg_tunnel_stream& n = row.state;
      EXPECT_EQ(n.epoch, 0);
      EXPECT_EQ(n.max_seq, o.max_seq);
      for (uint64_t w : n.window) EXPECT_EQ(w, ~0ull) << "nothing missing";
      EXPECT_EQ(rg::tunnel_window_holes(n), 0u);
      EXPECT_EQ(n.last_ns, o.last_ns);
      EXPECT_EQ(n.received, o.received);
      EXPECT_EQ(n.lost, o.lost);
      EXPECT_EQ(n.reordered, o.reordered);
      EXPECT_EQ(n.duplicated, o.duplicated);
      EXPECT_EQ(n.resyncs, o.resyncs);
      EXPECT_EQ(n.delay_sum_ns, o.delay_sum_ns);
      for (size_t k = 0; k < RG_TUNNEL_DELAY_BUCKETS; ++k) EXPECT_EQ(n.delay[k], o.delay[k]) << k;
    }
    EXPECT_EQ(keys, (std::set<std::pair<uint32_t, uint32_t>>{{1, 0u << RG_TUNNEL_LANE_BITS},
                                                             {1, 2u << RG_TUNNEL_LANE_BITS},
                                                             {2, 5u << RG_TUNNEL_LANE_BITS}}));
    struct stat st {};
    for (const char* name : {rg::kMapPeerStats, rg::kMapTunnelStreams})
      EXPECT_NE(stat((pin_ + "/" + name + "_migrating").c_str(), &st), 0) << name;
  }

  int ncpu_ = 0;
};

TEST_F(ShieldUpgrade, PeerStatsAndStreamsAreCarriedIntoTheNewLayout) {
  pin_counters();
  pin_qp();
  pin_old_tunnel_state();
  ASSERT_TRUE(rg::migrate_peer_stats(pin_));
  auto carried = rg::migrate_tunnel_streams(pin_, RG_MAX_TUNNEL_STREAMS, 0);
  ASSERT_TRUE(carried);
  EXPECT_EQ(carried->streams(), 3u);
  expect_carried_over();
  // This build's layout is nothing to migrate.
  EXPECT_FALSE(rg::migrate_peer_stats(pin_));
  EXPECT_FALSE(rg::migrate_tunnel_streams(pin_, RG_MAX_TUNNEL_STREAMS, 0));
}

// The earlier build's programs go on counting into the old rg_peer_stats
// and rg_tunnel_streams until the attach takes their hooks: what they count
// after the copy is added to the new maps once none runs, event by event
// and CPU by CPU, stream by stream; what is no counter (the old sequence
// number, a stream's highest number) is not.
TEST_F(ShieldUpgrade, WhatTheEarlierBuildCountsDuringTheUpgradeIsCarried) {
  pin_old_tunnel_state();
  const int old_stats = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapPeerStats).c_str()));
  ASSERT_GE(old_stats, 0);
  const int old_streams = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapTunnelStreams).c_str()));
  ASSERT_GE(old_streams, 0);
  auto carried = rg::migrate_peer_stats(pin_);
  ASSERT_TRUE(carried);
  auto carried_streams = rg::migrate_tunnel_streams(pin_, RG_MAX_TUNNEL_STREAMS, 0);
  ASSERT_TRUE(carried_streams);
  // Peer 1's stream from CPU 2 goes on; peer 3's from CPU 1 starts.
  LegacyTunnelStream on = old_stream(1, 2), fresh{};
  on.received += 5;
  on.lost += 2;
  on.delay[3] += 4;
  on.max_seq += 100;
  fresh.received = 9;
  fresh.max_seq = 9;
  rg_tunnel_stream_key on_key{1, 2}, fresh_key{3, 1};
  ASSERT_EQ(bpf_map_update_elem(old_streams, &on_key, &on, BPF_EXIST), 0) << strerror(errno);
  ASSERT_EQ(bpf_map_update_elem(old_streams, &fresh_key, &fresh, BPF_NOEXIST), 0) << strerror(errno);
  EXPECT_EQ(carried_streams->carry_since_copy(), 2u);
  const int streams = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapTunnelStreams).c_str()));
  ASSERT_GE(streams, 0);
  std::map<std::pair<uint32_t, uint32_t>, rg_tunnel_stream> got;
  for (const auto& row : rg::read_tunnel_streams(streams)) got[{row.key.peer, row.key.stream}] = row.state;
  ASSERT_EQ(got.size(), 4u);
  const rg_tunnel_stream& went_on = got[{1, 2u << RG_TUNNEL_LANE_BITS}];
  const LegacyTunnelStream& was = old_stream(1, 2);
  EXPECT_EQ(went_on.received, was.received + 5);
  EXPECT_EQ(went_on.lost, was.lost + 2);
  EXPECT_EQ(went_on.reordered, was.reordered);
  EXPECT_EQ(went_on.delay[3], was.delay[3] + 4);
  EXPECT_EQ(went_on.max_seq, was.max_seq) << "the tracking is the new programs'";
  const rg_tunnel_stream& started = got[{3, 1u << RG_TUNNEL_LANE_BITS}];
  EXPECT_EQ(started.received, 9u);
  EXPECT_EQ(started.max_seq, 0u);
  EXPECT_EQ(rg::tunnel_window_holes(started), 0u);

  const size_t stride = (sizeof(LegacyPeerStats) + 7) & ~size_t{7};
  // Slot 1, CPU 0: 7 more packets of event 2 (700 bytes), and a later
  // sequence number; slot 2, new, CPU 1: 3 packets of event 0.
  std::vector<LegacyPeerStats> one = per_cpu<LegacyPeerStats>(old_stats, 1);
  ASSERT_EQ(one.size(), static_cast<size_t>(ncpu_));
  one[0].ev[2].packets += 7;
  one[0].ev[2].bytes += 700;
  one[0].tx_seq += 1000;
  std::vector<LegacyPeerStats> two(static_cast<size_t>(ncpu_));
  two[1 % ncpu_].ev[0].packets = 3;
  for (auto [slot, values] : {std::pair{1u, &one}, std::pair{2u, &two}}) {
    std::vector<uint8_t> raw(stride * static_cast<size_t>(ncpu_), 0);
    for (int c = 0; c < ncpu_; ++c)
      std::memcpy(raw.data() + stride * static_cast<size_t>(c), &(*values)[static_cast<size_t>(c)],
                  sizeof(LegacyPeerStats));
    ASSERT_EQ(bpf_map_update_elem(old_stats, &slot, raw.data(), BPF_ANY), 0) << strerror(errno);
  }
  EXPECT_EQ(carried->carry_since_copy(), 2u);

  const int stats = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapPeerStats).c_str()));
  ASSERT_GE(stats, 0);
  const std::vector<rg_peer_stats> now1 = per_cpu<rg_peer_stats>(stats, 1);
  ASSERT_EQ(now1.size(), static_cast<size_t>(ncpu_));
  for (int c = 0; c < ncpu_; ++c)
    for (uint32_t e = 0; e < rg::kLegacyPeerEvents; ++e) {
      const bool more = c == 0 && e == 2;
      EXPECT_EQ(now1[static_cast<size_t>(c)].ev[e].packets, 1000ull + 10 * e + c + (more ? 7 : 0)) << c << " " << e;
      EXPECT_EQ(now1[static_cast<size_t>(c)].ev[e].bytes, 64ull * e + (more ? 700 : 0)) << c << " " << e;
    }
  EXPECT_EQ(now1[0].epoch, 0);
  for (uint32_t lane = 0; lane < RG_TUNNEL_LANES; ++lane) EXPECT_EQ(now1[0].tx_seq[lane], 0u) << "no counter";
  const std::vector<rg_peer_stats> now2 = per_cpu<rg_peer_stats>(stats, 2);
  ASSERT_EQ(now2.size(), static_cast<size_t>(ncpu_));
  EXPECT_EQ(now2[static_cast<size_t>(1 % ncpu_)].ev[0].packets, 3u);
}

// Struct a of BTF mine described as struct b of theirs, member by member:
// names, bit offsets and bitfield sizes.
void expect_members_alike(const btf* mine, const btf_type* a, const btf* theirs, const btf_type* b,
                          const std::string& what) {
  EXPECT_EQ(a->size, b->size) << what;
  EXPECT_EQ(btf_vlen(a), btf_vlen(b)) << what;
  for (uint16_t i = 0; i < std::min(btf_vlen(a), btf_vlen(b)); ++i) {
    EXPECT_STREQ(btf__name_by_offset(mine, btf_members(a)[i].name_off),
                 btf__name_by_offset(theirs, btf_members(b)[i].name_off))
        << what << " member " << i;
    EXPECT_EQ(btf_member_bit_offset(a, i), btf_member_bit_offset(b, i)) << what << " member " << i;
    EXPECT_EQ(btf_member_bitfield_size(a, i), btf_member_bitfield_size(b, i)) << what << " member " << i;
  }
}

// The named members of struct t, those of its anonymous members (a union
// of a word and its fields) among them: bit offset and bitfield size.
void named_members(const btf* types, const btf_type* t, uint32_t base,
                   std::map<std::string, std::pair<uint32_t, uint32_t>>& out) {
  for (uint16_t i = 0; i < btf_vlen(t); ++i) {
    const char* name = btf__name_by_offset(types, btf_members(t)[i].name_off);
    const uint32_t at = base + btf_member_bit_offset(t, i);
    if (!name || !*name) {
      named_members(types, btf__type_by_id(types, static_cast<uint32_t>(btf__resolve_type(types, btf_members(t)[i].type))),
                    at, out);
      continue;
    }
    out[name] = {at, btf_member_bitfield_size(t, i)};
  }
}

// The BTF the loader writes for the maps it creates describes the value as
// the BPF object's BTF does, member by member: a field added to roceguard.h
// and not to the loader's description fails here. nested: structs inside
// the value compared the same way, by name; flattened: structs whose
// members the loader names where the object has a union of them, each
// member the loader names at the object's place for it.
void expect_btf_like_the_objects(int map_fd, const char* type_name, std::vector<const char*> nested = {},
                                 std::vector<const char*> flattened = {}) {
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(map_fd, &info, &len), 0) << strerror(errno);
  ASSERT_NE(info.btf_id, 0u) << type_name << ": the map has no BTF";
  btf* mine = btf__load_from_kernel_by_id(info.btf_id);
  ASSERT_NE(mine, nullptr) << strerror(errno);
  roceguard* skel = roceguard__open();
  ASSERT_NE(skel, nullptr);
  const btf* theirs = bpf_object__btf(skel->obj);
  const int id = btf__find_by_name_kind(theirs, type_name, BTF_KIND_STRUCT);
  ASSERT_GT(id, 0) << type_name;
  const btf_type* a = btf__type_by_id(mine, info.btf_value_type_id);
  EXPECT_STREQ(btf__name_by_offset(mine, a->name_off), type_name);
  expect_members_alike(mine, a, theirs, btf__type_by_id(theirs, static_cast<__u32>(id)), type_name);
  for (const char* name : nested) {
    const int m = btf__find_by_name_kind(mine, name, BTF_KIND_STRUCT), t = btf__find_by_name_kind(theirs, name, BTF_KIND_STRUCT);
    ASSERT_GT(m, 0) << name << " in the map's BTF";
    ASSERT_GT(t, 0) << name << " in the object's BTF";
    expect_members_alike(mine, btf__type_by_id(mine, static_cast<__u32>(m)), theirs,
                         btf__type_by_id(theirs, static_cast<__u32>(t)), name);
  }
  for (const char* name : flattened) {
    const int m = btf__find_by_name_kind(mine, name, BTF_KIND_STRUCT), t = btf__find_by_name_kind(theirs, name, BTF_KIND_STRUCT);
    ASSERT_GT(m, 0) << name << " in the map's BTF";
    ASSERT_GT(t, 0) << name << " in the object's BTF";
    const btf_type* ma = btf__type_by_id(mine, static_cast<__u32>(m));
    const btf_type* ta = btf__type_by_id(theirs, static_cast<__u32>(t));
    EXPECT_EQ(ma->size, ta->size) << name;
    std::map<std::string, std::pair<uint32_t, uint32_t>> want, got;
    named_members(theirs, ta, 0, want);
    named_members(mine, ma, 0, got);
    EXPECT_GE(got.size(), 1u) << name;
    for (const auto& [member, place] : got) {
      ASSERT_TRUE(want.count(member)) << name << "." << member << " is not the object's";
      EXPECT_EQ(place, want[member]) << name << "." << member << ": bit offset, bitfield size";
    }
  }
  roceguard__destroy(skel);
  btf__free(mine);
}

TEST_F(ShieldUpgrade, MigratedMapsCarryTheValueTypesOfTheObject) {
  pin_old_tunnel_state();
  ASSERT_TRUE(rg::migrate_peer_stats(pin_));
  ASSERT_TRUE(rg::migrate_tunnel_streams(pin_, RG_MAX_TUNNEL_STREAMS, 0));
  const int stats = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapPeerStats).c_str()));
  const int streams = fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapTunnelStreams).c_str()));
  expect_btf_like_the_objects(stats, "rg_peer_stats");
  expect_btf_like_the_objects(streams, "rg_tunnel_stream");
}

// An upgrade with the earlier build's pins starts (it used to be refused
// with --reset-state as the only way out): the object loads on the carried
// maps, its programs' lock on the streams' BTF, and runs in an epoch of
// its own.
TEST_F(ShieldUpgrade, LoadOnTheEarlierBuildsPinsCarriesThemOver) {
  ASSERT_EQ(geteuid(), 0u) << "needs root: loads the BPF object";
  pin_old_tunnel_state();
  rg::Config cfg;
  cfg.tunnel_sequence = true;
  {
    rg::BpfObject obj(cfg, pin_, false);
    ASSERT_NO_THROW(obj.load());
    EXPECT_NE(obj.rodata().tunnel_epoch, 0);
  }
  expect_carried_over();
}

// --- QPs across the upgrade from the LRU tables to the slot tables --------

using rg::QpDirV64;
using rg::QpDirV80;

// The rg_qp4 key of IPv4 QP dest_qp from 192.0.2.1 to 192.0.2.2, and the
// rg_qp6 one from 2001:db8::1 to 2001:db8::2, as the LRU tables had them.
rg_qp4_key qp4_key(uint32_t dest_qp, rg_direction d) {
  rg_qp4_key k{};
  inet_pton(AF_INET, "192.0.2.1", k.src);
  inet_pton(AF_INET, "192.0.2.2", k.dst);
  k.dest_qp = dest_qp;
  k.direction = d;
  return k;
}

rg_qp6_key qp6_key(uint32_t dest_qp, rg_direction d) {
  rg_qp6_key k{};
  inet_pton(AF_INET6, "2001:db8::1", k.src);
  inet_pton(AF_INET6, "2001:db8::2", k.dst);
  k.dest_qp = dest_qp;
  k.direction = d;
  return k;
}

// A direction as an earlier build counted it: every count distinct, seed
// apart, three of the rarer four past 2^16 (this build keeps their low 16
// bits), its last packet some 777 s after boot.
QpDirV80 v80_dir(uint64_t seed) {
  QpDirV80 v{};
  v.packets = 1000 + seed;
  v.bytes = 1024000 + seed;
  v.max_psn = 0x123400 + static_cast<uint32_t>(seed);
  v.resend_next = 0x56;
  v.flags = RG_QP_F_SEEN | RG_QP_F_RESENDING;
  v.last_seen_ns = (777 + seed) * 1'000'000'000ull + 123'456'789;
  v.retransmits = 3 + seed;
  v.lost = 4 + seed;
  v.cnp = 5 + seed;
  v.ecn_ce = 6 + seed;
  v.gaps = static_cast<uint32_t>(0x10000 + 7 + seed);
  v.nak_seq_err = static_cast<uint32_t>(0x20000 + 8 + seed);
  v.nak_other = static_cast<uint32_t>(0x30000 + 9 + seed);
  v.rnr_nak = static_cast<uint32_t>(10 + seed);
  return v;
}

// Every field of row's direction d as o's: the counts this build keeps in
// 32 or 16 bits by their low bits, the last packet to the slot clock's
// resolution.
void expect_carried(const rg::QpRow& row, rg_direction d, const QpDirV80& o, const std::string& what) {
  const rg_qp_dir& n = row.state.dir[d];
  EXPECT_EQ(n.packets, o.packets) << what;
  EXPECT_EQ(n.bytes, o.bytes) << what;
  EXPECT_EQ(n.max_psn, o.max_psn) << what;
  EXPECT_EQ(n.resend_next, o.resend_next) << what;
  EXPECT_EQ(n.flags, o.flags) << what;
  EXPECT_EQ(row.state.last_seen_ns[d], on_slot_clock(o.last_seen_ns)) << what;
  EXPECT_NE(row.state.last_seen_ns[d], 0u) << what;
  EXPECT_EQ(n.retransmits, static_cast<uint32_t>(o.retransmits)) << what;
  EXPECT_EQ(n.lost, static_cast<uint32_t>(o.lost)) << what;
  EXPECT_EQ(n.cnp, static_cast<uint32_t>(o.cnp)) << what;
  EXPECT_EQ(n.ecn_ce, static_cast<uint32_t>(o.ecn_ce)) << what;
  EXPECT_EQ(n.gaps, static_cast<uint16_t>(o.gaps)) << what;
  EXPECT_EQ(n.nak_seq_err, static_cast<uint16_t>(o.nak_seq_err)) << what;
  EXPECT_EQ(n.nak_other, static_cast<uint16_t>(o.nak_other)) << what;
  EXPECT_EQ(n.rnr_nak, static_cast<uint16_t>(o.rnr_nak)) << what;
}

// rg_qp4 and rg_qp6 as an earlier build pinned them: LRU hashes of the
// 80-byte value here, of the 64-byte one in QpV64Upgrade (the build just
// before the slot tables). The cases run the same upgrade on either.
class QpValueUpgrade : public PinnedState {
 protected:
  virtual uint32_t value_size() const { return sizeof(QpDirV80); }
  bool wide() const { return value_size() == sizeof(QpDirV80); }

  // Writes o into the old table fd as the earlier build's value.
  void put(int fd, const void* key, const QpDirV80& o, uint64_t flags) {
    if (wide()) {
      ASSERT_EQ(bpf_map_update_elem(fd, key, &o, flags), 0) << strerror(errno);
    } else {
      const QpDirV64 v = v64_of(o);
      ASSERT_EQ(bpf_map_update_elem(fd, key, &v, flags), 0) << strerror(errno);
    }
  }

  // IPv4 QP 0x11 seen both ways (its egress CE count past 2^32: the 64-byte
  // value kept its low 32 bits already), IPv6 QP 0x22 seen leaving.
  void pin_old_tables(uint32_t entries) {
    old4_ = pin(rg::kMapQp4, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key), value_size(), entries);
    old6_ = pin(rg::kMapQp6, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp6_key), value_size(), entries);
    ASSERT_GE(old4_, 0);
    ASSERT_GE(old6_, 0);
    e4_ = v80_dir(0);
    e4_.ecn_ce = (1ull << 32) + 6;  // a 32-bit count keeps 6
    i4_ = v80_dir(100);
    e6_ = v80_dir(200);
    const rg_qp4_key ke = qp4_key(0x11, RG_DIR_EGRESS), ki = qp4_key(0x11, RG_DIR_INGRESS);
    const rg_qp6_key k6 = qp6_key(0x22, RG_DIR_EGRESS);
    put(old4_, &ke, e4_, BPF_NOEXIST);
    put(old4_, &ki, i4_, BPF_NOEXIST);
    put(old6_, &k6, e6_, BPF_NOEXIST);
  }

  // The QPs of the pinned tables, through the one reader stats and the
  // exporter use, by dest_qp.
  std::map<uint32_t, rg::QpRow> rows() {
    std::map<uint32_t, rg::QpRow> out;
    for (const auto& row : rg::MapReader(pin_).qps()) out[row.key.dest_qp] = row;
    return out;
  }

  void expect_carried_over(uint32_t entries) {
    struct stat st {};
    std::map<std::string, int> fd;
    for (const char* name : {rg::kMapQp4, rg::kMapQp6}) {
      fd[name] = fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str()));
      ASSERT_GE(fd[name], 0) << name;
      rg::MapUsage u = rg::map_info(fd[name], name);
      EXPECT_EQ(u.value_size, name == std::string(rg::kMapQp4) ? sizeof(rg_qp4_slot) : sizeof(rg_qp6_slot)) << name;
      EXPECT_EQ(u.max_entries, rg_qp_slots(entries)) << name << ": slots for " << entries << " QP directions";
      EXPECT_NE(stat((pin_ + "/" + name + "_migrating").c_str(), &st), 0) << name;
    }
    auto got = rows();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0x11].key.family, static_cast<uint32_t>(AF_INET));
    expect_carried(got[0x11], RG_DIR_EGRESS, e4_, "IPv4 egress");
    EXPECT_EQ(got[0x11].state.dir[RG_DIR_EGRESS].ecn_ce, 6u);
    expect_carried(got[0x11], RG_DIR_INGRESS, i4_, "IPv4 ingress");
    EXPECT_EQ(got[0x22].key.family, static_cast<uint32_t>(AF_INET6));
    expect_carried(got[0x22], RG_DIR_EGRESS, e6_, "IPv6 egress");
    EXPECT_EQ(got[0x22].state.dir[RG_DIR_INGRESS].packets, 0u) << "never seen";
    EXPECT_EQ(got[0x22].state.last_seen_ns[RG_DIR_INGRESS], 0u) << "never seen";
    // Each where the programs' lookup finds it.
    const rg::QpSlotTable t4(fd[rg::kMapQp4], AF_INET), t6(fd[rg::kMapQp6], AF_INET6);
    EXPECT_NE(t4.find(got[0x11].key, RG_DIR_EGRESS), nullptr);
    EXPECT_NE(t4.find(got[0x11].key, RG_DIR_INGRESS), nullptr);
    EXPECT_NE(t6.find(got[0x22].key, RG_DIR_EGRESS), nullptr);
    EXPECT_EQ(t6.find(got[0x22].key, RG_DIR_INGRESS), nullptr);
  }

  // The reader refuses the old tables by name (refused_as: what it names
  // beside the type) until an upgrade carries them over into slot tables;
  // then there is nothing left to migrate.
  void tables_are_carried(const std::string& refused_as) {
    pin_counters();
    pin_old_tables(2048);
    std::string msg = error_of([&] { rg::MapReader reader(pin_); });
    EXPECT_NE(msg.find(rg::kMapQp4), std::string::npos) << msg;
    EXPECT_NE(msg.find("type lru_hash, expected array"), std::string::npos) << msg;
    EXPECT_NE(msg.find(refused_as), std::string::npos) << msg;
    EXPECT_TRUE(rg::qp_values_need_migration(pin_, rg::kMapQp4, 2048));
    EXPECT_TRUE(rg::qp_values_need_migration(pin_, rg::kMapQp6, 2048));
    EXPECT_FALSE(rg::qp_values_need_migration(pin_, rg::kMapQp4, 4096)) << "another capacity is no upgrade";

    auto carried = rg::migrate_qp_values(pin_, 2048);
    ASSERT_TRUE(carried);
    EXPECT_EQ(carried->carried(), 3u);
    expect_carried_over(2048);
    // The tables are this build's slot tables now: nothing to migrate.
    EXPECT_FALSE(rg::qp_values_need_migration(pin_, rg::kMapQp4, 2048));
    EXPECT_FALSE(rg::qp_values_need_migration(pin_, rg::kMapQp6, 2048));
    EXPECT_FALSE(rg::migrate_qp_values(pin_, 2048));
  }

  // The earlier build's programs go on counting into the old tables until
  // the attach takes their hooks: once none runs, what each entry counted
  // since the copy is added to the new tables (modulo 2^32 or 2^16 where
  // they keep 32 or 16 bits; the PSN tracking is the new programs'), and a
  // QP met first after the copy comes whole.
  void counts_during_the_upgrade_are_carried() {
    pin_counters();
    pin_old_tables(2048);
    // The 80-byte value's retransmits at 2^32 - 1: the next 3 wrap the
    // 32-bit count to 2 (the 64-byte value wraps its own). NAKs at 0x3ffff,
    // 0xffff in 16 bits: the next 3 wrap them to 2.
    i4_.retransmits = wide() ? UINT32_MAX : UINT32_MAX - 5;
    i4_.nak_other = 0x3ffff;
    const rg_qp4_key ki = qp4_key(0x11, RG_DIR_INGRESS);
    put(old4_, &ki, i4_, BPF_EXIST);
    auto carried = rg::migrate_qp_values(pin_, 2048);
    ASSERT_TRUE(carried);

    // IPv4 egress: 10 more packets, 2 more CE marks, 1 more gap, a later
    // PSN; IPv4 ingress: 3 more resent, 3 more NAKs; IPv6: a new QP; the
    // IPv6 QP 0x22 as it was.
    QpDirV80 e4 = e4_, i4 = i4_;
    e4.packets += 10;
    e4.bytes += 10240;
    e4.ecn_ce += 2;
    e4.gaps += 1;
    e4.max_psn = 0x123500;
    i4.retransmits += 3;
    i4.nak_other += 3;
    const rg_qp4_key ke = qp4_key(0x11, RG_DIR_EGRESS);
    put(old4_, &ke, e4, BPF_EXIST);
    put(old4_, &ki, i4, BPF_EXIST);
    const QpDirV80 n6 = v80_dir(300);
    const rg_qp6_key k_new = qp6_key(0x33, RG_DIR_INGRESS);
    put(old6_, &k_new, n6, BPF_NOEXIST);
    EXPECT_EQ(carried->carry_since_copy(), 3u);

    auto got = rows();
    ASSERT_EQ(got.size(), 3u);
    const rg_qp_dir& e = got[0x11].state.dir[RG_DIR_EGRESS];
    EXPECT_EQ(e.packets, e4_.packets + 10);
    EXPECT_EQ(e.bytes, e4_.bytes + 10240);
    EXPECT_EQ(e.ecn_ce, 8u);
    EXPECT_EQ(e.gaps, static_cast<uint16_t>(e4_.gaps + 1));
    EXPECT_EQ(e.retransmits, e4_.retransmits);
    EXPECT_EQ(e.max_psn, e4_.max_psn) << "the tracking is the new programs'";
    EXPECT_EQ(got[0x11].state.last_seen_ns[RG_DIR_EGRESS], on_slot_clock(e4_.last_seen_ns));
    const rg_qp_dir& i = got[0x11].state.dir[RG_DIR_INGRESS];
    EXPECT_EQ(i.retransmits, wide() ? 2u : UINT32_MAX - 2) << "modulo 2^32, as the programs' own adds";
    EXPECT_EQ(i.nak_other, 2u) << "modulo 2^16, as the programs' own adds";
    EXPECT_EQ(i.packets, i4_.packets);
    expect_carried(got[0x22], RG_DIR_EGRESS, e6_, "unchanged");
    expect_carried(got[0x33], RG_DIR_INGRESS, n6, "met after the copy");
  }

  // A load on the earlier build's pins starts (without the migration its
  // tables are refused as of another type): the object loads on the
  // carried tables, and what the earlier programs counted meanwhile is
  // carried once this load's programs run.
  void a_load_carries_them_over() {
    ASSERT_EQ(geteuid(), 0u) << "needs root: loads the BPF object";
    rg::Config cfg;
    cfg.qp_entries = 2048;
    pin_old_tables(cfg.qp_entries);
    {
      rg::BpfObject obj(cfg, pin_, false);
      ASSERT_NO_THROW(obj.load());
      // The object's tables are the pinned ones.
      for (const char* name : {rg::kMapQp4, rg::kMapQp6}) {
        const int pinned = fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str()));
        EXPECT_EQ(rg::map_info(obj.map_fd(name), name).id, rg::map_info(pinned, name).id) << name;
      }
      QpDirV80 e4 = e4_;
      e4.packets += 5;
      e4.cnp += 4;
      const rg_qp4_key ke = qp4_key(0x11, RG_DIR_EGRESS);
      put(old4_, &ke, e4, BPF_EXIST);
      obj.finish_pins();
    }
    e4_.packets += 5;
    e4_.cnp += 4;
    expect_carried_over(cfg.qp_entries);
  }

  int old4_ = -1, old6_ = -1;
  QpDirV80 e4_{}, i4_{}, e6_{};
};

class QpV64Upgrade : public QpValueUpgrade {
 protected:
  uint32_t value_size() const override { return sizeof(QpDirV64); }
};

TEST_F(QpValueUpgrade, TablesOfThe80ByteValueAreCarriedIntoTheSlotTables) {
  tables_are_carried("value_size 80, expected 64");
}

TEST_F(QpV64Upgrade, TablesOfThe64ByteValueAreCarriedIntoTheSlotTables) {
  // The 64-byte value is the IPv4 slot's size: the type and the key differ.
  tables_are_carried("key_size 16, expected 4");
}

TEST_F(QpValueUpgrade, WhatTheEarlierBuildCountsDuringTheUpgradeIsCarried) { counts_during_the_upgrade_are_carried(); }

TEST_F(QpV64Upgrade, WhatTheEarlierBuildCountsDuringTheUpgradeIsCarried) { counts_during_the_upgrade_are_carried(); }

// The migration's tables are of the object's slot type (head, src, dst),
// their rg_qp_dir member by member, and the head's fields where the
// object's union of the id word and its fields has them.
TEST_F(QpValueUpgrade, MigratedTablesCarryTheValueTypesOfTheObject) {
  pin_old_tables(1024);
  ASSERT_TRUE(rg::migrate_qp_values(pin_, 1024));
  expect_btf_like_the_objects(fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapQp4).c_str())), "rg_qp4_slot",
                              {"rg_qp_dir"}, {"rg_qp_slot_head"});
  expect_btf_like_the_objects(fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapQp6).c_str())), "rg_qp6_slot",
                              {"rg_qp_dir"}, {"rg_qp_slot_head"});
}

TEST_F(PinnedState, TablesOfTheLegacyQpMigrationCarryTheValueTypesOfTheObject) {
  pin(rg::kMapQpLegacy, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp_key), sizeof(LegacyQpState), 64);
  ASSERT_TRUE(rg::migrate_qp_table(pin_, 1024));
  expect_btf_like_the_objects(fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapQp4).c_str())), "rg_qp4_slot",
                              {"rg_qp_dir"}, {"rg_qp_slot_head"});
  expect_btf_like_the_objects(fds_.emplace_back(bpf_obj_get((pin_ + "/" + rg::kMapQp6).c_str())), "rg_qp6_slot",
                              {"rg_qp_dir"}, {"rg_qp_slot_head"});
}

TEST_F(QpValueUpgrade, LoadOnTheEarlierBuildsTablesCarriesThemOver) { a_load_carries_them_over(); }

TEST_F(QpV64Upgrade, LoadOnTheEarlierBuildsTablesCarriesThemOver) { a_load_carries_them_over(); }

// --- The load's sequence epoch ----------------------------------------------

// Never 0 (the receiving gateway's "no epoch": a sender before them), and
// drawn anew for each load.
TEST(TunnelEpoch, RandomAndNeverZero) {
  std::set<uint16_t> seen;
  for (int i = 0; i < 64; ++i) {
    const uint16_t e = rg::new_tunnel_epoch();
    EXPECT_NE(e, 0);
    seen.insert(e);
  }
  // 64 draws of 65535 values all alike: odds of 65535^-63.
  EXPECT_GT(seen.size(), 1u);
}

TEST_F(PinnedState, EveryLoadRunsInAnEpochOfItsOwnWithTheConfiguredRodata) {
  ASSERT_EQ(geteuid(), 0u) << "needs root: loads the BPF object";
  rg::Config cfg;
  cfg.tunnel_sequence = true;
  cfg.dscp = 26;
  std::set<uint16_t> epochs;
  for (int i = 0; i < 3; ++i) {
    rg::BpfObject obj(cfg, pin_, false);
    obj.load();
    rg_config loaded = obj.rodata();
    EXPECT_NE(loaded.tunnel_epoch, 0);
    epochs.insert(loaded.tunnel_epoch);
    // Everything else is the configuration's, which has no epoch of its own.
    EXPECT_EQ(cfg.rodata().tunnel_epoch, 0);
    loaded.tunnel_epoch = 0;
    const rg_config want = cfg.rodata();
    EXPECT_EQ(std::memcmp(&loaded, &want, sizeof(want)), 0);
  }
  // Three loads in one epoch: odds of 65535^-2.
  EXPECT_GT(epochs.size(), 1u) << "3 loads, one epoch";
}

// --- The map writer ----------------------------------------------------------

// Each peer's shield, its own or tunnel.shield, reaches its rg_peers slot.
TEST_F(PinnedState, ShieldOfEachPeerReachesItsSlot) {
  ASSERT_EQ(geteuid(), 0u) << "needs root: creates the BPF object's maps";
  rg::ConfigProblems p;
  rg::Config cfg = rg::parse_config_string(R"(
[tunnel]
sequence = true
shield = "control"
[[tunnel.peer]]
name = "a"
local = "192.0.2.1"
remote = "203.0.113.1"
vni = 1
[[tunnel.peer]]
name = "b"
local = "192.0.2.1"
remote = "203.0.113.2"
vni = 2
shield = "all"
[[tunnel.peer]]
name = "c"
local = "192.0.2.1"
remote = "203.0.113.3"
vni = 3
shield = "off"
)", p);
  ASSERT_TRUE(p.ok()) << p.errors.front();
  rg::BpfObject obj(cfg, pin_, false);
  obj.pin_maps();
  auto open = [&](const char* name) { return fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str())); };
  const int peers = open(rg::kMapPeers);
  rg::MapWriter(peers, open(rg::kMapRoute4), open(rg::kMapRoute6), open(rg::kMapDecap)).write_tunnels(cfg.peers);
  const uint8_t want[] = {RG_PEER_F_SHIELD_CONTROL, RG_PEER_F_SHIELD_ALL, 0, 0};
  for (uint32_t slot = 0; slot < 4; ++slot) {
    rg_peer v{};
    ASSERT_EQ(bpf_map_lookup_elem(peers, &slot, &v), 0) << strerror(errno);
    EXPECT_EQ(v.flags, want[slot]) << "slot " << slot;
  }
}

// A peer's slot, and what the slot holds (its numbering, epoch, counters,
// the streams tracked from it), follow the peer's identity (remote address
// and VNI), not its place in the configuration: reordered, the peers keep
// theirs, as a restart on the same pins does (the writer only sees the
// pinned maps). A slot given to another peer is cleared, and its numbering
// restarts in an epoch its previous occupant's never had.
TEST_F(PinnedState, APeerKeepsItsSlotAndNumberingAcrossReorders) {
  ASSERT_EQ(geteuid(), 0u) << "needs root: creates the BPF object's maps";
  auto peers_of = [](const std::vector<std::string>& which) {
    std::string text = "[tunnel]\nsequence = true\n";
    for (const auto& n : which)
      text += "[[tunnel.peer]]\nname = \"" + n + "\"\nlocal = \"192.0.2.1\"\nremote = \"203.0.113." +
              std::to_string(n[0] - 'a' + 1) + "\"\nvni = " + std::to_string(n[0] - 'a' + 1) +
              "\nroutes = [\"198.51.100." + std::to_string(16 * (n[0] - 'a' + 1)) + "/28\"]\n";
    rg::ConfigProblems p;
    rg::Config cfg = rg::parse_config_string(text, p);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.errors.front());
    return cfg;
  };
  const rg::Config ab = peers_of({"a", "b"});
  rg::BpfObject obj(ab, pin_, false);
  obj.pin_maps();
  auto open = [&](const char* name) { return fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str())); };
  const int peers = open(rg::kMapPeers), route4 = open(rg::kMapRoute4), stats = open(rg::kMapPeerStats),
            streams = open(rg::kMapTunnelStreams);
  const rg::MapWriter writer(peers, route4, open(rg::kMapRoute6), open(rg::kMapDecap), stats, streams);
  const int ncpu = libbpf_num_possible_cpus();
  ASSERT_GT(ncpu, 0);
  auto remote_at = [&](uint32_t slot) {
    rg_peer v{};
    EXPECT_EQ(bpf_map_lookup_elem(peers, &slot, &v), 0) << strerror(errno);
    return v.family ? static_cast<int>(v.remote[3]) : 0;
  };
  auto route_of = [&](int net) {
    rg_route4_key k{};
    k.prefixlen = 32;
    const uint8_t addr[4] = {198, 51, 100, static_cast<uint8_t>(16 * net + 1)};
    std::memcpy(k.addr, addr, 4);
    uint32_t slot = 0;
    return bpf_map_lookup_elem(route4, &k, &slot) == 0 ? static_cast<int>(slot) : -1;
  };
  auto stats_of = [&](uint32_t slot) {
    std::vector<rg_peer_stats> v(static_cast<size_t>(ncpu));
    EXPECT_EQ(bpf_map_lookup_elem(stats, &slot, v.data()), 0) << strerror(errno);
    return v;
  };
  auto has_stream = [&](uint32_t slot) {
    rg_tunnel_stream_key k{slot, 5};
    std::vector<uint8_t> v(sizeof(rg_tunnel_stream));
    return bpf_map_lookup_elem(streams, &k, v.data()) == 0;
  };

  writer.write_tunnels(ab.peers);
  ASSERT_EQ(remote_at(0), 1);
  ASSERT_EQ(remote_at(1), 2);
  // What the data path made of each slot: a's numbers at 500, b's at 900,
  // in the load's epoch, and a stream tracked from each.
  constexpr uint16_t kEpoch = 0x123;
  for (uint32_t slot : {0u, 1u}) {
    std::vector<rg_peer_stats> v(static_cast<size_t>(ncpu));
    for (auto& c : v) {
      c.epoch = kEpoch;
      c.tx_seq[0] = slot ? 900 : 500;
      c.ev[RG_PEER_EV_ENCAPSULATED].packets = slot ? 9 : 5;
    }
    ASSERT_EQ(bpf_map_update_elem(stats, &slot, v.data(), BPF_ANY), 0) << strerror(errno);
    rg_tunnel_stream_key k{slot, 5};
    std::vector<uint8_t> st(sizeof(rg_tunnel_stream));
    ASSERT_EQ(bpf_map_update_elem(streams, &k, st.data(), BPF_ANY), 0) << strerror(errno);
  }

  // Reordered (a SIGHUP, or a restart on these pins): nothing moves.
  writer.write_tunnels(peers_of({"b", "a"}).peers);
  EXPECT_EQ(remote_at(0), 1) << "a keeps slot 0";
  EXPECT_EQ(remote_at(1), 2) << "b keeps slot 1";
  EXPECT_EQ(route_of(1), 0) << "a's routes lead to a's slot";
  EXPECT_EQ(route_of(2), 1);
  for (uint32_t slot : {0u, 1u})
    for (const auto& c : stats_of(slot)) {
      EXPECT_EQ(c.epoch, kEpoch) << "slot " << slot;
      EXPECT_EQ(c.tx_seq[0], slot ? 900u : 500u) << "slot " << slot << " goes on with its own peer's numbers";
      EXPECT_EQ(c.ev[RG_PEER_EV_ENCAPSULATED].packets, slot ? 9u : 5u);
    }
  EXPECT_TRUE(has_stream(0));
  EXPECT_TRUE(has_stream(1));
  {
    rg::State st;
    st.config = peers_of({"b", "a"}).to_json();
    pin_record(st.to_json().dump());
    EXPECT_EQ(rg::peer_names(pin_), (std::vector<std::string>{"a", "b"})) << "the exporter names slots by who holds them";
  }

  // a removed, c added: c takes the slot a left, which starts over.
  const rg::MapWriter::Placement placed = writer.write_tunnels(peers_of({"b", "c"}).peers);
  EXPECT_EQ(placed.slots, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(placed.changed, (std::vector<uint32_t>{0}));
  EXPECT_EQ(remote_at(0), 3);
  EXPECT_EQ(remote_at(1), 2);
  EXPECT_EQ(route_of(1), -1) << "a's routes are gone";
  EXPECT_EQ(route_of(3), 0);
  const std::vector<rg_peer_stats> fresh = stats_of(0);
  for (const auto& c : fresh) {
    EXPECT_NE(c.epoch & RG_TUNNEL_EPOCH_MASK, 0) << "set, not left to the load's, which a had";
    EXPECT_NE(c.epoch, kEpoch) << "c's numbering is never a continuation of a's";
    EXPECT_EQ(c.epoch, fresh[0].epoch) << "one epoch on every CPU";
    EXPECT_EQ(c.tx_seq[0], 0u);
    EXPECT_EQ(c.ev[RG_PEER_EV_ENCAPSULATED].packets, 0u) << "a's counters are not c's";
  }
  EXPECT_FALSE(has_stream(0)) << "what was tracked from a";
  EXPECT_TRUE(has_stream(1));
  for (const auto& c : stats_of(1)) EXPECT_EQ(c.tx_seq[0], 900u);

  // Every peer removed: the slots are emptied and cleared too.
  writer.write_tunnels({});
  EXPECT_EQ(remote_at(0), 0);
  EXPECT_EQ(remote_at(1), 0);
  for (const auto& c : stats_of(1)) EXPECT_EQ(c.tx_seq[0], 0u);
  EXPECT_FALSE(has_stream(1));
}

// --- Pruning counters of interfaces that are gone --------------------------

TEST_F(PinnedState, StaleInterfacesArePrunedSoANewOneStillCounts) {
  int fd = pin_counters();
  const int ncpu = libbpf_num_possible_cpus();
  std::vector<rg_counters> zero(static_cast<size_t>(ncpu));
  // Ifindexes far above any this machine hands out; checked below.
  const uint32_t first_stale = 0x7fff0000;
  for (uint32_t i = 0; i < RG_MAX_COUNTER_KEYS / RG_DIR_MAX; ++i) {
    char name[IF_NAMESIZE];
    ASSERT_EQ(if_indextoname(first_stale + i, name), nullptr);
    for (uint32_t d = 0; d < RG_DIR_MAX; ++d) {
      rg_counter_key key{first_stale + i, d};
      ASSERT_EQ(bpf_map_update_elem(fd, &key, zero.data(), BPF_NOEXIST), 0) << strerror(errno);
    }
  }
  const uint32_t lo = if_nametoindex("lo");
  ASSERT_NE(lo, 0u);
  rg_counter_key fresh{lo, RG_DIR_EGRESS};
  EXPECT_NE(bpf_map_update_elem(fd, &fresh, zero.data(), BPF_NOEXIST), 0) << "the map should be full";

  // A configured ifindex is kept even when it is not there (yet).
  const uint32_t kept = first_stale + 3;
  EXPECT_EQ(rg::prune_counters(fd, {kept}), static_cast<size_t>(RG_MAX_COUNTER_KEYS - RG_DIR_MAX));
  EXPECT_EQ(bpf_map_update_elem(fd, &fresh, zero.data(), BPF_NOEXIST), 0) << strerror(errno);
  std::set<uint32_t> left;
  for (const auto& row : rg::MapReader(fd).counters()) left.insert(row.ifindex);
  EXPECT_EQ(left, (std::set<uint32_t>{lo, kept}));
  // An interface that exists is never pruned.
  EXPECT_EQ(rg::prune_counters(fd, {}), static_cast<size_t>(RG_DIR_MAX));
  EXPECT_EQ(rg::MapReader(fd).counters().size(), 1u);
}

// --- Walks under churn ------------------------------------------------------

// One thread inserts random QP keys into a small LRU table of an earlier
// build's (the 64-byte value), evicting as it goes, while walks run, as an
// upgrade walks that table while the earlier build's programs still count
// (migrate_qp_values): every walk ends and returns each key at most once,
// never more keys than the table holds.
TEST(MapWalk, LruChurnNeverRepeatsOrExceedsCapacity) {
  constexpr uint32_t kCapacity = 1024;
  int qp = create_map(BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key), sizeof(rg::QpDirV64), kCapacity);
  ASSERT_GE(qp, 0) << strerror(errno);
  auto insert = [qp](std::mt19937& rng) {
    rg_qp4_key key{};
    key.dest_qp = rng();
    key.src[0] = static_cast<uint8_t>(rng());
    key.direction = rng() & 1;
    rg::QpDirV64 value{};
    value.packets = 1;
    bpf_map_update_elem(qp, &key, &value, BPF_ANY);
  };
  std::mt19937 fill(1);
  for (uint32_t i = 0; i < 4 * kCapacity; ++i) insert(fill);

  std::atomic<bool> stop{false};
  std::thread churn([&] {
    std::mt19937 rng(2);
    while (!stop.load(std::memory_order_relaxed)) insert(rng);
  });
  size_t worst = 0;
  bool repeated = false;
  for (int walk = 0; walk < 200; ++walk) {
    std::vector<std::string> walked;
    rg::walk_map(qp, sizeof(rg_qp4_key), sizeof(rg::QpDirV64), kCapacity, [&](const uint8_t* k, const uint8_t*) {
      walked.emplace_back(reinterpret_cast<const char*>(k), sizeof(rg_qp4_key));
    });
    std::set<std::string> keys(walked.begin(), walked.end());
    repeated |= keys.size() != walked.size();
    worst = std::max(worst, walked.size());
  }
  stop = true;
  churn.join();
  close(qp);
  EXPECT_FALSE(repeated);
  EXPECT_LE(worst, kCapacity);
}

// The slot table under churn: one thread claims slots the way the programs
// do (a free slot of the key's candidate buckets, or else the slot of a QP
// it evicts; one compare-and-swap of the id word to CLAIMED, the key and
// counts written, then READY), evicting as it goes, while the reader
// walks: every walk returns each QP direction at most once and never more
// than the table has slots, and a QP that is never evicted is in every
// walk, with its counts.
TEST(MapWalk, SlotChurnNeverRepeatsOrMissesAQpThatStays) {
  constexpr uint32_t kEntries = 1024, kStaying = 256, kChurned = 0x800000;  // churned QPs' numbers from here
  int counters = create_map(BPF_MAP_TYPE_PERCPU_HASH, sizeof(rg_counter_key), sizeof(rg_counters),
                            RG_MAX_COUNTER_KEYS);
  int qp = create_slot_table(AF_INET, kEntries, "rg_qp4");
  ASSERT_GE(counters, 0) << strerror(errno);
  ASSERT_GE(qp, 0) << strerror(errno);
  const uint32_t slots = rg_qp_slots(kEntries), buckets = slots / RG_QP_BUCKET_SLOTS;
  auto qp4 = [](uint32_t dest_qp, uint32_t src) {
    rg_qp_key k{};
    k.family = AF_INET;
    std::memcpy(k.src, &src, 4);
    inet_pton(AF_INET, "192.0.2.2", k.dst);
    k.dest_qp = dest_qp;
    return k;
  };
  {
    rg::QpSlotTable table(qp, AF_INET, true);
    for (uint32_t i = 1; i <= kStaying; ++i) {
      rg_qp_dir v{};
      v.packets = i;
      ASSERT_TRUE(table.place(qp4(i, 0x010200c0), RG_DIR_EGRESS, v, rg::qp_clock_now())) << i;
    }
  }
  const size_t length = static_cast<size_t>(slots) * sizeof(rg_qp4_slot);
  void* mapped = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, qp, 0);
  ASSERT_NE(mapped, MAP_FAILED) << strerror(errno);
  auto* table = static_cast<rg_qp4_slot*>(mapped);

  // A new QP direction n (unique: its number and source from n) into one of
  // its candidate slots; false when all sixteen hold QPs that stay.
  auto claim = [&](uint64_t n) {
    const rg_qp_key k = qp4(kChurned + static_cast<uint32_t>(n % kChurned), static_cast<uint32_t>(n / kChurned));
    const uint32_t dir = static_cast<uint32_t>(n & 1);
    uint64_t words[1];
    std::memcpy(words, k.src, 4);
    std::memcpy(reinterpret_cast<uint8_t*>(words) + 4, k.dst, 4);
    const uint64_t h = rg_qp_hash(reinterpret_cast<const __u64*>(words), 1, rg_qp_id(k.dest_qp, dir, 0));
    rg_qp4_slot* target = nullptr;
    uint32_t expect = 0;
    rg_qp4_slot* victim = nullptr;
    uint32_t victim_id = 0;
    for (int second = 0; second < 2 && !target; ++second) {
      const uint32_t b = rg_qp_bucket(h, second, buckets);
      for (uint32_t j = 0; j < RG_QP_BUCKET_SLOTS; ++j) {
        rg_qp4_slot* s = &table[b * RG_QP_BUCKET_SLOTS + j];
        const uint32_t id = __atomic_load_n(&s->head.id, __ATOMIC_ACQUIRE), st = rg_qp_id_state(id);
        if (st == RG_QP_SLOT_EMPTY || st == RG_QP_SLOT_ABANDONED) {
          target = s;
          expect = id;
          break;
        }
        if (st == RG_QP_SLOT_READY && (id & RG_QP_ID_QP_MASK) >= kChurned && !victim) {
          victim = s;
          victim_id = id;
        }
      }
    }
    if (!target) target = victim, expect = victim_id;
    if (!target) return false;
    const uint32_t claimed = rg_qp_id(k.dest_qp, dir, RG_QP_SLOT_CLAIMED);
    if (!__atomic_compare_exchange_n(&target->head.id, &expect, claimed, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return false;
    std::memcpy(target->src, k.src, 4);
    std::memcpy(target->dst, k.dst, 4);
    target->head.dir = rg_qp_dir{};
    target->head.dir.packets = 1;
    target->head.last_seen = rg::qp_clock_now();
    __atomic_store_n(&target->head.id, rg_qp_id(k.dest_qp, dir, RG_QP_SLOT_READY), __ATOMIC_RELEASE);
    return true;
  };
  uint64_t next = 0;
  for (uint32_t i = 0; i < 4 * slots; ++i) claim(next++);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> claims{0};
  std::thread churn([&, n = next]() mutable {
    while (!stop.load(std::memory_order_relaxed)) claims += claim(n++);
  });
  rg::MapReader reader(counters, rg::QpMaps{qp, -1});
  const rg::QpSlotTable slot_table(qp, AF_INET);
  size_t worst = 0;
  bool repeated = false, missed = false, wrong = false;
  for (int walk = 0; walk < 200; ++walk) {
    // The walk itself, then the reader's rows (a QP's two directions
    // joined) and its fill of the table.
    std::vector<std::string> walked;
    size_t staying = 0;
    slot_table.walk([&](const rg_qp_key& k, rg_direction d, const rg_qp_slot_head& s) {
      walked.emplace_back(reinterpret_cast<const char*>(&k), sizeof(k));
      walked.back().push_back(static_cast<char>(d));
      if (k.dest_qp < kChurned) {
        ++staying;
        wrong |= s.dir.packets != k.dest_qp;
      }
    });
    std::set<std::string> keys(walked.begin(), walked.end());
    repeated |= keys.size() != walked.size();
    missed |= staying != kStaying;
    worst = std::max(worst, walked.size());

    const auto rows = reader.qps();
    std::set<std::string> qps;
    size_t rows_staying = 0;
    for (const auto& row : rows) {
      qps.emplace(reinterpret_cast<const char*>(&row.key), sizeof(row.key));
      if (row.key.dest_qp < kChurned) {
        ++rows_staying;
        wrong |= row.state.dir[RG_DIR_EGRESS].packets != row.key.dest_qp;
      }
    }
    repeated |= qps.size() != rows.size();
    missed |= rows_staying != kStaying;
    worst = std::max(worst, rows.size());
    for (const auto& u : reader.usage_all())
      if (u.name == rg::kMapQp4) {
        worst = std::max<size_t>(worst, u.entries);
        EXPECT_EQ(u.max_entries, slots);
      }
  }
  stop = true;
  churn.join();
  munmap(mapped, length);
  close(counters);
  close(qp);
  EXPECT_GT(claims.load(), 0u) << "the churn claimed no slot";
  EXPECT_FALSE(repeated);
  EXPECT_FALSE(missed) << "a QP that stays is in every walk";
  EXPECT_FALSE(wrong) << "with its own counts";
  EXPECT_LE(worst, slots);
}

// walk_map stops at max_entries even when asked for fewer than the map
// holds, batched (hash) or not (LPM trie).
TEST(MapWalk, StopsAtMaxEntries) {
  int hash = create_map(BPF_MAP_TYPE_HASH, sizeof(uint32_t), sizeof(uint32_t), 64);
  ASSERT_GE(hash, 0);
  for (uint32_t i = 0; i < 64; ++i) ASSERT_EQ(bpf_map_update_elem(hash, &i, &i, BPF_NOEXIST), 0);
  std::set<uint32_t> seen;
  size_t n = rg::walk_map(hash, sizeof(uint32_t), sizeof(uint32_t), 64, [&](const uint8_t* k, const uint8_t*) {
    uint32_t key;
    std::memcpy(&key, k, sizeof(key));
    seen.insert(key);
  });
  EXPECT_EQ(n, 64u);
  EXPECT_EQ(seen.size(), 64u);
  EXPECT_EQ(rg::walk_map(hash, sizeof(uint32_t), sizeof(uint32_t), 10, [](const uint8_t*, const uint8_t*) {}), 10u);
  close(hash);

  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_NO_PREALLOC);
  int trie = bpf_map_create(BPF_MAP_TYPE_LPM_TRIE, "rg_test", sizeof(rg_route4_key), sizeof(uint32_t), 16, &opts);
  ASSERT_GE(trie, 0) << strerror(errno);
  for (uint8_t i = 0; i < 16; ++i) {
    rg_route4_key key{24, {198, 51, i, 0}};
    uint32_t slot = i;
    ASSERT_EQ(bpf_map_update_elem(trie, &key, &slot, BPF_NOEXIST), 0);
  }
  EXPECT_EQ(rg::walk_map(trie, sizeof(rg_route4_key), sizeof(uint32_t), 16, [](const uint8_t*, const uint8_t*) {}),
            16u);
  EXPECT_EQ(rg::walk_map(trie, sizeof(rg_route4_key), sizeof(uint32_t), 5, [](const uint8_t*, const uint8_t*) {}), 5u);
  close(trie);
}

// --- Limits are checked before anything changes ----------------------------

TEST(Limits, PeersThatOverflowTheAttachRecordAreRefusedOffline) {
  char dir[] = "/tmp/rgst-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/peers.toml";
  {
    std::ofstream out(file);
    out << "interfaces = [\"eth0\"]\n[tunnel]\npeer = [\n";
    for (int i = 0; i < RG_MAX_PEERS; ++i)
      out << "  { name = \"peer" << i << "\", local = \"192.0.2.1\", remote = \"203.0.113." << 1 + i % 254
          << "\", vni = " << 1000 + i << " },\n";
    out << "]\n";
  }
  Result r = sh(std::string(RG_BIN) + " config check --offline " + file);
  sh(std::string("rm -rf ") + dir);
  EXPECT_EQ(r.rc, rg::kExitUsage) << r.out;
  EXPECT_NE(r.out.find("the attach record of this configuration takes up to"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("16383"), std::string::npos) << r.out;
}

TEST(Limits, MoreInterfacesThanTheCounterMapHoldsAreRefused) {
  rg::Config cfg;
  for (int i = 0; i <= RG_MAX_COUNTER_KEYS / RG_DIR_MAX; ++i) cfg.interfaces.push_back("rg" + std::to_string(i));
  rg::ConfigProblems p;
  rg::check_config(cfg, true, p);
  bool named = false;
  for (const auto& e : p.errors) named |= e.find("interfaces: 257 interfaces, at most 256") != std::string::npos;
  EXPECT_TRUE(named);
}

// Every limit check passes the shipped, small configuration.
TEST(Limits, OneInterfaceNoPeersFits) {
  rg::Config cfg;
  cfg.interfaces = {"eth0"};
  rg::ConfigProblems p;
  rg::check_config(cfg, true, p);
  EXPECT_TRUE(p.errors.empty());
}

}  // namespace
