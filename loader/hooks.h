// roceguard's programs on an interface's hooks: XDP through libxdp (its
// multi-program dispatcher when the kernel allows, a direct attach when not)
// and a TC egress filter on clsact at a fixed handle/priority. Each hook
// operation exists once: refuse a foreign owner, attach (recording how to
// undo it), detach ours and nothing else, tell whether ours is still there.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bpf_object.h"
#include "config.h"
#include "state.h"

namespace rg {

// Steps that undo an attach, run newest first. Every step runs even when
// one fails: a step that throws must not leave the others' attachments
// behind.
class Rollback {
 public:
  void add(std::function<void()> step) { steps_.push_back(std::move(step)); }
  void run() noexcept;

 private:
  std::vector<std::function<void()>> steps_;
};

// Throws kExitConflict when the interface's XDP hook holds a foreign program
// attached directly (libxdp cannot chain ours beside it), or a foreign TC
// egress filter sits at tc_handle/tc_priority.
void refuse_foreign_hooks(int ifindex, const std::string& name, uint32_t tc_handle, uint32_t tc_priority);

struct XdpAttachment {
  std::string mode;  // "dispatcher" or "direct"
  uint32_t prog_id = 0;
  // libxdp attached directly because this kernel offers no dispatcher:
  // other XDP programs cannot share the interface.
  bool no_dispatcher = false;
};

// Attaches obj's XDP program in mode, replacing our previous one; a foreign
// program attached directly is replaced only with force.
XdpAttachment attach_xdp(BpfObject& obj, int ifindex, const std::string& name, XdpMode mode, bool force,
                         Rollback& undo);

// Attaches obj's TC program at handle/priority on egress, replacing our
// previous filter there; a foreign one only with force. Returns its id.
uint32_t attach_tc(const BpfObject& obj, int ifindex, const std::string& name, uint32_t handle,
                   uint32_t priority, bool force, Rollback& undo);

// Are our programs still where st says they are?
bool xdp_present(const IfaceState& st);
bool tc_present(const IfaceState& st);

// Removes our TC filter at handle/priority if it runs rg_tc_egress; the
// removed program's id, 0 when there was none.
uint32_t detach_tc(int ifindex, uint32_t handle, uint32_t priority);

// Removes roceguard's programs from one interface: the XDP program named
// rg_xdp_ingress (direct, or its dispatcher slot) and the TC filter at
// handle/priority if it runs rg_tc_egress. Never touches anything else.
// Returns one line per thing removed.
std::vector<std::string> detach_interface(int ifindex, const std::string& name, uint32_t tc_handle,
                                          uint32_t tc_priority);

}  // namespace rg
