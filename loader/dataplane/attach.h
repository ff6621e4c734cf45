// Attaching roceguard as configured: the BPF object (bpf_object.h) on every
// configured interface's hooks (hooks.h), the tunnel maps written
// (map_writer.h), the attach record stored beside the pinned maps.
// Attachments outlive the process: XDP and TC hold the programs, the maps
// stay pinned, and a later attach or run replaces exactly its own programs.
#pragma once

#include <string>

#include "config/config.h"
#include "dataplane/bpf_object.h"
#include "dataplane/hooks.h"
#include "dataplane/map_writer.h"
#include "dataplane/netfilter.h"
#include "dataplane/state.h"

namespace rg {

// The ingress hook cfg gives ifname before anything is tried: the
// configured one, or for auto TC ingress on a veth or with xdp_mode skb
// and XDP elsewhere (an auto XDP attach the driver refuses falls back to
// TC ingress).
IngressHook planned_ingress_hook(const Config& cfg, const std::string& ifname);
// "xdp dispatcher id 12" or "tc ingress id 13", for logs.
std::string describe_ingress(const IfaceState& is);

class Dataplane {
 public:
  // Opens the BPF object for cfg; see BpfObject for the pinned-map policy.
  Dataplane(const Config& cfg, const std::string& pin_path, bool reset_state);

  // Attaches to every configured interface, all or nothing: on any failure
  // every interface, the tunnel maps, the pins and the attach record end as
  // they were before (the previous programs put back, ours or the ones
  // force replaced; an earlier build's maps pinned again, untouched), the
  // log says what was restored, and rg::Error is thrown. Programs not ours
  // on our hooks (foreign ones, or another roceguard instance's) are
  // refused with kExitConflict unless force, before anything changes, pins
  // included (--reset-state and an upgrade's migration come after the
  // checks). The record is written first with what this attach sets out
  // to do, so that a process killed half-way leaves a record naming every
  // interface it may have touched. The tunnel maps are written before any
  // program is attached, so the first packets already see them. Our
  // programs on any interface of the namespace that cfg does not list (an
  // interface dropped from the configuration, renamed, or one a lost
  // record no longer names) are removed once the attach is done.
  // With skip_absent (`run`), an interface that does not exist yet is no
  // failure: it is recorded unattached (ifindex 0) for the caller to attach
  // when it appears.
  State attach_all(bool force, bool skip_absent = false);

  // (Re-)attaches one configured interface, e.g. after it came back; on
  // failure it is left as it was.
  IfaceState attach_interface(const std::string& name, bool force);

  // The device that was st (same ifindex) now carries another name that cfg
  // does not list: renamed away, and a namesake attached in its place.
  // Removes our programs from it; never throws.
  void let_go_renamed(const IfaceState& st) const;

  // Rewrites an attached interface's address in rg_ifaces, so that frames
  // decapsulated there follow a MAC address change; never throws.
  void refresh_address(const IfaceState& is) const;

  // Drops what interfaces that are gone for good (none of st's) left: their
  // counter entries, so rg_counters never fills up over restarts, and
  // their defunct tcx link pins; never throws.
  void prune_gone_interfaces(const State& st) const;

  // The XDP fast path's slot (dataplane.xdp_forward): filled only while no
  // netfilter rule could apply to forwarded packets (probe_netfilter), for
  // a frame the fast path redirects passes no netfilter hook. attach_all
  // probes before it attaches anything; the daemon calls recheck_fast_path
  // at a bounded interval and on nftables change events, which fills or
  // empties the slot when the answer changed (logged once per change).
  // Never throws.
  void recheck_fast_path();

  // `run`'s reload: the tunnel maps take peers (slots, routes, decap keys)
  // in place, with the programs attached, and a re-attach writes them from
  // then on. Before the first attach (no maps pinned yet) only the latter.
  // On failure the maps are put back as they were and rg::Error is thrown.
  void replace_peers(const std::vector<PeerConfig>& peers);
  // Whether the slot is filled; with the fast path configured and off,
  // netfilter() says why.
  bool fast_path_open() const { return fast_path_open_; }
  const NetfilterProbe& netfilter() const { return netfilter_; }

  const Config& config() const { return cfg_; }
  // The rg_peers slot of each configured peer (config().peers[i]'s is
  // peer_slots()[i]); empty before the tunnel maps are written.
  const std::vector<uint32_t>& peer_slots() const { return peer_slots_; }
  // A map of the loaded object by name, or -1 (not loaded yet).
  int map_fd(const char* name) const { return obj_.map_fd(name); }
  const std::string& pin_path() const { return pin_path_; }
  // Which programs on the hooks are this pin path's.
  const HookOwner& owner() const { return owner_; }

 private:
  // Takes the slots the writer gave the peers, and clears this object's
  // own per-slot state of the slots whose occupant changed.
  void place_peers(const MapWriter::Placement& placed);
  // Writes the tunnels' keys (rg_peer_auth) at the slots the peers were
  // given, once the object is loaded (its maps exist only then) and before
  // TC egress is attached anywhere; once per attach.
  void write_keys();
  // Attaches one interface; undo learns how to put back what was there.
  IfaceState attach_interface(const std::string& name, bool force, Rollback& undo);
  // Whether the TC programs attach with tcx (dataplane.tc_attach, and the
  // kernel's tcx); throws for tcx configured on a kernel without it.
  bool use_tcx() const;
  // Lets the XDP fast path redirect to the interface (dataplane.xdp_forward)
  // when its ingress runs in XDP (xdp), else makes sure it does not.
  void set_forward_target(int ifindex, const std::string& name, bool xdp, Rollback& undo);
  // Fills the fast path's slot once the interface's ingress program is
  // loaded; says what to do where the kernel refuses it to a dispatcher's
  // extension.
  void link_forward(const IfaceState& st, const std::string& name) const;

  // Removes what an earlier attach left and this configuration does not
  // have, on every interface of the namespace: our programs on an
  // interface not configured, our TC filters at a handle/priority it moved.
  void detach_unconfigured() const;
  bool configured(const std::string& name) const;

  Config cfg_;
  std::vector<uint32_t> peer_slots_;
  std::string pin_path_;
  bool reset_state_;
  // Before obj_: the maps pinned when this command started own the hooks,
  // even after --reset-state replaced them.
  HookOwner owner_;
  BpfObject obj_;
  bool warned_no_dispatcher_ = false;
  // The last probe, and whether the slot is (to be) filled accordingly.
  NetfilterProbe netfilter_;
  bool fast_path_open_ = false;
  bool keys_written_ = false;
};

}  // namespace rg
