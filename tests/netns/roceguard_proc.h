// `roceguard run` in a gateway namespace, as an operator starts it: the
// binary, a config file and a pin path. Stopping it leaves its programs
// attached (that is the loader's contract), so the destructor also runs
// `roceguard detach` and removes the pin directory.
#pragma once

#include <memory>
#include <string>

#include "lab/proc.h"
#include "lab/topology.h"

namespace rg::test {

class RoceguardRun {
 public:
  RoceguardRun(const lab::Topology& topo, lab::Node node, std::string config_toml,
               const std::string& dir);
  ~RoceguardRun();

  // Starts `roceguard run` and waits (bounded) until it serves metrics.
  void start();
  void kill9();
  bool running() { return child_ && child_->running(); }
  // The loader's pid (the namespace wrappers exec into it).
  pid_t pid() const { return child_ ? child_->pid() : -1; }
  const std::string& pin_path() const { return pin_path_; }
  const std::string& config_path() const { return config_path_; }
  std::string log() const;
  // roceguard <args...> --pin-path <pin> in the node; returns stdout, throws on failure.
  std::string cli(std::vector<std::string> args) const;

 private:
  const lab::Topology& topo_;
  lab::Node node_;
  std::string config_path_, pin_path_, log_path_, log_path_current_;
  std::unique_ptr<lab::Child> child_;
  int starts_ = 0;
};

}  // namespace rg::test
