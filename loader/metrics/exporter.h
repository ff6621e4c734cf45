// Prometheus exporter (prometheus-cpp's text format, libmicrohttpd). Serves
// /metrics, over TLS and behind basic authentication when a web
// configuration file asks for them, every value read
// from the pinned maps (and sysfs for NIC counters) at scrape time; and,
// on an address of their own, the liveness and readiness probes
// (metrics/health.h), which never wait for a scrape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rg {

struct ExporterOptions {
  std::string listen = "127.0.0.1:9741";  // host:port or [v6]:port, numeric
  // Web configuration file (metrics/web_config.h): TLS and basic
  // authentication of /metrics; "" serves plain HTTP to anyone.
  std::string web_config;
  // host:port or [v6]:port of /livez and /readyz; "" serves none.
  std::string health_listen;
  std::string pin_path = "/sys/fs/bpf/roceguard";
  std::vector<std::string> interfaces;    // for attach-state and NIC counters
  bool per_qp = false;                    // per-QP series (bounded by top_qps)
  size_t top_qps = 50;
  std::string sysfs_root = "/sys";        // where class/infiniband is looked up
  size_t threads = 4;                     // HTTP worker threads
  // Interface names by ifindex for maps whose programs run in another
  // network namespace (the lab's gateways): there if_indextoname() in the
  // exporter's namespace would name an unrelated interface.
  std::map<uint32_t, std::string> interface_names;
  // false when the pins live in a private mount namespace (dataplane/pin_scope.h).
  bool pins_outlive_process = true;
  // false: exporter-only mode (`run --dataplane false`), no pinned maps to
  // read; the NIC counters and the NIC profile state only.
  bool dataplane = true;
  // `nic apply`'s state directory, for roceguard_nic_profile_applied; ""
  // exports no profile state.
  std::string nic_state_dir;
};

// The loss shield's "auto" mode as `roceguard run` runs it
// (daemon/shield_auto.h): one peer whose shield is "auto"...
struct ShieldAutoPeer {
  std::string name;
  bool on = false;
  bool eliminates = false;    // the peer says it eliminates copies
  double reported_loss = -1;  // raw loss the peer reports of our packets; -1: none
  bool congested = false;     // ...with a one-way delay that rose
  uint64_t turned_on = 0, turned_off = 0;
};

// ...and every peer as this gateway measures it and reports back.
struct PeerFeedback {
  std::string name;
  double measured_loss = -1;  // raw loss of the peer's packets here; -1: too few to say
  bool congested = false;
};

// The congestion loop's states by name, in the order of daemon/congestion.h's
// CongestionState.
inline constexpr const char* kCongestionStateNames[] = {"no_report", "learning", "cruise",
                                                        "probe",     "drain",    "compete"};

// The congestion loop as `roceguard run` runs it (daemon/congestion.h),
// per peer: its model, the peer's newest report and this gateway's own.
struct CongestionPeer {
  std::string name;
  std::string state;  // one of kCongestionStateNames
  uint64_t bottleneck_kbps = 0;
  uint64_t rate_kbps = 0;  // the phantom queue's drain rate; 0: no marks
  bool reported = false;   // the peer's report below is fresh
  uint64_t reported_rate_kbps = 0;
  bool reported_has_delay = false;
  uint32_t reported_delay_us = 0;
  uint64_t sent_rate_kbps = 0;  // what this gateway reports to the peer
  bool sent_has_delay = false;
  uint32_t sent_delay_us = 0;
  uint64_t fallbacks = 0, probes = 0, resets = 0, competes = 0;
};

// text gzip-compressed at zlib's default level, as a scrape is sent to a
// client that accepts gzip. Throws rg::Error if zlib fails.
std::string gzip_body(std::string_view text);

// True when an Accept-Encoding header value accepts gzip (listed without
// q=0).
bool accepts_gzip(std::string_view accept_encoding);

class Exporter {
 public:
  explicit Exporter(ExporterOptions opts);  // binds; throws rg::Error
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // The loader reports what it attached; exported as roceguard_attached.
  void set_attach_state(const std::string& ifname, const std::string& hook, bool attached);
  // Where ifname's ingress program runs, "xdp_ingress" or "tc_ingress":
  // roceguard_attached has a series for that hook only.
  void set_ingress_hook(const std::string& ifname, const std::string& hook);
  // The shield's "auto" mode, reported by the daemon after each evaluation.
  void set_shield_auto(std::vector<ShieldAutoPeer> peers, std::vector<PeerFeedback> feedback);
  // The congestion loop, reported by the daemon after each tick.
  void set_congestion(std::vector<CongestionPeer> peers);
  // A reload (SIGHUP): applies next's listen addresses, web configuration
  // and per-QP settings, the web configuration file read again (a renewed
  // certificate or password applies too). An endpoint whose address stays
  // is closed and opened again; one that moves opens before the old one
  // closes. Returns the settings that changed, by their option names.
  // Throws rg::Error, with the endpoints as they were, when the file does
  // not load or a new endpoint cannot start; if even the old one cannot
  // start again, serving() turns false.
  std::vector<std::string> reconfigure(const ExporterOptions& next);
  // False once a failed reload lost an endpoint it could not restore.
  bool serving() const;
  // Bound address (useful with port 0).
  std::string listen_address() const;
  // http://<bound address>/metrics, https:// when serving TLS.
  std::string metrics_url() const;
  // Bound address of the probes, "" when there are none.
  std::string health_address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rg
