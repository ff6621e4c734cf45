// The one reader of roceguard's BPF maps, for the CLI and the exporter.
// Values are read from the kernel on every call and never cached, so a
// loader restart neither resets nor double-counts anything.
//
// Every map is checked against the layout this build reads (type, key size,
// value size) before a byte is copied out of it: a pin planted by someone
// else, or left by another version, is refused by name instead of being
// read into buffers of the wrong size.
#pragma once

#include <linux/bpf.h>

struct bpf_object;

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "roceguard/roceguard.h"

namespace rg {

// Names of the maps in the BPF object; pinned as <pin_path>/<name>.
inline constexpr const char* kMapCounters = "rg_counters";
inline constexpr const char* kMapQp4 = "rg_qp4";
inline constexpr const char* kMapQp6 = "rg_qp6";
// The per-QP table of builds before the per-family, per-direction tables:
// an upgrade carries its entries over (migrate_qp_table) and removes it.
inline constexpr const char* kMapQpLegacy = "rg_qp";
inline constexpr const char* kMapPeers = "rg_peers";
inline constexpr const char* kMapRoute4 = "rg_route4";
inline constexpr const char* kMapRoute6 = "rg_route6";
inline constexpr const char* kMapDecap = "rg_decap";
inline constexpr const char* kMapIfaces = "rg_ifaces";
inline constexpr const char* kMapPeerStats = "rg_peer_stats";
// Private to the process that loaded the object (see dataplane/nexthop_lease.h).
inline constexpr const char* kMapNexthops = "rg_nexthops";
inline constexpr const char* kMapNexthopLease = "rg_nh_leases";
inline constexpr const char* kMapXdpTx = "rg_xdp_tx";  // unpinned: the fast path's targets
// Private to the process that loaded the object: the shield's "auto" mode (daemon/shield_auto.h).
inline constexpr const char* kMapPeerCtl = "rg_peer_ctl";
inline constexpr const char* kMapPeerRx = "rg_peer_rx";
// Private to the process that loaded the object: the congestion loop's decision (daemon/congestion.h).
inline constexpr const char* kMapPeerCc = "rg_peer_cc";
// The congestion loop's phantom queues and their marks, pinned as the counters are.
inline constexpr const char* kMapPeerPq = "rg_peer_pq";
inline constexpr const char* kMapTunnelStreams = "rg_tunnel_streams";
inline constexpr const char* kMapPeerGuard = "rg_peer_guard";
inline constexpr const char* kMapTunnelRetired = "rg_tunnel_retired";
// Private to the process that loaded the object: when a peer's stream last went untracked.
inline constexpr const char* kMapPeerUntracked = "rg_peer_untracked";
// Private to the process that loaded the object: the tunnels' keys (dataplane/tunnel_auth.h).
inline constexpr const char* kMapPeerAuth = "rg_peer_auth";
// The ingress program's tail call into the fast path. Each load has its
// own (a program array takes the type and flags of the first program that
// uses it, so one reused across loads would tie every later load to the
// first one's hook): pinned after an attach, replacing the previous
// attach's, because the kernel empties a program array that no file
// descriptor or pin holds.
inline constexpr const char* kMapXdpNext = "rg_xdp_next";
inline constexpr std::array<const char*, 13> kPinnedMaps{
    kMapCounters, kMapQp4,       kMapQp6,           kMapPeers,     kMapRoute4,        kMapRoute6, kMapDecap,
    kMapIfaces,   kMapPeerStats, kMapTunnelStreams, kMapPeerGuard, kMapTunnelRetired, kMapPeerPq};

struct CounterRow {
  uint32_t ifindex = 0;
  rg_direction direction = RG_DIR_EGRESS;
  std::array<rg_counter, RG_EV_MAX> ev{};  // summed over CPUs
};

// Both directions of one QP, joined from their entries in rg_qp4/rg_qp6.
struct QpState {
  std::array<rg_qp_dir, RG_DIR_MAX> dir{};
  // CLOCK_MONOTONIC of each direction's last packet, to the slot clock's
  // resolution (RG_QP_CLOCK_SHIFT); 0 for a direction not in the table.
  std::array<uint64_t, RG_DIR_MAX> last_seen_ns{};
};

struct QpRow {
  rg_qp_key key{};
  QpState state{};
};

// The per-QP tables of a reader that borrows fds; -1 for one it does not read.
struct QpMaps {
  int v4 = -1;
  int v6 = -1;
};

// Entries walked in each per-QP table.
struct QpEntries {
  uint32_t v4 = 0;
  uint32_t v6 = 0;
};

// One peer slot's counters, summed over CPUs, with what the receiving
// side could not track (rg_peer_guard), the streams evicted
// (rg_tunnel_retired) and the congestion loop's phantom queue (rg_peer_pq:
// its counts; lock and time zero).
struct PeerStatsRow {
  uint32_t slot = 0;
  std::array<rg_counter, RG_PEER_EV_MAX> ev{};
  rg_peer_guard guard{};
  rg_tunnel_retired retired{};
  rg_peer_pq pq{};
};

// One sequence stream a receiving gateway tracks, read under its lock.
struct TunnelStreamRow {
  rg_tunnel_stream_key key{};
  rg_tunnel_stream state{};
};

struct MapUsage {
  std::string name;
  uint32_t max_entries = 0;
  uint32_t entries = 0;
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t id = 0;
};

// The layout a reader expects of one map. value_size_min below value_size
// accepts an older, shorter value that is read with zeros appended (the
// counter value grows by appending events).
struct MapLayout {
  bpf_map_type type;
  uint32_t key_size;
  uint32_t value_size;
  uint32_t value_size_min;
  uint32_t value_step;  // an accepted value size is a multiple of this
};

// The layout of each pinned map this build reads; nullptr for a name it
// does not know.
const MapLayout* pinned_map_layout(const std::string& name);

// Type, capacity and sizes of an open map; throws rg::Error naming it.
MapUsage map_info(int fd, const std::string& name);

// Throws rg::Error (kExitConflict) naming the map and every difference
// from layout, and the way out (--reset-state replaces the map).
void check_map_layout(int fd, const std::string& name, const MapLayout& layout);

// Visits every entry of a hash or array map at most once, and at most
// max_entries of them, whatever the data path inserts or evicts meanwhile.
// Batched lookups (one bucket at a time in the kernel) where the map type
// has them; otherwise a get_next_key walk that stops after max_entries steps
// and skips keys it has already returned (a deleted cursor restarts the
// kernel's walk from the first bucket). value_bytes is the size of one
// lookup result (per-CPU maps: one slot per possible CPU, 8-byte aligned),
// the size of the buffers the kernel writes into. Returns the number of
// entries visited.
using EntryVisitor = std::function<void(const uint8_t* key, const uint8_t* value)>;

// One per-QP slot table (rg_qp4 or rg_qp6, roceguard.h) mapped into this
// process (the tables are BPF_F_MMAPABLE arrays): the one place userspace
// reads slots, finds a QP direction's slot and places one.
class QpSlotTable {
 public:
  // family AF_INET (rg_qp4) or AF_INET6 (rg_qp6); writable maps it for
  // place() as well. Throws when fd is no slot table of that family.
  QpSlotTable(int fd, int family, bool writable = false);
  ~QpSlotTable();
  // The same check without mapping it; returns its slots.
  static uint32_t check(int fd, int family);
  QpSlotTable(const QpSlotTable&) = delete;
  QpSlotTable& operator=(const QpSlotTable&) = delete;

  uint32_t slots() const { return slots_; }
  uint32_t buckets() const { return slots_ / RG_QP_BUCKET_SLOTS; }
  // Bytes of the table in the kernel, per slot.
  uint32_t slot_size() const { return slot_size_; }

  // Calls visit for every READY slot; returns how many.
  using Visitor = std::function<void(const rg_qp_key& qp, rg_direction dir, const rg_qp_slot_head& slot)>;
  uint32_t walk(const Visitor& visit) const;
  // The READY slot of qp's direction dir, as the programs' lookup finds it;
  // nullptr when absent.
  const rg_qp_slot_head* find(const rg_qp_key& qp, uint32_t dir) const;
  // Writes qp's direction dir with its counts and clock into its slot, or
  // into the slot the programs would claim for it (rg_qp_scan's rule).
  // Only while no program writes the table (an upgrade before
  // attach, benchmarks, tests). False when both its buckets are full.
  bool place(const rg_qp_key& qp, uint32_t dir, const rg_qp_dir& value, uint32_t last_seen);

 private:
  rg_qp_slot_head* slot(uint32_t i) const;
  void probe_of(const rg_qp_key& qp, uint32_t dir, uint32_t bucket[2], uint32_t home[2]) const;
  bool matches(const rg_qp_slot_head* s, const rg_qp_key& qp, uint32_t dir) const;

  int family_;
  uint32_t slots_ = 0;
  uint32_t slot_size_ = 0;
  size_t length_ = 0;
  uint8_t* base_ = nullptr;
};

// The slot clock (RG_QP_CLOCK_SHIFT units of CLOCK_MONOTONIC) now, and a
// slot clock value in nanoseconds.
uint32_t qp_clock_now();
inline uint64_t qp_clock_ns(uint32_t clock) { return static_cast<uint64_t>(clock) << RG_QP_CLOCK_SHIFT; }
size_t walk_map(int fd, uint32_t key_size, uint32_t value_bytes, uint32_t max_entries,
                const EntryVisitor& visit);

class MapReader {
 public:
  // Opens the maps pinned under pin_path and checks their layout; throws
  // rg::Error naming the missing or mismatched pin and how to fix it.
  explicit MapReader(const std::string& pin_path);
  // Borrows already-open fds (tests, a running loader). Not closed; checked
  // like pins.
  explicit MapReader(int counters_fd, QpMaps qp = {});
  ~MapReader();
  MapReader(const MapReader&) = delete;
  MapReader& operator=(const MapReader&) = delete;

  std::vector<CounterRow> counters() const;
  // Every tracked QP, its two directions joined into one row.
  std::vector<QpRow> qps() const;
  // The top QPs by ranks_before, best first, holding no more than 2 * top
  // rows at a time however large the tables: each direction's entry is
  // ranked on its own, and the kept ones are joined with their other
  // direction and ranked again. *entries gets the entries walked.
  std::vector<QpRow> top_qps(size_t top, bool (*ranks_before)(const QpRow&, const QpRow&),
                             QpEntries* entries) const;
  // Per-peer counters and tracked tunnel streams; empty when the pins are
  // absent (maps of a build before them) or the reader borrows fds.
  std::vector<PeerStatsRow> peer_stats() const;
  std::vector<TunnelStreamRow> tunnel_streams() const;
  // Type and capacity only: usage() also counts entries.
  MapUsage info(int fd, const std::string& name) const;
  MapUsage usage(int fd, const std::string& name) const;
  // counters_entries/qp_entries: a map's fill when the caller has just read
  // it with counters()/top_qps(), which spares a second walk.
  std::vector<MapUsage> usage_all(std::optional<QpEntries> qp_entries = std::nullopt,
                                  std::optional<uint32_t> counters_entries = std::nullopt) const;

  int counters_fd() const { return counters_fd_; }

 private:
  // Visits every entry of both per-QP tables as a half-filled row: the
  // entry's direction set, the other one zero.
  QpEntries walk_qps(const std::function<void(const QpRow&, rg_direction)>& visit) const;
  // The other direction's entry of row's QP, when there is one.
  void join_other_direction(QpRow& row, rg_direction have) const;
  // The slot table of a family (AF_INET: rg_qp4), mapped on first use:
  // a reader of counters or peers never maps the QP tables (megabytes of
  // pages set up and torn down per reader); nullptr when it has no fd.
  const QpSlotTable* slots(int family) const;

  int counters_fd_ = -1;
  QpMaps qp_{};
  uint32_t counters_value_size_ = sizeof(rg_counters);
  uint32_t counters_max_ = 0;
  QpEntries qp_max_{};
  mutable std::unique_ptr<QpSlotTable> slots4_, slots6_;  // qp_ mapped by slots()
  bool owned_ = false;
  std::string pin_path_;
};

// The same from open fds (rg_peer_stats with rg_peer_guard,
// rg_tunnel_retired and rg_peer_pq when their fds are given,
// rg_tunnel_streams); each
// checks the map's layout first. Slots whose counters are all zero are left
// out.
std::vector<PeerStatsRow> read_peer_stats(int fd, int guard_fd = -1, int retired_fd = -1, int pq_fd = -1);
std::vector<TunnelStreamRow> read_tunnel_streams(int fd);


// Sum of one event over all rows with the given direction (any interface).
uint64_t sum_packets(const std::vector<CounterRow>& rows, rg_direction dir, rg_event ev);

// Deletes the counter entries of interfaces that no longer exist (in this
// network namespace) and are not in keep: an ifindex, once gone, never
// comes back, and rg_counters holds RG_MAX_COUNTER_KEYS entries in all, so
// without pruning restarts on changing interfaces would fill it and the
// data path would stop counting new ones. Returns the entries removed.
size_t prune_counters(int counters_fd, const std::set<uint32_t>& keep);

// Pins fd at path, replacing what is there: pinned beside it and renamed
// over it, so the path always holds one whole map, the old or the new.
void pin_replacing(int fd, const std::string& path);

// A pinned per-CPU map of counters carried over to a new layout (rg_counters
// to a longer value, rg_peer_stats of the build before the loss shield):
// the earlier build's programs go on counting into the old map until the
// attach takes their hooks, so what they count after the copy is carried
// too, once none runs. The old value's 64-bit words from first_word on are
// counters, each at the same place in the new value; the words before it
// are not counters and are not carried.
// A pinned map carried over to a new layout: the earlier build's programs
// may go on counting into the old one until the attach takes their hooks.
class CarriedMap {
 public:
  virtual ~CarriedMap() = default;
  // Adds to the new map what the old one gained since the copy; returns
  // the entries that had gained. Call once no earlier program runs.
  virtual size_t carry_since_copy() const = 0;
};

class CounterMigration : public CarriedMap {
 public:
  CounterMigration(int old_fd, int new_fd, uint32_t key_size, uint32_t max_entries, uint32_t old_value_size,
                   uint32_t value_size, uint32_t first_word, std::map<uint64_t, std::vector<uint8_t>> copied);
  ~CounterMigration() override;
  CounterMigration(const CounterMigration&) = delete;
  CounterMigration& operator=(const CounterMigration&) = delete;

  size_t carry_since_copy() const override;

 private:
  int old_fd_, new_fd_;
  uint32_t key_size_, max_entries_, old_value_size_, value_size_, first_word_;
  std::map<uint64_t, std::vector<uint8_t>> copied_;  // by key, every CPU's value as copied
};

// Is the pinned rg_counters one of a build with fewer events (a shorter
// value of whole counters), which migrate_counters carries over?
bool counters_need_migration(const std::string& pin_path, uint32_t value_size);

// Brings a pinned rg_counters with a shorter value (a build with fewer
// events) to value_size: a new map holding every entry with the new events
// at zero replaces the pin. Returns the migration (nullptr when there was
// nothing to migrate). Events are append-only (roceguard.h), so an old
// event keeps its offset.
std::unique_ptr<CounterMigration> migrate_counters(const std::string& pin_path, uint32_t value_size);

// The value of kMapQpLegacy (key: rg_qp_key): both directions of a QP and
// one last-seen time.
struct LegacyQpDir {
  uint64_t packets, bytes, retransmits, gaps, lost, nak_seq_err, nak_other, rnr_nak, cnp, ecn_ce;
  uint32_t max_psn, flags;
};
struct LegacyQpState {
  LegacyQpDir dir[RG_DIR_MAX];
  uint64_t last_seen_ns;
};
static_assert(sizeof(LegacyQpState) == 184, "the legacy rg_qp value");

// The values of rg_peer_stats and rg_tunnel_streams of builds before the
// loss shield: one sequence stream per sending CPU and a 64-number window.
inline constexpr uint32_t kLegacyPeerEvents = 8;
struct LegacyPeerStats {
  uint32_t tx_seq;
  uint32_t reserved;
  rg_counter ev[kLegacyPeerEvents];
};
static_assert(sizeof(LegacyPeerStats) == 136, "the legacy rg_peer_stats value");
struct LegacyTunnelStream {
  bpf_spin_lock lock;
  uint32_t max_seq;
  uint64_t window;
  uint64_t last_ns;
  uint64_t received, lost, reordered, duplicated, resyncs, delay_sum_ns;
  uint64_t delay[RG_TUNNEL_DELAY_BUCKETS];
};
static_assert(sizeof(LegacyTunnelStream) == 264, "the legacy rg_tunnel_streams value");

// Are the pinned rg_peer_stats / rg_tunnel_streams of the layout before the
// loss shield, which the migrations below carry over?
bool peer_stats_need_migration(const std::string& pin_path);
bool tunnel_streams_need_migration(const std::string& pin_path);

// Brings a pinned rg_peer_stats of the layout before the loss shield to
// this build's: every peer event is carried over; the sequence numbers and
// the epoch start at 0, so the far gateway sees the numbering restart under
// the load's new epoch. Returns the migration (to carry what the earlier
// programs count until the attach is done) when it migrated, nullptr when
// there was nothing to; any other layout is left for the compatibility
// check to name.
std::unique_ptr<CounterMigration> migrate_peer_stats(const std::string& pin_path);

// A pinned rg_tunnel_streams of the layout before the loss shield, carried
// over by migrate_tunnel_streams: as for CounterMigration, the earlier
// build's programs go on counting into the old map until the attach takes
// their hooks; carry_since_copy() adds what they counted since the copy
// (the counters only: the new streams' tracking is the new programs').
class StreamMigration : public CarriedMap {
 public:
  StreamMigration(int old_fd, int new_fd, uint32_t max_entries, size_t streams,
                  std::map<std::pair<uint32_t, uint32_t>, LegacyTunnelStream> copied);
  ~StreamMigration() override;
  StreamMigration(const StreamMigration&) = delete;
  StreamMigration& operator=(const StreamMigration&) = delete;

  size_t streams() const { return streams_; }  // carried over by the copy
  size_t carry_since_copy() const override;

 private:
  int old_fd_, new_fd_;
  uint32_t max_entries_;
  size_t streams_;
  std::map<std::pair<uint32_t, uint32_t>, LegacyTunnelStream> copied_;  // by old {peer, cpu}
};

// The same for rg_tunnel_streams, into a new map of max_entries and
// map_flags: the stream of sending CPU c of a peer becomes lane 0 of that
// CPU ({peer, c << RG_TUNNEL_LANE_BITS}) with its counters, epoch 0 (which
// no sender uses, so the next packet restarts its tracking) and a window
// of nothing missing. Returns the migration, or nullptr when no map of
// that layout is pinned.
std::unique_ptr<StreamMigration> migrate_tunnel_streams(const std::string& pin_path, uint32_t max_entries,
                                             uint32_t map_flags);

// Creates an rg_tunnel_streams map of this build's layout, with the BTF the
// kernel needs to find its values' bpf_spin_lock; returns its fd (owned by
// the caller) or throws rg::Error.
int create_tunnel_streams_map(uint32_t max_entries, uint32_t map_flags);

// Sizes both per-QP tables (rg_qp4, rg_qp6) of an opened, not yet loaded
// object; throws rg::Error naming the table it could not size.
void set_qp_entries(struct bpf_object* obj, uint32_t entries);

// Puts the loaded object's rg_xdp_forward into the slot of its rg_xdp_next,
// where the ingress program tail-calls it (the XDP fast path); throws
// rg::Error with the kernel's errno when the kernel refuses it.
void link_xdp_forward(struct bpf_object* obj);

// Whether the rg_xdp_next pinned under pin_path has its slot filled (the
// XDP fast path runs); nullopt when nothing is pinned there.
std::optional<bool> pinned_xdp_forward_linked(const std::string& pin_path);

// What migrate_qp_table carried: how many QP directions, and what the
// earlier build's programs count into the old table until the attach is
// done, which carry_since_copy() adds to the new tables (the counts only;
// a QP the old programs met first after the copy comes whole).
class QpMigration : public CarriedMap {
 public:
  QpMigration(int old_fd, int v4_fd, int v6_fd, uint32_t max_entries, size_t carried,
              std::map<std::string, LegacyQpState> copied);
  ~QpMigration() override;
  QpMigration(const QpMigration&) = delete;
  QpMigration& operator=(const QpMigration&) = delete;

  size_t carried() const { return carried_; }  // QP directions, by the copy
  size_t carry_since_copy() const override;

 private:
  int old_fd_, v4_fd_, v6_fd_;
  uint32_t max_entries_;
  size_t carried_;
  std::map<std::string, LegacyQpState> copied_;  // by the old key's bytes
};

// The value of rg_qp4 and rg_qp6 in builds before the 64-byte rg_qp_dir:
// 80 bytes, the same fields with retransmits, lost, cnp and ecn_ce in 64
// bits. An upgrade carries such tables over (migrate_qp_values).
struct QpDirV80 {
  uint64_t packets, bytes;
  uint32_t max_psn : 24, resend_next : 8;
  uint32_t flags;
  uint64_t last_seen_ns;
  uint64_t retransmits, lost, cnp, ecn_ce;
  uint32_t gaps, nak_seq_err, nak_other, rnr_nak;
};
static_assert(sizeof(QpDirV80) == 80, "the 80-byte rg_qp_dir");

// The value of rg_qp4 and rg_qp6 when they were LRU hashes of the 64-byte
// rg_qp_dir, before the slot tables: retransmits, lost, cnp, ecn_ce and the
// rarer four in 32 bits. An upgrade carries such tables over too
// (migrate_qp_values).
struct QpDirV64 {
  uint64_t packets, bytes;
  uint32_t max_psn : 24, resend_next : 8;
  uint32_t flags;
  uint64_t last_seen_ns;
  uint32_t retransmits, lost, cnp, ecn_ce, gaps, nak_seq_err, nak_other, rnr_nak;
};
static_assert(sizeof(QpDirV64) == 64, "the 64-byte rg_qp_dir of the LRU tables");

// o as the build with the 64-byte value kept it: the four wider counts cut
// to 32 bits, as its programs' own adds wrap them (the tests pin such
// tables from the 80-byte figures).
inline QpDirV64 v64_of(const QpDirV80& o) {
  QpDirV64 v{};
  v.packets = o.packets;
  v.bytes = o.bytes;
  v.max_psn = o.max_psn;
  v.resend_next = o.resend_next;
  v.flags = o.flags;
  v.last_seen_ns = o.last_seen_ns;
  v.retransmits = static_cast<uint32_t>(o.retransmits);
  v.lost = static_cast<uint32_t>(o.lost);
  v.cnp = static_cast<uint32_t>(o.cnp);
  v.ecn_ce = static_cast<uint32_t>(o.ecn_ce);
  v.gaps = o.gaps;
  v.nak_seq_err = o.nak_seq_err;
  v.nak_other = o.nak_other;
  v.rnr_nak = o.rnr_nak;
  return v;
}

// Is the pinned per-QP table name (rg_qp4 or rg_qp6) an LRU hash of the
// 80- or the 64-byte value that migrate_qp_values carries over, sized for
// the entries this load wants? Any other difference is for the
// compatibility check to name.
bool qp_values_need_migration(const std::string& pin_path, const std::string& name, uint32_t entries);

// What migrate_qp_values carried: as for QpMigration, the earlier build's
// programs count on in the old tables until the attach takes their hooks,
// and carry_since_copy() adds what they counted since the copy to the new
// ones (the counts only: the PSN tracking is the new programs'; a QP the
// old programs met first after the copy comes whole).
class QpValueMigration : public CarriedMap {
 public:
  struct Table {
    int old_fd = -1, new_fd = -1;
    uint32_t key_size = 0, value_size = 0, max_entries = 0;  // of the old table
    std::map<std::string, QpDirV80> copied;  // by the key's bytes; a 64-byte value widened
  };
  explicit QpValueMigration(std::vector<Table> tables);
  ~QpValueMigration() override;
  QpValueMigration(const QpValueMigration&) = delete;
  QpValueMigration& operator=(const QpValueMigration&) = delete;

  size_t carried() const;  // QP directions, by the copy
  size_t carry_since_copy() const override;

 private:
  std::vector<Table> tables_;
};

// Carries the entries of the pinned rg_qp4 and rg_qp6 LRU hashes (of the
// 80- or the 64-byte value) into new slot tables meant for the given
// entries (with the object's BTF of the slot), pinned in their place, each
// QP direction in the slot the programs would claim for it. The counts
// this build keeps in 32 or 16 bits keep their low bits: such a count is a
// count modulo 2^32 or 2^16, as the programs' own adds make it, so what is
// carried later adds on exactly and a consumer of counters sees at most one
// reset. Returns the migration, or nullptr when neither table is of such a
// value.
std::unique_ptr<QpValueMigration> migrate_qp_values(const std::string& pin_path, uint32_t entries);

// Carries the entries of an earlier build's pinned rg_qp (both directions
// in one value, one table for both families) into new rg_qp4 and rg_qp6
// pins of the given capacity, replacing any there, so the object being
// loaded reuses them. The old pin stays until remove_legacy_qp_table(): an
// upgrade that fails before its attach completes leaves the earlier build
// its table. Returns the migration, or nullptr without an old pin.
std::unique_ptr<QpMigration> migrate_qp_table(const std::string& pin_path, uint32_t entries);
void remove_legacy_qp_table(const std::string& pin_path);

// Whether two rg_peers values name the same peer: outer family, remote
// address and VNI (0 family: an unused slot, the same as another one). A
// peer's slot follows that identity (MapWriter), so readers name slots by it.
bool same_peer(const rg_peer& a, const rg_peer& b);

}  // namespace rg
