// The work behind `run`, `attach` and `detach`, apart from their flags and
// output: keeping the configured interfaces attached while `run` serves
// metrics, and removing exactly roceguard's programs and pins on `detach`.
//
// Lifetime: programs stay attached and maps stay pinned when `run` exits,
// on SIGTERM as on kill -9, so RoCE keeps its priority while the loader is
// restarted or upgraded; the next run/attach replaces exactly its own
// programs and continues the pinned counters. `detach` is the one way to
// remove them.
#pragma once

#include <signal.h>

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/state.h"

namespace rg {

// SIGTERM, SIGINT and SIGHUP, blocked from construction on and taken
// synchronously by the main loop: a SIGTERM during the attach waits for it
// to complete (all) or roll back (nothing) instead of cutting it in half.
// `attach` and `detach` hold them blocked to the end: a signal then ends
// the process once the command is done.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The next of them within timeout_ms, 0 when none came. Returns early,
  // with 0 and other_ready set, when other_fd (if >= 0) becomes readable.
  int wait(int other_fd, int timeout_ms, bool& other_ready) const;

 private:
  sigset_t set_{};
  int fd_ = -1;  // signalfd: the signals and other_fd in one poll()
};

// Attaches cfg under pin_path (mounting bpffs and locking the pin directory)
// and returns the attach record.
State attach(const Config& cfg, const std::string& pin_path, bool reset_state, bool force);

// `run`: binds the exporter, attaches the interfaces that exist, tells
// systemd it is ready, then attaches interfaces as they appear and
// re-attaches those that come back or lose a hook, woken by rtnetlink link
// and TC events (with a slow re-check for what raises none), until SIGTERM
// or SIGINT. An interface that does not exist yet is waited for, not an
// error: at boot the NIC driver or the CNI may create it after us.
// SIGHUP reloads the configuration with reload() (a refused one is logged
// and the one in force stays): the tunnel peers and routes are applied in
// place; any other key that changed is logged as needing a restart and
// not applied.
void run_daemon(const Config& cfg, const std::string& pin_path, bool reset_state, bool force,
                const StopSignals& signals, const std::function<Config()>& reload = {});

struct DetachResult {
  size_t programs_removed = 0;
  bool pins_removed = false;  // every interface done: maps and record gone
};

// Removes this pin path's programs (those using its maps) from every
// interface of the network namespace, or with `only` from the interfaces
// named there (and from the device the record had under that name, which
// may carry another name since), at any TC handle/priority: a record that
// was lost, never written or cannot be read hides none of them. Then the
// pins, once no interface is left in the record and no program of theirs
// anywhere; else rewrites the record without the removed ones. With a
// record this roceguard cannot read, the programs are removed all the same
// and rg::Error (kExitConflict) names the record and --reset-state: the
// pins stay. say() hears each removal, and each interface found gone, as
// it happens.
DetachResult detach(const std::string& pin_path, const std::vector<std::string>& only,
                    const std::function<void(const std::string&)>& say);

}  // namespace rg
