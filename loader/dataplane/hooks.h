// roceguard's programs on an interface's hooks: XDP through libxdp (its
// multi-program dispatcher when the kernel allows, a direct attach when not)
// and the TC programs as tcx links (Linux 6.6+, pinned beside the maps) or
// clsact filters at a fixed handle/priority. Each hook
// operation exists once: refuse a foreign owner, attach (recording how to
// undo it), detach ours and nothing else, tell whether ours is still there.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/bpf_object.h"
#include "dataplane/state.h"

namespace rg {

// Steps that undo an attach, run newest first. Every step runs even when
// one fails: a step that throws must not leave the others' attachments
// behind. Each step says what it puts back; run() logs it.
class Rollback {
 public:
  void add(std::string what, std::function<void()> step) { steps_.push_back({std::move(what), std::move(step)}); }
  void run() noexcept;

 private:
  struct Step {
    std::string what;
    std::function<void()> fn;
  };
  std::vector<Step> steps_;
};

// Which roceguard programs are this pin path's: those using a map pinned
// under it. A program name cannot tell two roceguard instances (two pin
// paths) apart; their maps can, as each instance has its own.
class HookOwner {
 public:
  // Records the ids of the maps pinned under pin_path now.
  explicit HookOwner(const std::string& pin_path) : pin_path_(pin_path) { add_pinned(pin_path); }
  // Adds the ids of the maps pinned there now (after they were replaced).
  void add_pinned(const std::string& pin_path);
  // Is program id named name one of ours?
  bool owns(uint32_t prog_id, const std::string& name) const;
  // Where this owner pins its tcx links.
  const std::string& pin_path() const { return pin_path_; }

 private:
  std::string pin_path_;
  std::vector<uint32_t> map_ids_;
};

// The two TC hooks roceguard uses: egress always, ingress when the
// interface's ingress program runs there instead of at XDP.
enum class TcHook { kEgress, kIngress };
const char* tc_hook_name(TcHook h);  // "egress", "ingress"

// Does this kernel have tcx (Linux 6.6+)? Probed once, by a tcx query.
bool tcx_supported();
// Where owner pins its tcx link for hook h of ifindex.
std::string tcx_pin(const HookOwner& owner, int ifindex, TcHook h);
// Why frames received on ifindex (name) may carry a VLAN tag outside the
// frame, where XDP cannot see it: a VLAN device on it, and receive VLAN
// offload on (or a veth, which hands on its peer's metadata tag); nullopt
// when no tag can hide. The fast path leaves such an interface's frames
// to the stack (RG_IFACE_F_VLAN_UNSEEN). Throws on a failed link dump.
std::optional<std::string> vlan_tags_unseen(int ifindex, const std::string& name);
// Removes the tcx link pins under pin_path whose interface is gone (the
// link is defunct: it runs nowhere), so a re-created interface, which gets
// another ifindex, leaves none behind. Returns how many; never throws.
size_t prune_defunct_tcx_pins(const std::string& pin_path);

// Throws kExitConflict when a hook roceguard is about to take holds a
// program not ours: with ingress at XDP, a program attached directly
// (libxdp cannot chain ours beside it); with clsact a TC egress filter
// (and, with ingress at TC, a TC ingress filter) at tc_handle/tc_priority;
// with tcx another roceguard instance's program on those hooks (tcx has no
// slot to fight over: other programs stay beside ours). Another roceguard
// instance's programs are named as such.
void refuse_foreign_hooks(const HookOwner& owner, int ifindex, const std::string& name, uint32_t tc_handle,
                          uint32_t tc_priority, IngressHook ingress, bool tcx);

// Does native XDP on this device run on an skb the stack already built,
// so that TC ingress does the same work for less? veth copies every skb
// into a page for its native XDP.
bool xdp_runs_on_skb(const std::string& ifname);

// Whether ifindex's qdisc holds a packet until its skb->tstamp, the
// earliest departure time TC egress sets (the congestion loop's pacing):
// fq at the root, or under an mq root on every TX queue. Every other qdisc
// (pfifo_fast, fq_codel, htb, noqueue, ...) sends it at once. *what: the
// qdiscs found, as text ("fq", "mq of 4 fq", "fq_codel").
bool qdisc_honours_edt(int ifindex, std::string* what = nullptr);

struct XdpAttachment {
  std::string mode;  // "dispatcher" or "direct"
  uint32_t prog_id = 0;
  // libxdp attached directly because this kernel offers no dispatcher:
  // other XDP programs cannot share the interface.
  bool no_dispatcher = false;
};

// Attaches obj's XDP program in mode, replacing our previous one; a program
// not ours attached directly is replaced only with force. In a dispatcher
// the new program joins before the previous one leaves, so ingress is never
// without one. undo puts the previous programs back: it holds them, so the
// kernel does not free them once they are off the hook.
XdpAttachment attach_xdp(BpfObject& obj, const HookOwner& owner, int ifindex, const std::string& name,
                         XdpMode mode, bool force, Rollback& undo);

// Attaches obj's TC program for hook h (rg_tc_egress, rg_tc_ingress) at
// handle/priority, replacing our previous filter there; one not ours only
// with force. Creates the clsact qdisc if missing (and undo removes it
// again). Returns the program's id.
uint32_t attach_tc(const BpfObject& obj, const HookOwner& owner, int ifindex, const std::string& name, TcHook h,
                   uint32_t handle, uint32_t priority, bool force, Rollback& undo);

// Attaches obj's TC program for hook h with a tcx link placed first on the
// hook (ahead of every program there now), pinned at tcx_pin(). An earlier
// attach's link there gets the new program in place (BPF_LINK_UPDATE: the
// hook is never without one, and the link keeps its position); undo puts
// the previous program back, or detaches a link created here. Returns the
// program's id.
uint32_t attach_tcx(const BpfObject& obj, const HookOwner& owner, int ifindex, const std::string& name, TcHook h,
                    Rollback& undo);

// Removes owner's program from hook h attached the other way than the one
// kept (tcx: a clsact filter at handle/priority; clsact: a tcx link), where
// an earlier attach put it, once the new one runs; undo puts it back.
void remove_other_tc(const HookOwner& owner, int ifindex, const std::string& name, TcHook h, bool tcx_kept,
                     uint32_t handle, uint32_t priority, Rollback& undo);

// Once the ingress program is attached at kept (kXdp or kTc), removes our
// ingress program from the other hook, where an earlier attach put it; undo
// puts it back. Until then both run: a packet may be counted twice, none is
// missed.
void remove_other_ingress(const HookOwner& owner, int ifindex, const std::string& name, IngressHook kept,
                          uint32_t handle, uint32_t priority, Rollback& undo);

// Are our programs still where st says they are?
bool xdp_present(const HookOwner& owner, const IfaceState& st);
bool tc_present(const HookOwner& owner, const IfaceState& st, TcHook h = TcHook::kEgress);
// The ingress program at the hook st records (XDP or TC ingress).
bool ingress_present(const HookOwner& owner, const IfaceState& st);

// The interfaces of this network namespace, by ifindex and name.
struct NetInterface {
  int ifindex = 0;
  std::string name;
};
std::vector<NetInterface> interfaces_here();

// Removes owner's programs from one interface: its rg_xdp_ingress (direct,
// or its dispatcher slot), its tcx links (and their pins) and its TC
// filters on either clsact hook at any
// handle/priority (a record that was lost or never written cannot say
// which). Never touches anything else; another roceguard instance's
// programs are reported and left alone. Returns one line per thing removed
// or left.
struct DetachLines {
  std::vector<std::string> removed;
  std::vector<std::string> left;  // another instance's programs
};
DetachLines detach_interface(const HookOwner& owner, int ifindex, const std::string& name);

// Removes owner's TC filters from either hook at any handle/priority but
// handle/priority, where an earlier attach put them; one line per filter
// removed.
std::vector<std::string> remove_moved_tc(const HookOwner& owner, int ifindex, const std::string& name,
                                         uint32_t handle, uint32_t priority);

// Does one of owner's programs run on the interface (XDP or either TC hook)?
bool holds_programs(const HookOwner& owner, int ifindex);

// A program of another tool that runs before ours on the same TC hook and
// can end the packet's path there, so that ours never sees it. With ours a
// tcx link: a tcx program before it in the hook's order. With ours a clsact
// filter: any tcx program (Linux 6.6+ runs tcx before clsact; one returning
// TCX_PASS or TC_ACT_OK skips every clsact filter), or a clsact filter at a
// lower priority number than ours (direct action: its verdict is final).
struct ProgramAhead {
  TcHook hook = TcHook::kEgress;
  std::string where;  // "tcx", or "clsact priority 1 handle 0x1"
  uint32_t priority = 0;  // clsact only
  uint32_t prog_id = 0;
  std::string name;
};
std::vector<ProgramAhead> programs_ahead(const HookOwner& owner, int ifindex, uint32_t priority,
                                         bool ingress_at_tc);

}  // namespace rg
