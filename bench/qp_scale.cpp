// Scale of the per-QP tables: ns per packet with 1 k, 64 k and 1 M tracked
// QPs, with uniform and Zipf access, and the kernel memory one tracked QP
// costs in each family's table; the data path's slot table beside the LRU
// hash it replaced, the reference.
//
// For each size the object is loaded with rg_qp4 (and rg_qp6) sized to
// exactly that many entries (set_qp_entries: rg_qp_slots() of them), and
// rg_qp4 is filled from userspace (QpSlotTable::place, in the slot the
// programs would claim) with the keys the programs derive from the
// packets: half the QPs in the egress direction (what rg_tc_egress looks
// up), half ingress (rg_xdp_ingress), as a gateway's table holds them. The
// table must hold every key: the run stops otherwise. Each measured run is
// one BPF_PROG_TEST_RUN (repeat = 1, fresh input) of a RoCE packet for a QP
// drawn from its hook's half: uniformly, which spreads lookups over the
// whole table, or by a Zipf law (s = 1.0; rank k drawn with probability
// proportional to 1/k, the ranks scattered over the QP numbers), where most
// QPs are idle and a few carry most packets. qp_created counting up during
// the runs would mean misses: it is reported so a wrong key layout cannot
// pass unnoticed.
//
// The reference (qp_loop.bpf.c) is the layout of before the slot tables:
// an LRU hash keyed by rg_qp4_key with the 64-byte value (qp_loop.h),
// sized to the same entries and filled from userspace with the same keys.
// An LRU hash may lose some of them to its own evictions while it fills
// (its free lists are per CPU); how many it holds is reported, and the
// loop below draws only keys both tables hold.
//
// Memory is what the kernel charges each map (memlock, as `bpftool map
// show` prints it), over the entries it is sized for: bytes per QP
// direction at capacity. Both layouts preallocate, so it does not depend
// on the fill. The reference's IPv6 figure is qp_loop's qp_lru6, sized the
// same and never filled. Beside the data path's memory, how many slots (a
// cache line each) a lookup of each key reads, as rg_qp_find reads them,
// and the share of keys in their first candidate bucket.
//
// Then, with --loop-rounds N (default 20), the tables' lookups in a loop
// inside one program run: 65 536 lookups per run, so the test run's own
// cost and its skb allocation (which misses the cache by itself) are paid
// once, not per lookup. "lru_hash" is the reference (qp_loop.bpf.c);
// "datapath" is the roceguard object's own rg_qp4, looked up by
// qp_datapath.bpf.c with the data path's code (rg_account's probe,
// rg_qp_find of bpf/qp_table.h). Two patterns: uniform over every tracked
// QP, and a skew where 10 000 QPs (or all, below that) carry 90 % of the
// lookups and the rest are uniform. Each round draws new keys for every
// size and pattern, and both tables look them up in that round (which goes
// first alternates by round); ns per lookup is the run's duration minus a
// walk of the same keys without the table, over 65 536; each ratio (to the
// same table's first-size uniform figure, and the data path's to the
// reference's at the same size and access) is the median of the per-round
// ratios, with a 95 % bootstrap interval.
//
//   bench_qp_scale [--sizes 1024,65536,1048576] [--rounds N] [--calls N] [--loop-rounds N] [--json FILE]
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>

#include "bench_util.h"
#include "dataplane/maps.h"
#include "empty.skel.h"
#include "qp_datapath.skel.h"
#include "qp_loop.h"
#include "qp_loop.skel.h"
#include "roceguard.skel.h"

namespace {

using namespace rg::bench;
using rg::test::Bytes;
using rg::test::PacketBuilder;

Bytes roce_frame(uint8_t tos) {
  rg::test::Bth bth;
  return PacketBuilder().ipv4(kHost4, kRemoteHost4).tos(tos).udp(49152, rg::test::kRoceV2Port).bth(bth).payload(1024).build();
}

// The reference's value is the LRU tables' 64-byte rg_qp_dir, as the
// loader's migration reads it.
static_assert(sizeof(qp_dir_v64) == sizeof(rg::QpDirV64) && offsetof(qp_dir_v64, last_seen_ns) ==
                                                                 offsetof(rg::QpDirV64, last_seen_ns) &&
                  offsetof(qp_dir_v64, retransmits) == offsetof(rg::QpDirV64, retransmits),
              "qp_loop.h's value is rg::QpDirV64");

enum Pattern { kUniform, kZipf, kPatterns };
constexpr const char* kPatternNames[kPatterns] = {"uniform", "zipf"};

// The reference table of a size: qp_loop.bpf.c loaded with qp_lru4 and
// qp_lru6 sized to the size's entries, qp_lru4 filled with its keys.
struct Lru {
  std::unique_ptr<qp_loop, decltype(&qp_loop__destroy)> skel{nullptr, qp_loop__destroy};
  uint64_t memlock4 = 0, memlock6 = 0;
  std::vector<uint32_t> held;  // the entries it holds after the fill
  double fill_s = 0;
};

struct Size {
  uint32_t entries;  // what the tables are sized for
  uint32_t filled;   // keys written: entries / 2 per direction; entry e is QP e / 2 in direction e % 2
  std::unique_ptr<Object> obj;
  std::array<std::vector<double>, kPatterns> tc_ns, xdp_ns;
  uint64_t memlock4 = 0, memlock6 = 0;  // the data path's tables
  uint32_t slots4 = 0, slots6 = 0;
  uint32_t held = 0;  // keys the data path's rg_qp4 holds after the fill
  double slots_read = 0;       // mean slots (cache lines) a lookup of a key reads, over the keys
  double in_first_bucket = 0;  // share of the keys in their first candidate bucket
  double chase = 0;  // ns per random cache-line load over the table's footprint
  uint64_t qp_new_during_runs = 0;
  double fill_s = 0;
  std::array<std::vector<uint32_t>, 2> psn;  // per hook: each QP's next PSN
  Lru lru;
};

// The key of entry e of a size's tables (base: the addresses).
rg_qp4_key entry_key(rg_qp4_key base, uint32_t e) {
  base.dest_qp = e / 2;
  base.direction = e % 2;
  return base;
}

// The addresses of the keys rg_tc_egress and rg_xdp_ingress build for
// kHost4 -> kRemoteHost4.
rg_qp4_key base_key() {
  rg_qp4_key k{};
  inet_pton(AF_INET, kHost4, k.src);
  inet_pton(AF_INET, kRemoteHost4, k.dst);
  return k;
}

// Loads the reference for s (qp_loop.bpf.c, its LRU hashes sized to
// s.entries) and fills qp_lru4 with s's keys, as the data path's table is.
void load_lru(Size& s) {
  Lru& l = s.lru;
  l.skel.reset(qp_loop__open());
  if (!l.skel) throw std::runtime_error("qp_loop.bpf.o: open failed");
  if (bpf_map__set_max_entries(l.skel->maps.qp_lru4, s.entries) ||
      bpf_map__set_max_entries(l.skel->maps.qp_lru6, s.entries))
    throw std::runtime_error("qp_loop: cannot size its LRU hashes");
  if (qp_loop__load(l.skel.get())) throw std::runtime_error("qp_loop.bpf.o: load failed");
  const int fd = bpf_map__fd(l.skel->maps.qp_lru4);
  const rg_qp4_key base = base_key();
  const qp_dir_v64 v{};
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t e = 0; e < s.filled; ++e) {
    const rg_qp4_key k = entry_key(base, e);
    if (bpf_map_update_elem(fd, &k, &v, BPF_ANY))
      throw std::runtime_error("filling qp_lru4: " + std::string(std::strerror(errno)));
  }
  l.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  qp_dir_v64 got;
  for (uint32_t e = 0; e < s.filled; ++e) {
    const rg_qp4_key k = entry_key(base, e);
    if (bpf_map_lookup_elem(fd, &k, &got) == 0) l.held.push_back(e);
  }
  l.memlock4 = map_memlock(fd);
  l.memlock6 = map_memlock(bpf_map__fd(l.skel->maps.qp_lru6));
}

// What a lookup of each of s's keys reads in the data path's rg_qp4, as
// rg_qp_find (bpf/qp_table.h) reads it: the probe sequence, the two
// buckets in step from their home slots, leaving a bucket at its first
// empty slot, up to the key. Each slot is a cache line of its own. Read
// from a mapping of the table (the id words), with roceguard.h's hash,
// bucket and home helpers.
void slots_read(Size& s) {
  const int fd = bpf_map__fd(s.obj->skel()->maps.rg_qp4);
  const size_t page = sysconf(_SC_PAGESIZE);
  const size_t len = (size_t{s.slots4} * sizeof(rg_qp4_slot) + page - 1) / page * page;
  void* area = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (area == MAP_FAILED) throw std::runtime_error("rg_qp4 mmap: " + std::string(std::strerror(errno)));
  const auto* slots = static_cast<const rg_qp4_slot*>(area);
  const uint32_t buckets = s.slots4 / RG_QP_BUCKET_SLOTS;
  const rg_qp4_key base = base_key();
  uint64_t read = 0, first = 0;
  for (uint32_t e = 0; e < s.filled; ++e) {
    const rg_qp4_key k = entry_key(base, e);
    __u64 addr = 0;
    std::memcpy(&addr, k.src, 4);
    std::memcpy(reinterpret_cast<uint8_t*>(&addr) + 4, k.dst, 4);
    const __u64 h = rg_qp_hash(&addr, 1, rg_qp_id(k.dest_qp, k.direction, 0));
    const __u32 want = rg_qp_id(k.dest_qp, k.direction, RG_QP_SLOT_READY);
    bool found = false, done[2] = {false, false};
    for (uint32_t j = 0; j < RG_QP_BUCKET_SLOTS && !found && !(done[0] && done[1]); ++j)
      for (int b = 0; b < 2 && !found; ++b) {
        if (done[b]) continue;
        const uint32_t i = rg_qp_bucket(h, b, buckets) * RG_QP_BUCKET_SLOTS +
                           ((rg_qp_home(h, b) + j) & (RG_QP_BUCKET_SLOTS - 1));
        const rg_qp4_slot& slot = slots[i];
        ++read;
        if (slot.head.id == RG_QP_SLOT_EMPTY) {
          done[b] = true;
        } else if (slot.head.id == want && std::memcmp(slot.src, k.src, 4) == 0 &&
                   std::memcmp(slot.dst, k.dst, 4) == 0) {
          found = true;
          first += b == 0;
        }
      }
  }
  munmap(area, len);
  s.slots_read = double(read) / s.filled;
  s.in_first_bucket = double(first) / s.filled;
}

// Fills the data path's rg_qp4 of s with its keys through the table's
// mapping, each in the slot the programs would claim for it; refuses a
// table that does not hold them all.
void fill_datapath(Size& s) {
  const int fd = bpf_map__fd(s.obj->skel()->maps.rg_qp4);
  rg::QpSlotTable t(fd, AF_INET, true);
  rg::QpSlotTable t6(bpf_map__fd(s.obj->skel()->maps.rg_qp6), AF_INET6);
  s.slots4 = t.slots();
  s.slots6 = t6.slots();
  rg_qp_key qp{};
  qp.family = AF_INET;
  inet_pton(AF_INET, kHost4, qp.src);
  inet_pton(AF_INET, kRemoteHost4, qp.dst);
  const uint32_t now = rg::qp_clock_now();
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t e = 0; e < s.filled; ++e) {
    qp.dest_qp = e / 2;
    s.held += t.place(qp, e % 2, rg_qp_dir{}, now);
  }
  s.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint32_t ready = t.walk([](const rg_qp_key&, rg_direction, const rg_qp_slot_head&) {});
  if (s.held != s.filled || ready != s.filled)
    throw std::runtime_error("the data path's rg_qp4 sized for " + std::to_string(s.entries) + " holds " +
                             std::to_string(s.held) + " of " + std::to_string(s.filled) + " keys (" +
                             std::to_string(ready) + " slots ready): it must hold them all");
  s.memlock4 = map_memlock(fd);
  s.memlock6 = map_memlock(bpf_map__fd(s.obj->skel()->maps.rg_qp6));
  slots_read(s);
}

uint64_t qp_new(const Object& o) {
  rg::MapReader r(bpf_map__fd(o.skel()->maps.rg_counters));
  auto rows = r.counters();
  return rg::sum_packets(rows, RG_DIR_EGRESS, RG_EV_QP_NEW) + rg::sum_packets(rows, RG_DIR_INGRESS, RG_EV_QP_NEW);
}

// Draws ranks 0..n-1 with P(k) proportional to 1/(k+1), mapped through a
// random permutation onto the QPs, so the popular QPs are not neighbours.
class Zipf {
 public:
  Zipf(uint32_t n, std::mt19937& rng) : cdf_(n), qp_(n) {
    double sum = 0;
    for (uint32_t k = 0; k < n; ++k) cdf_[k] = sum += 1.0 / (k + 1);
    for (auto& c : cdf_) c /= sum;
    std::iota(qp_.begin(), qp_.end(), 0u);
    std::shuffle(qp_.begin(), qp_.end(), rng);
  }
  uint32_t operator()(std::mt19937& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const size_t k = std::min<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(), cdf_.size() - 1);
    return qp_[k];
  }

 private:
  std::vector<double> cdf_;
  std::vector<uint32_t> qp_;
};

// ns per dependent load when walking a random cycle of cache lines over
// bytes of memory in 4 KiB pages, as the table's preallocated elements are
// (vmalloc): the cost of one cache-line miss at that footprint, TLB misses
// included. The per-packet cost's growth divided by it is how many lines a
// packet misses.
double chase_ns(size_t bytes, std::mt19937& rng) {
  constexpr size_t kLine = 64;
  const size_t lines = std::max<size_t>(bytes / kLine, 2);
  std::vector<uint32_t> order(lines);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  // Small pages, as vmalloc maps the kernel's: no transparent huge pages.
  const size_t len = lines * kLine;
  void* area = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) throw std::runtime_error("mmap: " + std::string(std::strerror(errno)));
  madvise(area, len, MADV_NOHUGEPAGE);
  auto* mem = static_cast<uint64_t*>(area);
  constexpr size_t kWords = kLine / sizeof(uint64_t);
  // Line order[i] points at line order[i + 1]: one cycle through them all.
  for (size_t i = 0; i < lines; ++i) mem[order[i] * kWords] = order[(i + 1) % lines];
  uint64_t at = order[0];
  const size_t steps = 2000000;
  for (size_t i = 0; i < lines && i < steps; ++i) at = mem[at * kWords];  // warm what fits
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < steps; ++i) at = mem[at * kWords];
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  volatile uint64_t sink = at;
  (void)sink;
  munmap(area, len);
  return ns / steps;
}

constexpr uint32_t kLoopKeys = QP_LOOP_KEYS;  // of qp_loop.bpf.c and qp_datapath.bpf.c
constexpr uint32_t kHotQps = 10000;
constexpr double kHotShare = 0.9;
enum LoopPattern { kLoopUniform, kLoopSkew, kLoopPatterns };
constexpr const char* kLoopPatternNames[kLoopPatterns] = {"uniform", "10k carry 90 %"};
enum LoopTable { kLruHash, kDatapath, kLoopTables };
constexpr const char* kLoopTableNames[kLoopTables] = {"lru_hash", "datapath"};

// Loads qp_datapath.bpf.c for s: every map it shares a name with the
// roceguard object is that object's (rg_qp4 above all), qp_keys and
// qp_found are the reference's, and its bucket counts are the object's.
std::unique_ptr<qp_datapath, decltype(&qp_datapath__destroy)> load_datapath_loop(const Size& s) {
  std::unique_ptr<qp_datapath, decltype(&qp_datapath__destroy)> dp(qp_datapath__open(), qp_datapath__destroy);
  if (!dp) throw std::runtime_error("qp_datapath.bpf.o: open failed");
  const roceguard* rg = s.obj->skel();
  dp->rodata->rg_qp4_buckets = rg->rodata->rg_qp4_buckets;
  dp->rodata->rg_qp6_buckets = rg->rodata->rg_qp6_buckets;
  dp->rodata->rg_cfg = rg->rodata->rg_cfg;
  if (rg->rodata->rg_qp4_buckets != s.slots4 / RG_QP_BUCKET_SLOTS)
    throw std::runtime_error("roceguard's rg_qp4_buckets " + std::to_string(rg->rodata->rg_qp4_buckets) +
                             " is not its rg_qp4's " + std::to_string(s.slots4) + " slots / " +
                             std::to_string(RG_QP_BUCKET_SLOTS));
  bpf_map* m;
  bpf_object__for_each_map(m, dp->obj) {
    if (bpf_map__is_internal(m)) continue;
    const std::string name = bpf_map__name(m);
    int fd = -1;
    if (name == "qp_keys")
      fd = bpf_map__fd(s.lru.skel->maps.qp_keys);
    else if (name == "qp_found")
      fd = bpf_map__fd(s.lru.skel->maps.qp_found);
    else if (const bpf_map* theirs = bpf_object__find_map_by_name(rg->obj, name.c_str()))
      fd = bpf_map__fd(theirs);
    if (fd < 0 || bpf_map__reuse_fd(m, fd))
      throw std::runtime_error("qp_datapath: cannot reuse the map " + name);
  }
  if (qp_datapath__load(dp.get())) throw std::runtime_error("qp_datapath.bpf.o: load failed");
  return dp;
}

// The lookups of a loop inside one program run, per size and pattern, in
// the reference and in the data path's table on the same keys: prints the
// table and returns its JSON rows.
nlohmann::json lookup_loop(const std::vector<Size>& sizes, unsigned rounds, int ifindex, std::mt19937& rng) {
  if (rounds == 0 || sizes.empty()) return nullptr;
  struct Loop {
    std::unique_ptr<qp_datapath, decltype(&qp_datapath__destroy)> dp{nullptr, qp_datapath__destroy};
    std::vector<uint32_t> keys;  // the entries drawn from: those both tables hold
    std::vector<uint32_t> hot;   // the skew's hot QPs, as entry numbers
    std::array<std::array<std::vector<double>, kLoopPatterns>, kLoopTables> ns;
  };
  const rg_qp4_key base = base_key();
  std::vector<Loop> loops(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    loops[i].dp = load_datapath_loop(sizes[i]);
    // The data path's table holds every key (fill_datapath checked), the
    // reference those in its list.
    loops[i].keys = sizes[i].lru.held;
    if (loops[i].keys.empty()) throw std::runtime_error("the reference holds no key");
    std::vector<uint32_t> all = loops[i].keys;
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(std::min<size_t>(kHotQps, all.size()));
    loops[i].hot = std::move(all);
  }
  const Bytes frame = roce_frame(0);
  std::vector<rg_qp4_key> keys(kLoopKeys, base);
  std::vector<uint32_t> index(kLoopKeys);
  std::iota(index.begin(), index.end(), 0u);
  for (unsigned r = 0; r < rounds; ++r)
    for (size_t i = 0; i < sizes.size(); ++i)
      for (int pattern = 0; pattern < kLoopPatterns; ++pattern) {
        Loop& l = loops[i];
        const qp_loop& ref = *sizes[i].lru.skel;
        std::uniform_int_distribution<size_t> any(0, l.keys.size() - 1);
        std::uniform_int_distribution<size_t> hot(0, l.hot.size() - 1);
        std::bernoulli_distribution in_hot(kHotShare);
        for (auto& k : keys) k = entry_key(base, pattern == kLoopSkew && in_hot(rng) ? l.hot[hot(rng)] : l.keys[any(rng)]);
        LIBBPF_OPTS(bpf_map_batch_opts, opts);
        uint32_t count = kLoopKeys;
        if (bpf_map_update_batch(bpf_map__fd(ref.maps.qp_keys), index.data(), keys.data(), &count, &opts))
          throw std::runtime_error("qp_keys: " + std::string(std::strerror(errno)));
        // Both tables on the same keys, each followed by its floor; which
        // goes first alternates by round, as the first warms the keys.
        for (int n = 0; n < kLoopTables; ++n) {
          const int table = r % 2 ? kLoopTables - 1 - n : n;
          const int prog = table == kLruHash ? bpf_program__fd(ref.progs.qp_lookups)
                                             : bpf_program__fd(l.dp->progs.qp_datapath_lookups);
          const double with = test_run_xdp(prog, ifindex, frame).duration_ns;
          uint64_t found = 0;
          uint32_t zero = 0;
          bpf_map_lookup_elem(bpf_map__fd(ref.maps.qp_found), &zero, &found);
          if (found != kLoopKeys)
            throw std::runtime_error(std::string(kLoopTableNames[table]) + ": " + std::to_string(found) + " of " +
                                     std::to_string(kLoopKeys) + " keys found: a key the fill did not leave there");
          const double floor = test_run_xdp(bpf_program__fd(ref.progs.qp_keys_only), ifindex, frame).duration_ns;
          l.ns[table][pattern].push_back((with - floor) / kLoopKeys);
        }
      }
  std::cout << "\nlookups in a loop inside one program run: " << kLoopKeys << " per run, " << rounds
            << " rounds; lru_hash: the reference LRU hash (64-byte value), datapath: roceguard's rg_qp4 slot table "
               "with the data path's lookup; ns per lookup (minus the same walk without the table); x first: "
               "median of the per-round ratios to the same table's first-size uniform figure; datapath/LRU: median "
               "of the per-round ratios at the same size and access; 95 % bootstrap intervals\n";
  Table t({"tracked QPs", "access", "LRU ns/lookup", "x first", "95 %", "datapath ns/lookup", "x first", "95 %",
           "datapath/LRU", "95 %"});
  nlohmann::json rows = nlohmann::json::array();
  // Per-round ratios of a to b, rounds where b is not positive left out.
  const auto ratios = [](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> out;
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k)
      if (b[k] > 0) out.push_back(a[k] / b[k]);
    return out;
  };
  const auto interval = [](std::pair<double, double> ci) { return fmt("%.2f", ci.first) + "-" + fmt("%.2f", ci.second); };
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int pattern = 0; pattern < kLoopPatterns; ++pattern) {
      std::vector<std::string> cells{std::to_string(sizes[i].entries), kLoopPatternNames[pattern]};
      for (int table = 0; table < kLoopTables; ++table) {
        const auto& v = loops[i].ns[table][pattern];
        const auto r = ratios(v, loops.front().ns[table][kLoopUniform]);
        const auto ci = median_ci95(r);
        cells.insert(cells.end(), {fmt("%.1f", median(v)), fmt("%.2f", median(r)), interval(ci)});
        nlohmann::json row = {{"table", kLoopTableNames[table]},
                              {"entries", sizes[i].entries},
                              {"keys_drawn_from", loops[i].keys.size()},
                              {"pattern", kLoopPatternNames[pattern]},
                              {"ns_per_lookup", v},
                              {"ns_per_lookup_median", median(v)},
                              {"ratio_to_first_uniform_per_round", r},
                              {"ratio_median", median(r)},
                              {"ratio_ci95", {ci.first, ci.second}}};
        if (table == kDatapath) {
          const auto to_lru = ratios(v, loops[i].ns[kLruHash][pattern]);
          const auto ci_lru = median_ci95(to_lru);
          cells.insert(cells.end(), {fmt("%.2f", median(to_lru)), interval(ci_lru)});
          row["ratio_to_lru_hash_per_round"] = to_lru;
          row["ratio_to_lru_hash_median"] = median(to_lru);
          row["ratio_to_lru_hash_ci95"] = {ci_lru.first, ci_lru.second};
        }
        rows.push_back(row);
      }
      t.row(cells);
    }
  t.print();
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"roceguard per-packet cost against the number of tracked QPs"};
  std::vector<uint32_t> sizes{1024, 65536, 1048576};
  unsigned rounds = 10, calls = 5000, loop_rounds = 20;
  std::string json_path = "qp_scale.json";
  app.add_option("--sizes", sizes, "tracked QP directions the tables are sized for (half per direction)")
      ->delimiter(',')
      ->check(CLI::Range(2u, 1u << 24));
  app.add_option("--loop-rounds", loop_rounds, "rounds of the lookups in one program run (0: none)");
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1u, 1000u));
  app.add_option("--calls", calls, "test runs per size, pattern, hook and round")->check(CLI::Range(10u, 1000000u));
  app.add_option("--json", json_path, "JSON output");
  CLI11_PARSE(app, argc, argv);

  try {
    quiet_libbpf();
    const int ifindex = enter_private_netns();
    std::unique_ptr<empty, decltype(&empty__destroy)> floor(empty__open_and_load(), empty__destroy);
    if (!floor) throw std::runtime_error("empty.bpf.o: load failed");
    std::vector<Size> runs;
    std::mt19937 rng(42);
    for (uint32_t n : sizes) {
      Size s;
      s.entries = n;
      s.filled = n / 2 * 2;
      s.obj = std::make_unique<Object>(config(RG_CFG_F_REMARK | RG_CFG_F_REPAIR | RG_CFG_F_ACCOUNT), n);
      fill_datapath(s);
      load_lru(s);
      for (auto& p : s.psn) p.assign(n / 2, 0);
      runs.push_back(std::move(s));
    }

    Bytes egress = roce_frame(26 << 2 | 2), ingress = roce_frame(0);
    const size_t bth = bth_offset(false);
    std::vector<double> floor_tc, floor_xdp;
    std::vector<Zipf> zipf;
    for (const auto& s : runs) zipf.emplace_back(s.entries / 2, rng);
    for (auto& s : runs) s.qp_new_during_runs = qp_new(*s.obj);
    for (unsigned r = 0; r < rounds; ++r) {
      for (unsigned i = 0; i < calls; ++i) {
        floor_tc.push_back(test_run_tc(bpf_program__fd(floor->progs.empty_tc), ifindex, egress).duration_ns);
        floor_xdp.push_back(test_run_xdp(bpf_program__fd(floor->progs.empty_xdp), ifindex, ingress).duration_ns);
      }
      // Each program gets its own random sequence: were the XDP run to
      // follow the TC run on the same QP, it would find the entry already
      // in the CPU cache and hide the table's real cost.
      for (size_t si = 0; si < runs.size(); ++si) {
        Size& s = runs[si];
        std::uniform_int_distribution<uint32_t> uniform(0, s.entries / 2 - 1);
        for (int pattern = 0; pattern < kPatterns; ++pattern)
          for (int hook = 0; hook < 2; ++hook) {
            Bytes& f = hook == 0 ? egress : ingress;
            for (unsigned i = 0; i < calls; ++i) {
              const uint32_t q = pattern == kUniform ? uniform(rng) : zipf[si](rng);
              set_dest_qp(f, bth, q);
              uint32_t& psn = s.psn[hook][q];
              set_psn(f, bth, psn);
              psn = (psn + 1) & RG_PSN_MASK;
              if (hook == 0)
                s.tc_ns[pattern].push_back(test_run_tc(s.obj->tc_fd(), ifindex, f).duration_ns);
              else
                s.xdp_ns[pattern].push_back(test_run_xdp(s.obj->xdp_fd(), ifindex, f).duration_ns);
            }
          }
      }
    }
    for (auto& s : runs) s.qp_new_during_runs = qp_new(*s.obj) - s.qp_new_during_runs;
    const nlohmann::json loop = lookup_loop(runs, loop_rounds, ifindex, rng);
    for (auto& s : runs) s.chase = chase_ns(s.memlock4, rng);

    const double ftc = trimmed_mean(floor_tc), fxdp = trimmed_mean(floor_xdp);
    std::cout << "QP drawn per packet, BPF_PROG_TEST_RUN repeat=1, " << rounds << " rounds x " << calls
              << " packets per size, pattern and hook; floor (empty program) tc " << ftc << " ns, xdp " << fxdp
              << " ns\n\n";
    Table t({"tracked QPs", "access", "tc egress ns", "net", "x 1k", "xdp ingress ns", "net", "x 1k", "misses"});
    nlohmann::json out = nlohmann::json::array();
    for (int pattern = 0; pattern < kPatterns; ++pattern) {
      // The ratio's base is the first size's uniform figure: at 1 k every
      // entry is in the cache whatever the pattern.
      const double base_tc = trimmed_mean(runs.front().tc_ns[kUniform]) - ftc,
                   base_xdp = trimmed_mean(runs.front().xdp_ns[kUniform]) - fxdp;
      for (const auto& s : runs) {
        const double tc = trimmed_mean(s.tc_ns[pattern]), xdp = trimmed_mean(s.xdp_ns[pattern]);
        t.row({std::to_string(s.entries), kPatternNames[pattern], fmt("%.0f", tc), fmt("%.0f", tc - ftc),
               fmt("%.2f", (tc - ftc) / base_tc), fmt("%.0f", xdp), fmt("%.0f", xdp - fxdp),
               fmt("%.2f", (xdp - fxdp) / base_xdp), std::to_string(s.qp_new_during_runs)});
        out.push_back({{"entries", s.entries},
                       {"pattern", kPatternNames[pattern]},
                       {"tc_ns_median", tc},
                       {"tc_net_ns", tc - ftc},
                       {"tc_net_ratio_to_first", (tc - ftc) / base_tc},
                       {"xdp_ns_median", xdp},
                       {"xdp_net_ns", xdp - fxdp},
                       {"xdp_net_ratio_to_first", (xdp - fxdp) / base_xdp},
                       {"qp_created_during_runs", s.qp_new_during_runs}});
      }
    }
    t.print();
    std::cout << "\n";
    // How many cache lines a packet misses at each size: its cost's growth
    // over the first size (uniform access) in units of one random load's.
    std::cout << "\n";
    Table c({"entries", "footprint MiB", "random load ns", "tc growth ns", "xdp growth ns", "tc lines", "xdp lines"});
    nlohmann::json lines = nlohmann::json::array();
    for (const auto& s : runs) {
      const double tc = trimmed_mean(s.tc_ns[kUniform]) - trimmed_mean(runs.front().tc_ns[kUniform]);
      const double xdp = trimmed_mean(s.xdp_ns[kUniform]) - trimmed_mean(runs.front().xdp_ns[kUniform]);
      const double miss = s.chase - runs.front().chase;
      c.row({std::to_string(s.entries), fmt("%.1f", s.memlock4 / 1048576.0), fmt("%.1f", s.chase), fmt("%.0f", tc),
             fmt("%.0f", xdp), miss > 1 ? fmt("%.1f", tc / miss) : "-", miss > 1 ? fmt("%.1f", xdp / miss) : "-"});
      lines.push_back({{"entries", s.entries},
                       {"random_load_ns", s.chase},
                       {"tc_growth_ns", tc},
                       {"xdp_growth_ns", xdp}});
    }
    c.print();
    std::cout << "\n";
    std::cout << "per-QP tables after the fill: keys held of those written; memory charged (memlock) per QP "
                 "direction the table is sized for; datapath: mean slots (64-byte lines) a lookup of a key reads "
                 "(rg_qp_find), keys in their first candidate bucket\n";
    Table m({"entries", "table", "keys held", "IPv4 memlock MiB", "bytes/IPv4 QP dir", "IPv6 memlock MiB",
             "bytes/IPv6 QP dir", "fill s", "slots read/key", "in 1st bucket"});
    nlohmann::json mem = nlohmann::json::array();
    for (const auto& s : runs) {
      const auto row = [&](const char* table, uint64_t m4, uint64_t m6, size_t held, double fill_s) {
        const double per4 = static_cast<double>(m4) / s.entries, per6 = static_cast<double>(m6) / s.entries;
        const bool dp = std::string(table) == "datapath";
        m.row({std::to_string(s.entries), table, std::to_string(held) + " of " + std::to_string(s.filled),
               fmt("%.1f", m4 / 1048576.0), fmt("%.1f", per4), fmt("%.1f", m6 / 1048576.0), fmt("%.1f", per6),
               fmt("%.2f", fill_s), dp ? fmt("%.2f", s.slots_read) : "-",
               dp ? fmt("%.1f", 100 * s.in_first_bucket) + " %" : "-"});
        return nlohmann::json{{"table", table},
                              {"entries", s.entries},
                              {"keys_filled", s.filled},
                              {"keys_held", held},
                              {"memlock4_bytes", m4},
                              {"bytes_per_ipv4_qp", per4},
                              {"memlock6_bytes", m6},
                              {"bytes_per_ipv6_qp", per6},
                              {"key4_bytes", sizeof(rg_qp4_key)},
                              {"key6_bytes", sizeof(rg_qp6_key)},
                              {"fill_seconds", fill_s}};
      };
      nlohmann::json lru = row("lru_hash", s.lru.memlock4, s.lru.memlock6, s.lru.held.size(), s.lru.fill_s);
      lru["value_bytes"] = sizeof(qp_dir_v64);
      mem.push_back(lru);
      nlohmann::json dp = row("datapath", s.memlock4, s.memlock6, s.held, s.fill_s);
      dp["slots4"] = s.slots4;
      dp["slots6"] = s.slots6;
      dp["slot4_bytes"] = sizeof(rg_qp4_slot);
      dp["slot6_bytes"] = sizeof(rg_qp6_slot);
      dp["bucket_slots"] = RG_QP_BUCKET_SLOTS;
      dp["slots_read_per_key"] = s.slots_read;
      dp["keys_in_first_bucket"] = s.in_first_bucket;
      dp["value_bytes"] = sizeof(rg_qp_dir);
      mem.push_back(dp);
    }
    m.print();
    write_json(json_path, {{"benchmark", "qp_scale"},
                           {"floor_tc_ns", ftc},
                           {"floor_xdp_ns", fxdp},
                           {"rounds", rounds},
                           {"calls", calls},
                           {"results", out},
                           {"cache_lines", lines},
                           {"lookup_loop", loop},
                           {"memory", mem}});
  } catch (const std::exception& e) {
    std::cerr << "bench_qp_scale: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
