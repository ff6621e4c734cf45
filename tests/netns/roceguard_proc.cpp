#include "roceguard_proc.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "lab_fixture.h"

namespace rg::test {

RoceguardRun::RoceguardRun(const lab::Topology& topo, lab::Node node, std::string config_toml,
                           const std::string& dir)
    : topo_(topo), node_(node) {
  const std::string name(lab::node_suffix(node));
  config_path_ = dir + "/roceguard-" + name + ".toml";
  log_path_ = dir + "/roceguard-" + name + ".log";
  pin_path_ = "/sys/fs/bpf/" + std::string(kTag) + "-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(config_path_) << config_toml;
}

RoceguardRun::~RoceguardRun() {
  child_.reset();  // SIGTERM, bounded, then SIGKILL
  try {
    lab::run(topo_.exec_argv(node_, {ROCEGUARD_BIN, "detach", "--pin-path", pin_path_}));
  } catch (...) {
  }
  std::error_code ec;
  std::filesystem::remove_all(pin_path_, ec);
}

void RoceguardRun::start() {
  child_.reset();
  // Each start gets its own log so a restart's readiness is its own.
  std::string log = log_path_ + "." + std::to_string(starts_++);
  child_ = std::make_unique<lab::Child>(
      topo_.exec_argv(node_, {ROCEGUARD_BIN, "run", "--config", config_path_, "--pin-path", pin_path_}),
      log);
  log_path_current_ = log;
  for (int i = 0; i < 300; ++i) {  // 15 s
    if (this->log().find("serving metrics") != std::string::npos) return;
    if (!child_->running())
      throw std::runtime_error("roceguard run exited (status " + std::to_string(child_->wait({})) +
                               "): " + this->log());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("roceguard run did not start serving: " + this->log());
}

void RoceguardRun::kill9() {
  child_->signal(SIGKILL);
  child_->wait(std::chrono::seconds(10));
}

std::string RoceguardRun::log() const {
  std::ifstream f(log_path_current_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string RoceguardRun::cli(std::vector<std::string> args) const {
  args.insert(args.begin(), ROCEGUARD_BIN);
  args.push_back("--pin-path");
  args.push_back(pin_path_);
  return lab::run_checked(topo_.exec_argv(node_, args));
}

}  // namespace rg::test
