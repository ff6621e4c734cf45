// What roceguard reads back from its pin path when that state is not what
// it wrote: maps of another type or size, an attach record of another
// layout or shape, a counter map left by a build with fewer events, a
// counter map full of interfaces that are gone, and a QP table churned by
// the data path while it is walked. Every map here is created by the test in
// a private bpffs directory of its own, removed even when a case fails; no
// packet is sent.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <net/if.h>
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
               const char* name = "rg_test") {
  LIBBPF_OPTS(bpf_map_create_opts, opts);
  return bpf_map_create(type, name, key_size, value_size, max_entries, &opts);
}

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
          uint32_t max_entries) {
    int fd = create_map(type, key_size, value_size, max_entries, name.c_str());
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
  void pin_qp() {
    pin(rg::kMapQp4, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key), sizeof(rg_qp_dir), 1024);
    pin(rg::kMapQp6, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp6_key), sizeof(rg_qp_dir), 1024);
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

TEST_F(PinnedState, QpMapOfAnotherKeyOrValueSizeIsRefusedByName) {
  pin_counters();
  pin(rg::kMapQp4, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key) + 8, 65536, 1024);
  pin(rg::kMapQp6, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp6_key), sizeof(rg_qp_dir), 1024);
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find(rg::kMapQp4), std::string::npos) << msg;
  EXPECT_NE(msg.find("key_size 24, expected 16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("value_size 65536, expected 64"), std::string::npos) << msg;

  Result r = rg("stats --qp");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapQp4), std::string::npos) << r.out;
}

TEST_F(PinnedState, Ipv6QpMapOfAnotherValueSizeIsRefusedByName) {
  pin_counters();
  pin(rg::kMapQp4, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key), sizeof(rg_qp_dir), 1024);
  pin(rg::kMapQp6, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp6_key), sizeof(rg_qp_dir) + 8, 1024);
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find(rg::kMapQp6), std::string::npos) << msg;
  EXPECT_NE(msg.find("value_size 72, expected 64"), std::string::npos) << msg;

  Result r = rg("stats --qp");
  EXPECT_EQ(r.rc, rg::kExitConflict) << r.out;
  EXPECT_NE(r.out.find(rg::kMapQp6), std::string::npos) << r.out;
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
  v4.dir[RG_DIR_INGRESS] = {50, 51200, 1, 1ull << 33, 9, 0, 2, 0, 0, 8, 0x654321, RG_QP_F_SEEN};
  v4.last_seen_ns = 777;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k4, &v4, BPF_NOEXIST), 0) << strerror(errno);
  rg_qp_key k6{};
  k6.family = AF_INET6;
  inet_pton(AF_INET6, "2001:db8::1", k6.src);
  inet_pton(AF_INET6, "2001:db8::2", k6.dst);
  k6.dest_qp = 0x22;
  LegacyQpState v6{};
  v6.dir[RG_DIR_EGRESS] = {10, 10240, 0, 0, 0, 0, 0, 0, 0, 0, 9, RG_QP_F_SEEN};
  v6.last_seen_ns = 888;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k6, &v6, BPF_NOEXIST), 0) << strerror(errno);

  auto carried = rg::migrate_qp_table(pin_, 2048);
  ASSERT_TRUE(carried);
  EXPECT_EQ(carried->carried(), 3u);  // the IPv6 QP's ingress was never seen
  // Until the attach completes the earlier build keeps its table.
  struct stat st {};
  EXPECT_EQ(stat((pin_ + "/" + rg::kMapQpLegacy).c_str(), &st), 0);
  for (const char* name : {rg::kMapQp4, rg::kMapQp6}) {
    rg::MapUsage u = rg::map_info(fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str())), name);
    EXPECT_EQ(u.max_entries, 2048u) << name;
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
        EXPECT_EQ(n.last_seen_ns, 777u) << d;
      }
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].gaps, 2u);
      EXPECT_EQ(row.state.dir[RG_DIR_INGRESS].gaps, UINT32_MAX);  // 32 bits now: saturated, not wrapped
    } else {
      EXPECT_EQ(std::memcmp(&row.key, &k6, sizeof(k6)), 0);
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].packets, 10u);
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].max_psn, 9u);
      EXPECT_EQ(row.state.dir[RG_DIR_EGRESS].last_seen_ns, 888u);
      EXPECT_EQ(row.state.dir[RG_DIR_INGRESS].packets, 0u);
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
  v4.dir[RG_DIR_EGRESS] = {100, 102400, 3, 2, 7, 1, 0, 4, 5, 6, 0x123456, RG_QP_F_SEEN};
  v4.last_seen_ns = 777;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k4, &v4, BPF_NOEXIST), 0) << strerror(errno);
  auto carried = rg::migrate_qp_table(pin_, 2048);
  ASSERT_TRUE(carried);

  // 10 more packets, 2 more resent, 1 more gap, a later PSN; and a new QP.
  LegacyQpState later = v4;
  later.dir[RG_DIR_EGRESS].packets += 10;
  later.dir[RG_DIR_EGRESS].bytes += 10240;
  later.dir[RG_DIR_EGRESS].retransmits += 2;
  later.dir[RG_DIR_EGRESS].gaps += 1;
  later.dir[RG_DIR_EGRESS].max_psn = 0x123500;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k4, &later, BPF_EXIST), 0) << strerror(errno);
  const rg_qp_key k_new = legacy_qp4(0x12, "192.0.2.2");
  LegacyQpState v_new{};
  v_new.dir[RG_DIR_INGRESS] = {4, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 77, RG_QP_F_SEEN};
  v_new.last_seen_ns = 999;
  ASSERT_EQ(bpf_map_update_elem(legacy, &k_new, &v_new, BPF_NOEXIST), 0) << strerror(errno);
  EXPECT_EQ(carried->carry_since_copy(), 2u);

  std::map<uint32_t, rg::QpRow> rows;
  for (const auto& row : rg::MapReader(pin_).qps()) rows[row.key.dest_qp] = row;
  ASSERT_EQ(rows.size(), 2u);
  const rg_qp_dir& e = rows[0x11].state.dir[RG_DIR_EGRESS];
  EXPECT_EQ(e.packets, 110u);
  EXPECT_EQ(e.bytes, 112640u);
  EXPECT_EQ(e.retransmits, 5u);
  EXPECT_EQ(e.gaps, 3u);
  EXPECT_EQ(e.lost, 7u);
  EXPECT_EQ(e.max_psn, 0x123456u) << "the tracking is the new programs'";
  const rg_qp_dir& n = rows[0x12].state.dir[RG_DIR_INGRESS];
  EXPECT_EQ(n.packets, 4u);
  EXPECT_EQ(n.max_psn, 77u);
  EXPECT_EQ(n.last_seen_ns, 999u);
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

// The BTF the loader writes for the maps it creates describes the value as
// the BPF object's BTF does, member by member: a field added to roceguard.h
// and not to the loader's description fails here.
void expect_btf_like_the_objects(int map_fd, const char* type_name) {
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
  const btf_type* b = btf__type_by_id(theirs, static_cast<__u32>(id));
  EXPECT_STREQ(btf__name_by_offset(mine, a->name_off), type_name);
  EXPECT_EQ(a->size, b->size) << type_name;
  EXPECT_EQ(btf_vlen(a), btf_vlen(b)) << type_name;
  for (uint16_t i = 0; i < std::min(btf_vlen(a), btf_vlen(b)); ++i) {
    EXPECT_STREQ(btf__name_by_offset(mine, btf_members(a)[i].name_off),
                 btf__name_by_offset(theirs, btf_members(b)[i].name_off))
        << type_name << " member " << i;
    EXPECT_EQ(btf_member_bit_offset(a, i), btf_member_bit_offset(b, i)) << type_name << " member " << i;
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

// --- QPs across the upgrade to the 64-byte per-QP value -------------------

using rg::QpDirV80;

// The rg_qp4 key of IPv4 QP dest_qp from 192.0.2.1 to 192.0.2.2, and the
// rg_qp6 one from 2001:db8::1 to 2001:db8::2.
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

// A direction as the build before the 64-byte value counted it: every
// count distinct, seed apart.
QpDirV80 v80_dir(uint64_t seed) {
  QpDirV80 v{};
  v.packets = 1000 + seed;
  v.bytes = 1024000 + seed;
  v.max_psn = 0x123400 + static_cast<uint32_t>(seed);
  v.resend_next = 0x56;
  v.flags = RG_QP_F_SEEN | RG_QP_F_RESENDING;
  v.last_seen_ns = 777 + seed;
  v.retransmits = 3 + seed;
  v.lost = 4 + seed;
  v.cnp = 5 + seed;
  v.ecn_ce = 6 + seed;
  v.gaps = static_cast<uint32_t>(7 + seed);
  v.nak_seq_err = static_cast<uint32_t>(8 + seed);
  v.nak_other = static_cast<uint32_t>(9 + seed);
  v.rnr_nak = static_cast<uint32_t>(10 + seed);
  return v;
}

// Every field of n as o's, the 64-bit counts this build keeps in 32 bits
// by their low 32 bits.
void expect_carried(const rg_qp_dir& n, const QpDirV80& o, const std::string& what) {
  EXPECT_EQ(n.packets, o.packets) << what;
  EXPECT_EQ(n.bytes, o.bytes) << what;
  EXPECT_EQ(n.max_psn, o.max_psn) << what;
  EXPECT_EQ(n.resend_next, o.resend_next) << what;
  EXPECT_EQ(n.flags, o.flags) << what;
  EXPECT_EQ(n.last_seen_ns, o.last_seen_ns) << what;
  EXPECT_EQ(n.retransmits, static_cast<uint32_t>(o.retransmits)) << what;
  EXPECT_EQ(n.lost, static_cast<uint32_t>(o.lost)) << what;
  EXPECT_EQ(n.cnp, static_cast<uint32_t>(o.cnp)) << what;
  EXPECT_EQ(n.ecn_ce, static_cast<uint32_t>(o.ecn_ce)) << what;
  EXPECT_EQ(n.gaps, o.gaps) << what;
  EXPECT_EQ(n.nak_seq_err, o.nak_seq_err) << what;
  EXPECT_EQ(n.nak_other, o.nak_other) << what;
  EXPECT_EQ(n.rnr_nak, o.rnr_nak) << what;
}

class QpValueUpgrade : public PinnedState {
 protected:
  // rg_qp4 and rg_qp6 as the build before the 64-byte value pinned them:
  // IPv4 QP 0x11 seen both ways (its egress CE count past 2^32), IPv6 QP
  // 0x22 seen leaving.
  void pin_v80_tables(uint32_t entries) {
    old4_ = pin(rg::kMapQp4, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key), sizeof(QpDirV80), entries);
    old6_ = pin(rg::kMapQp6, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp6_key), sizeof(QpDirV80), entries);
    ASSERT_GE(old4_, 0);
    ASSERT_GE(old6_, 0);
    e4_ = v80_dir(0);
    e4_.ecn_ce = (1ull << 32) + 6;  // a 32-bit count keeps 6
    i4_ = v80_dir(100);
    e6_ = v80_dir(200);
    const rg_qp4_key ke = qp4_key(0x11, RG_DIR_EGRESS), ki = qp4_key(0x11, RG_DIR_INGRESS);
    const rg_qp6_key k6 = qp6_key(0x22, RG_DIR_EGRESS);
    ASSERT_EQ(bpf_map_update_elem(old4_, &ke, &e4_, BPF_NOEXIST), 0) << strerror(errno);
    ASSERT_EQ(bpf_map_update_elem(old4_, &ki, &i4_, BPF_NOEXIST), 0) << strerror(errno);
    ASSERT_EQ(bpf_map_update_elem(old6_, &k6, &e6_, BPF_NOEXIST), 0) << strerror(errno);
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
    for (const char* name : {rg::kMapQp4, rg::kMapQp6}) {
      const int fd = fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str()));
      ASSERT_GE(fd, 0) << name;
      rg::MapUsage u = rg::map_info(fd, name);
      EXPECT_EQ(u.value_size, sizeof(rg_qp_dir)) << name;
      EXPECT_EQ(u.max_entries, entries) << name;
      EXPECT_NE(stat((pin_ + "/" + name + "_migrating").c_str(), &st), 0) << name;
    }
    auto got = rows();
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0x11].key.family, static_cast<uint32_t>(AF_INET));
    expect_carried(got[0x11].state.dir[RG_DIR_EGRESS], e4_, "IPv4 egress");
    EXPECT_EQ(got[0x11].state.dir[RG_DIR_EGRESS].ecn_ce, 6u);
    expect_carried(got[0x11].state.dir[RG_DIR_INGRESS], i4_, "IPv4 ingress");
    EXPECT_EQ(got[0x22].key.family, static_cast<uint32_t>(AF_INET6));
    expect_carried(got[0x22].state.dir[RG_DIR_EGRESS], e6_, "IPv6 egress");
    EXPECT_EQ(got[0x22].state.dir[RG_DIR_INGRESS].packets, 0u) << "never seen";
  }

  int old4_ = -1, old6_ = -1;
  QpDirV80 e4_{}, i4_{}, e6_{};
};

TEST_F(QpValueUpgrade, TablesOfThe80ByteValueAreCarriedIntoThe64ByteOnes) {
  pin_counters();
  pin_v80_tables(2048);
  // The reader refuses the old value by name until an attach carries it over.
  std::string msg = error_of([&] { rg::MapReader reader(pin_); });
  EXPECT_NE(msg.find("value_size 80, expected 64"), std::string::npos) << msg;
  EXPECT_TRUE(rg::qp_values_need_migration(pin_, rg::kMapQp4, 2048, 0));
  EXPECT_TRUE(rg::qp_values_need_migration(pin_, rg::kMapQp6, 2048, 0));
  EXPECT_FALSE(rg::qp_values_need_migration(pin_, rg::kMapQp4, 4096, 0)) << "another capacity is no upgrade";

  auto carried = rg::migrate_qp_values(pin_, 2048, 0);
  ASSERT_TRUE(carried);
  EXPECT_EQ(carried->carried(), 3u);
  expect_carried_over(2048);
  // The tables are of this build's value now: nothing to migrate.
  EXPECT_FALSE(rg::qp_values_need_migration(pin_, rg::kMapQp4, 2048, 0));
  EXPECT_FALSE(rg::migrate_qp_values(pin_, 2048, 0));
}

// The earlier build's programs go on counting into the old tables until
// the attach takes their hooks: once none runs, what each entry counted
// since the copy is added to the new tables (modulo 2^32 where they keep
// 32 bits; the PSN tracking is the new programs'), and a QP met first
// after the copy comes whole.
TEST_F(QpValueUpgrade, WhatTheEarlierBuildCountsDuringTheUpgradeIsCarried) {
  pin_counters();
  pin_v80_tables(2048);
  i4_.retransmits = UINT32_MAX;  // the next 3 wrap the 32-bit count to 2
  const rg_qp4_key ki = qp4_key(0x11, RG_DIR_INGRESS);
  ASSERT_EQ(bpf_map_update_elem(old4_, &ki, &i4_, BPF_EXIST), 0) << strerror(errno);
  auto carried = rg::migrate_qp_values(pin_, 2048, 0);
  ASSERT_TRUE(carried);

  // IPv4 egress: 10 more packets, 2 more CE marks, 1 more gap, a later PSN;
  // IPv4 ingress: 3 more resent; IPv6: a new QP; the IPv6 QP 0x22 as it was.
  QpDirV80 e4 = e4_, i4 = i4_;
  e4.packets += 10;
  e4.bytes += 10240;
  e4.ecn_ce += 2;
  e4.gaps += 1;
  e4.max_psn = 0x123500;
  i4.retransmits += 3;
  const rg_qp4_key ke = qp4_key(0x11, RG_DIR_EGRESS);
  ASSERT_EQ(bpf_map_update_elem(old4_, &ke, &e4, BPF_EXIST), 0) << strerror(errno);
  ASSERT_EQ(bpf_map_update_elem(old4_, &ki, &i4, BPF_EXIST), 0) << strerror(errno);
  const QpDirV80 n6 = v80_dir(300);
  const rg_qp6_key k_new = qp6_key(0x33, RG_DIR_INGRESS);
  ASSERT_EQ(bpf_map_update_elem(old6_, &k_new, &n6, BPF_NOEXIST), 0) << strerror(errno);
  EXPECT_EQ(carried->carry_since_copy(), 3u);

  auto got = rows();
  ASSERT_EQ(got.size(), 3u);
  const rg_qp_dir& e = got[0x11].state.dir[RG_DIR_EGRESS];
  EXPECT_EQ(e.packets, e4_.packets + 10);
  EXPECT_EQ(e.bytes, e4_.bytes + 10240);
  EXPECT_EQ(e.ecn_ce, 8u);
  EXPECT_EQ(e.gaps, e4_.gaps + 1);
  EXPECT_EQ(e.retransmits, e4_.retransmits);
  EXPECT_EQ(e.max_psn, e4_.max_psn) << "the tracking is the new programs'";
  const rg_qp_dir& i = got[0x11].state.dir[RG_DIR_INGRESS];
  EXPECT_EQ(i.retransmits, 2u) << "modulo 2^32, as the programs' own adds";
  EXPECT_EQ(i.packets, i4_.packets);
  expect_carried(got[0x22].state.dir[RG_DIR_EGRESS], e6_, "unchanged");
  expect_carried(got[0x33].state.dir[RG_DIR_INGRESS], n6, "met after the copy");
}

TEST_F(QpValueUpgrade, MigratedTablesCarryTheValueTypesOfTheObject) {
  pin_v80_tables(1024);
  ASSERT_TRUE(rg::migrate_qp_values(pin_, 1024, 0));
  for (const char* name : {rg::kMapQp4, rg::kMapQp6})
    expect_btf_like_the_objects(fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str())), "rg_qp_dir");
}

TEST_F(PinnedState, TablesOfTheLegacyQpMigrationCarryTheValueTypesOfTheObject) {
  pin(rg::kMapQpLegacy, BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp_key), sizeof(LegacyQpState), 64);
  ASSERT_TRUE(rg::migrate_qp_table(pin_, 1024));
  for (const char* name : {rg::kMapQp4, rg::kMapQp6})
    expect_btf_like_the_objects(fds_.emplace_back(bpf_obj_get((pin_ + "/" + name).c_str())), "rg_qp_dir");
}

// A load on the earlier build's pins starts (without the migration its
// tables are refused as of another value size): the object loads on the
// carried tables, and what the earlier programs counted meanwhile is
// carried once this load's programs run.
TEST_F(QpValueUpgrade, LoadOnTheEarlierBuildsTablesCarriesThemOver) {
  ASSERT_EQ(geteuid(), 0u) << "needs root: loads the BPF object";
  rg::Config cfg;
  cfg.qp_entries = 2048;
  pin_v80_tables(cfg.qp_entries);
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
    ASSERT_EQ(bpf_map_update_elem(old4_, &ke, &e4, BPF_EXIST), 0) << strerror(errno);
    obj.finish_pins();
  }
  e4_.packets += 5;
  e4_.cnp += 4;
  expect_carried_over(cfg.qp_entries);
}

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

// One thread inserts random QP keys into a small LRU table, evicting as it
// goes, while walks run: every walk ends and returns each key at most once,
// never more keys than the table holds.
TEST(MapWalk, LruChurnNeverRepeatsOrExceedsCapacity) {
  constexpr uint32_t kCapacity = 1024;
  int counters = create_map(BPF_MAP_TYPE_PERCPU_HASH, sizeof(rg_counter_key), sizeof(rg_counters),
                            RG_MAX_COUNTER_KEYS);
  int qp = create_map(BPF_MAP_TYPE_LRU_HASH, sizeof(rg_qp4_key), sizeof(rg_qp_dir), kCapacity);
  ASSERT_GE(counters, 0) << strerror(errno);
  ASSERT_GE(qp, 0) << strerror(errno);
  auto insert = [qp](std::mt19937& rng) {
    rg_qp4_key key{};
    key.dest_qp = rng();
    key.src[0] = static_cast<uint8_t>(rng());
    key.direction = rng() & 1;
    rg_qp_dir value{};
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
  rg::MapReader reader(counters, rg::QpMaps{qp, -1});
  size_t worst = 0;
  bool repeated = false;
  for (int walk = 0; walk < 200; ++walk) {
    // The walk itself: the reader joins a QP's two directions into a row.
    std::vector<std::string> walked;
    rg::walk_map(qp, sizeof(rg_qp4_key), sizeof(rg_qp_dir), kCapacity, [&](const uint8_t* k, const uint8_t*) {
      walked.emplace_back(reinterpret_cast<const char*>(k), sizeof(rg_qp4_key));
    });
    std::set<std::string> keys(walked.begin(), walked.end());
    repeated |= keys.size() != walked.size();
    worst = std::max(worst, walked.size());
    worst = std::max(worst, reader.qps().size());
    auto usage = reader.usage(qp, rg::kMapQp4);
    worst = std::max<size_t>(worst, usage.entries);
  }
  stop = true;
  churn.join();
  close(counters);
  close(qp);
  EXPECT_FALSE(repeated);
  EXPECT_LE(worst, kCapacity);
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
