// Scale of the per-QP tables: ns per packet with 1 k, 64 k and 1 M tracked
// QPs, with uniform and Zipf access, and the kernel memory one tracked QP
// costs in each family's table.
//
// For each size the object is loaded with rg_qp4 (and rg_qp6) sized to
// exactly that many entries, and rg_qp4 is filled from userspace with the
// keys the programs derive from the packets: half the QPs in the egress
// direction (what rg_tc_egress looks up), half ingress (rg_xdp_ingress), as
// a gateway's table holds them. Each measured run is one BPF_PROG_TEST_RUN
// (repeat = 1, fresh input) of a RoCE packet for a QP drawn from its hook's
// half: uniformly, which spreads lookups over the whole table, or by a Zipf
// law (s = 1.0; rank k drawn with probability proportional to 1/k, the
// ranks scattered over the QP numbers), where most QPs are idle and a few
// carry most packets. qp_created counting up during the runs would mean
// misses: it is reported so a wrong key layout cannot pass unnoticed.
// Memory is what the kernel charges each map (memlock, as `bpftool map
// show` prints it); an LRU hash preallocates every entry, so it does not
// depend on the fill.
//
// Then, with --loop-rounds N (default 20), the table's lookups in a loop
// inside one program run (qp_loop.bpf.c): 65 536 lookups per run, so the
// test run's own cost and its skb allocation (which misses the cache by
// itself) are paid once, not per lookup. Two patterns: uniform over every
// tracked QP, and a skew where 10 000 QPs (or all, below that) carry 90 %
// of the lookups and the rest are uniform. Each round draws new keys for
// every size and pattern; ns per lookup is the run's duration minus a walk
// of the same keys without the table, over 65 536; each ratio to the 1 k
// uniform figure is the median of the per-round ratios, with a 95 %
// bootstrap interval. Beside rg_qp4, the same keys are looked up in the
// same rounds in a table of another layout (qp_slots.h, qp_slots.bpf.c):
// 64-byte slots in an array, two candidate buckets of two slots per key,
// placed from userspace by cuckoo displacement at a load of 0.75; each of
// its ratios is to its own 1 k uniform figure, and its cost is also given
// as a ratio to rg_qp4's at the same size and access.
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
#include "qp_loop.skel.h"
#include "qp_slots.h"
#include "qp_slots.skel.h"
#include "roceguard.skel.h"

namespace {

using namespace rg::bench;
using rg::test::Bytes;
using rg::test::PacketBuilder;

Bytes roce_frame(uint8_t tos) {
  rg::test::Bth bth;
  return PacketBuilder().ipv4(kHost4, kRemoteHost4).tos(tos).udp(49152, rg::test::kRoceV2Port).bth(bth).payload(1024).build();
}

enum Pattern { kUniform, kZipf, kPatterns };
constexpr const char* kPatternNames[kPatterns] = {"uniform", "zipf"};

struct Size {
  uint32_t entries;
  std::unique_ptr<Object> obj;
  std::array<std::vector<double>, kPatterns> tc_ns, xdp_ns;
  uint64_t memlock4 = 0, memlock6 = 0;
  double chase = 0;  // ns per random cache-line load over the table's footprint
  uint64_t qp_new_during_runs = 0;
  double fill_s = 0;
  std::array<std::vector<uint32_t>, 2> psn;  // per hook: each QP's next PSN
};

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

constexpr uint32_t kLoopKeys = 65536;  // QP_LOOP_KEYS of qp_loop.bpf.c and qp_slots.bpf.c
constexpr uint32_t kHotQps = 10000;
constexpr double kHotShare = 0.9;
enum LoopPattern { kLoopUniform, kLoopSkew, kLoopPatterns };
constexpr const char* kLoopPatternNames[kLoopPatterns] = {"uniform", "10k carry 90 %"};
enum LoopTable { kLruHash, kSlots, kLoopTables };
constexpr const char* kLoopTableNames[kLoopTables] = {"lru_hash", "slots"};

// The table of 64-byte slots (qp_slots.h) holds a size's keys at this
// many keys per slot: 85 bytes of slots per key. Cuckoo placement with two
// buckets of two slots per key fills to about 0.9; with one slot per
// bucket it could not pass 0.5, 128 bytes per key.
constexpr double kSlotLoad = 0.75;
constexpr unsigned kSlotCandidates = 2 * RG_SLOTS_PER_BUCKET;
constexpr unsigned kMaxKicks = 500;

// The slot of s's key's candidate c, in the order a lookup reads them.
uint32_t slot_candidate(const rg_qp_slot& s, unsigned c, uint32_t buckets) {
  const uint64_t h = rg_slot_hash(s.key_words[0], s.key_words[1]);
  return rg_slot_bucket(h, c / RG_SLOTS_PER_BUCKET, buckets) * RG_SLOTS_PER_BUCKET + c % RG_SLOTS_PER_BUCKET;
}

// Cuckoo placement: the item takes its first free candidate, or displaces
// a random candidate's occupant, which goes on to its own candidates, up
// to kMaxKicks times. False if the item in hand at the end (by then maybe
// another key) found no slot.
bool place_slot(rg_qp_slot* slots, uint32_t buckets, rg_qp_slot item, std::mt19937& rng) {
  std::uniform_int_distribution<unsigned> any(0, kSlotCandidates - 1);
  for (unsigned kick = 0; kick <= kMaxKicks; ++kick) {
    for (unsigned c = 0; c < kSlotCandidates; ++c) {
      rg_qp_slot& s = slots[slot_candidate(item, c, buckets)];
      if (s.state == RG_SLOT_EMPTY) {
        s = item;
        return true;
      }
    }
    std::swap(item, slots[slot_candidate(item, any(rng), buckets)]);
  }
  return false;
}

// A size's slot table: the loaded qp_slots.bpf.c with its slots mapped.
struct SlotTable {
  std::unique_ptr<qp_slots, decltype(&qp_slots__destroy)> skel{nullptr, qp_slots__destroy};
  rg_qp_slot* slots = nullptr;
  size_t len = 0;
  uint32_t buckets = 0;
  uint64_t keys = 0, unplaced = 0, memlock = 0;
  std::array<uint64_t, kSlotCandidates> at{};  // keys by the candidate they sit in
  double fill_s = 0;
  SlotTable() = default;
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;
  ~SlotTable() {
    if (slots) munmap(slots, len);
  }
};

// Loads qp_slots.bpf.c for the keys of entries 0..n-1 (the fill's of
// rg_qp4: entry e is QP e / 2 in direction e % 2), with loop's qp_keys and
// qp_found, and places the keys.
void load_slots(SlotTable& t, const qp_loop& loop, const rg_qp4_key& base, uint32_t n, std::mt19937& rng) {
  t.buckets = static_cast<uint32_t>(std::ceil(n / kSlotLoad / RG_SLOTS_PER_BUCKET));
  const uint32_t count = t.buckets * RG_SLOTS_PER_BUCKET;
  t.skel.reset(qp_slots__open());
  if (!t.skel) throw std::runtime_error("qp_slots.bpf.o: open failed");
  t.skel->rodata->slot_buckets = t.buckets;
  if (bpf_map__set_max_entries(t.skel->maps.qp_slots, count) ||
      bpf_map__reuse_fd(t.skel->maps.qp_keys, bpf_map__fd(loop.maps.qp_keys)) ||
      bpf_map__reuse_fd(t.skel->maps.qp_found, bpf_map__fd(loop.maps.qp_found)))
    throw std::runtime_error("qp_slots: cannot size its table or reuse qp_loop's maps");
  if (qp_slots__load(t.skel.get())) throw std::runtime_error("qp_slots.bpf.o: load failed");
  const int fd = bpf_map__fd(t.skel->maps.qp_slots);
  const size_t page = sysconf(_SC_PAGESIZE);
  t.len = (size_t{count} * sizeof(rg_qp_slot) + page - 1) / page * page;
  void* area = mmap(nullptr, t.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (area == MAP_FAILED) throw std::runtime_error("qp_slots mmap: " + std::string(std::strerror(errno)));
  t.slots = static_cast<rg_qp_slot*>(area);
  t.memlock = map_memlock(fd);
  t.keys = n;
  rg_qp_slot item{};
  item.key = base;
  item.state = RG_SLOT_USED;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t e = 0; e < n; ++e) {
    item.key.dest_qp = e / 2;
    item.key.direction = e % 2;
    if (!place_slot(t.slots, t.buckets, item, rng)) ++t.unplaced;
  }
  t.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (uint32_t i = 0; i < count; ++i)
    if (t.slots[i].state == RG_SLOT_USED)
      for (unsigned c = 0; c < kSlotCandidates; ++c)
        if (slot_candidate(t.slots[i], c, t.buckets) == i) {
          ++t.at[c];
          break;
        }
  if (t.unplaced)
    throw std::runtime_error("qp_slots: " + std::to_string(t.unplaced) + " of " + std::to_string(n) +
                             " keys found no slot at load " + fmt("%.2f", kSlotLoad));
}

// The lookups of a loop inside one program run, per size and pattern, in
// rg_qp4 and in the slot table on the same keys: prints the tables and
// returns their JSON ("rows" and "slot_tables").
nlohmann::json lookup_loop(const std::vector<Size>& sizes, unsigned rounds, int ifindex, std::mt19937& rng) {
  if (rounds == 0 || sizes.empty()) return {{"rows", nullptr}, {"slot_tables", nullptr}};
  struct Loop {
    std::unique_ptr<qp_loop, decltype(&qp_loop__destroy)> skel{nullptr, qp_loop__destroy};
    SlotTable slots;
    std::vector<uint32_t> hot;  // the skew's hot QPs, as entry numbers
    std::array<std::array<std::vector<double>, kLoopPatterns>, kLoopTables> ns;
  };
  // Entry e of a size's table: QP e / 2 in direction e % 2 (the fill's keys).
  rg_qp4_key base{};
  inet_pton(AF_INET, kHost4, base.src);
  inet_pton(AF_INET, kRemoteHost4, base.dst);
  std::vector<Loop> loops(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    loops[i].skel.reset(qp_loop__open());
    if (!loops[i].skel) throw std::runtime_error("qp_loop.bpf.o: open failed");
    if (bpf_map__reuse_fd(loops[i].skel->maps.rg_qp4, bpf_map__fd(sizes[i].obj->skel()->maps.rg_qp4)))
      throw std::runtime_error("qp_loop: cannot reuse rg_qp4");
    if (qp_loop__load(loops[i].skel.get())) throw std::runtime_error("qp_loop.bpf.o: load failed");
    load_slots(loops[i].slots, *loops[i].skel, base, sizes[i].entries / 2 * 2, rng);
    std::vector<uint32_t> all(sizes[i].entries / 2 * 2);  // the entries the fill wrote
    std::iota(all.begin(), all.end(), 0u);
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
        std::uniform_int_distribution<uint32_t> any(0, sizes[i].entries / 2 * 2 - 1);
        std::uniform_int_distribution<size_t> hot(0, l.hot.size() - 1);
        std::bernoulli_distribution in_hot(kHotShare);
        for (auto& k : keys) {
          const uint32_t e = pattern == kLoopSkew && in_hot(rng) ? l.hot[hot(rng)] : any(rng);
          k.dest_qp = e / 2;
          k.direction = e % 2;
        }
        LIBBPF_OPTS(bpf_map_batch_opts, opts);
        uint32_t count = kLoopKeys;
        if (bpf_map_update_batch(bpf_map__fd(l.skel->maps.qp_keys), index.data(), keys.data(), &count, &opts))
          throw std::runtime_error("qp_keys: " + std::string(std::strerror(errno)));
        // Both tables on the same keys, each followed by its floor; which
        // goes first alternates by round, as the first warms the keys.
        for (int n = 0; n < kLoopTables; ++n) {
          const int table = r % 2 ? kLoopTables - 1 - n : n;
          const int prog = table == kLruHash ? bpf_program__fd(l.skel->progs.qp_lookups)
                                             : bpf_program__fd(l.slots.skel->progs.qp_slot_lookups);
          const double with = test_run_xdp(prog, ifindex, frame).duration_ns;
          uint64_t found = 0;
          uint32_t zero = 0;
          bpf_map_lookup_elem(bpf_map__fd(l.skel->maps.qp_found), &zero, &found);
          if (found != kLoopKeys)
            throw std::runtime_error(std::string(kLoopTableNames[table]) + ": " + std::to_string(found) + " of " +
                                     std::to_string(kLoopKeys) + " keys found: a key the fill did not write");
          const double floor = test_run_xdp(bpf_program__fd(l.skel->progs.qp_keys_only), ifindex, frame).duration_ns;
          l.ns[table][pattern].push_back((with - floor) / kLoopKeys);
        }
      }
  std::cout << "\nlookups in a loop inside one program run: " << kLoopKeys << " per run, " << rounds
            << " rounds; ns per lookup (minus the same walk without the table); x 1k: median of the per-round "
               "ratios to the same table's first-size uniform figure; slots/LRU: median of the per-round ratios "
               "at the same size and access; 95 % bootstrap intervals\n";
  Table t({"tracked QPs", "access", "LRU ns/lookup", "x 1k", "95 %", "slots ns/lookup", "x 1k", "95 %",
           "slots/LRU", "95 %"});
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
                              {"pattern", kLoopPatternNames[pattern]},
                              {"ns_per_lookup", v},
                              {"ns_per_lookup_median", median(v)},
                              {"ratio_to_first_uniform_per_round", r},
                              {"ratio_median", median(r)},
                              {"ratio_ci95", {ci.first, ci.second}}};
        if (table == kSlots) {
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
  std::cout << "\nslot table: 64-byte slots, two candidate buckets of " << RG_SLOTS_PER_BUCKET
            << " per key, load " << kSlotLoad << "; keys by the candidate slot they sit in (the order a lookup reads)\n";
  Table m({"keys", "slots", "MiB", "bytes/key", "unplaced", "1st", "2nd", "3rd", "4th", "slots read/key", "fill s"});
  nlohmann::json layout = nlohmann::json::array();
  for (const auto& l : loops) {
    const SlotTable& s = l.slots;
    double read = 0;
    std::vector<std::string> cells{std::to_string(s.keys), std::to_string(s.buckets * RG_SLOTS_PER_BUCKET),
                                   fmt("%.1f", s.memlock / 1048576.0), fmt("%.1f", double(s.memlock) / s.keys),
                                   std::to_string(s.unplaced)};
    for (unsigned c = 0; c < kSlotCandidates; ++c) {
      cells.push_back(fmt("%.1f", 100.0 * s.at[c] / s.keys) + " %");
      read += double(c + 1) * s.at[c] / s.keys;
    }
    cells.insert(cells.end(), {fmt("%.2f", read), fmt("%.1f", s.fill_s)});
    m.row(cells);
    layout.push_back({{"keys", s.keys},
                      {"slots", s.buckets * RG_SLOTS_PER_BUCKET},
                      {"buckets", s.buckets},
                      {"slot_bytes", sizeof(rg_qp_slot)},
                      {"load", double(s.keys) / (s.buckets * RG_SLOTS_PER_BUCKET)},
                      {"memlock_bytes", s.memlock},
                      {"bytes_per_key", double(s.memlock) / s.keys},
                      {"unplaced", s.unplaced},
                      {"keys_by_candidate", s.at},
                      {"slots_read_per_key", read},
                      {"fill_seconds", s.fill_s}});
  }
  m.print();
  return {{"rows", rows}, {"slot_tables", layout}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"roceguard per-packet cost against the number of tracked QPs"};
  std::vector<uint32_t> sizes{1024, 65536, 1048576};
  unsigned rounds = 10, calls = 5000, loop_rounds = 20;
  std::string json_path = "qp_scale.json";
  app.add_option("--sizes", sizes, "tracked QPs (rg_qp4 entries; half per direction)")
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
      s.obj = std::make_unique<Object>(config(RG_CFG_F_REMARK | RG_CFG_F_REPAIR | RG_CFG_F_ACCOUNT), n);
      const int qp_fd = bpf_map__fd(s.obj->skel()->maps.rg_qp4);
      // The keys rg_tc_egress and rg_xdp_ingress build for kHost4 ->
      // kRemoteHost4: QP q of each hook's half is q in its direction.
      rg_qp4_key k{};
      inet_pton(AF_INET, kHost4, k.src);
      inet_pton(AF_INET, kRemoteHost4, k.dst);
      rg_qp_dir v{};
      const auto t0 = std::chrono::steady_clock::now();
      for (uint32_t d = 0; d < RG_DIR_MAX; ++d)
        for (uint32_t q = 0; q < n / 2; ++q) {
          k.dest_qp = q;
          k.direction = d;
          if (bpf_map_update_elem(qp_fd, &k, &v, BPF_ANY))
            throw std::runtime_error("filling rg_qp4: " + std::string(std::strerror(errno)));
        }
      s.fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      s.memlock4 = map_memlock(qp_fd);
      s.memlock6 = map_memlock(bpf_map__fd(s.obj->skel()->maps.rg_qp6));
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
    Table m({"entries", "rg_qp4 memlock MiB", "bytes/IPv4 QP", "rg_qp6 memlock MiB", "bytes/IPv6 QP", "fill s"});
    nlohmann::json mem = nlohmann::json::array();
    for (const auto& s : runs) {
      const double per4 = static_cast<double>(s.memlock4) / s.entries, per6 = static_cast<double>(s.memlock6) / s.entries;
      m.row({std::to_string(s.entries), fmt("%.1f", s.memlock4 / 1048576.0), fmt("%.0f", per4),
             fmt("%.1f", s.memlock6 / 1048576.0), fmt("%.0f", per6), fmt("%.1f", s.fill_s)});
      mem.push_back({{"entries", s.entries},
                     {"memlock4_bytes", s.memlock4},
                     {"bytes_per_ipv4_qp", per4},
                     {"memlock6_bytes", s.memlock6},
                     {"bytes_per_ipv6_qp", per6},
                     {"key4_bytes", sizeof(rg_qp4_key)},
                     {"key6_bytes", sizeof(rg_qp6_key)},
                     {"value_bytes", sizeof(rg_qp_dir)},
                     {"fill_seconds", s.fill_s}});
    }
    m.print();
    write_json(json_path, {{"benchmark", "qp_scale"},
                           {"floor_tc_ns", ftc},
                           {"floor_xdp_ns", fxdp},
                           {"rounds", rounds},
                           {"calls", calls},
                           {"results", out},
                           {"cache_lines", lines},
                           {"lookup_loop", loop["rows"]},
                           {"slot_tables", loop["slot_tables"]},
                           {"memory", mem}});
  } catch (const std::exception& e) {
    std::cerr << "bench_qp_scale: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
