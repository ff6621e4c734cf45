// roceguard lab: the self-contained demonstration in network namespaces.
#include "cli.h"
#include "lab/lab_run.h"

namespace rg {

void add_lab_command(CLI::App& app) {
  static lab::LabOptions o;
  static bool no_tunnel = false;
  auto* lab = app.add_subcommand(
      "lab", "RoCE v2 across a lossy, DSCP-bleaching WAN in network namespaces, without and with roceguard");
  lab->add_option("--mode", o.mode, "without, with or both (without first)")
      ->check(CLI::IsMember({"with", "without", "both"}))
      ->capture_default_str();
  lab->add_option("--duration", o.duration_s, "seconds of traffic per phase")
      ->check(CLI::Range(1u, 3600u))
      ->capture_default_str();
  lab->add_option("--loss", o.loss_pct, "percent of RoCE packets the WAN drops")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  lab->add_option("--ce", o.ce_pct, "percent of ECN-capable RoCE packets the WAN marks CE")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  lab->add_option("--qps", o.qps, "RC queue pairs from host A to host B")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  lab->add_option("--payload", o.payload, "payload bytes per packet (RoCE path MTU)")
      ->check(CLI::IsMember({256, 512, 1024}))
      ->capture_default_str();
  lab->add_flag("--no-tunnel", no_tunnel, "roceguard re-marks and repairs DSCP only, no Geneve between the gateways");
  lab->add_option("--report", o.report_dir, "report directory (default ./roceguard-lab-<UTC time>)");
  lab->add_option("--metrics-listen", o.metrics_listen,
                  "gateway A's Prometheus endpoint; gateway B's is on the next port (port 0: any free)")
      ->capture_default_str();
  lab->add_option("--pcap-seconds", o.pcap_seconds, "seconds captured at every hop per phase (0: none)")
      ->check(CLI::Range(0u, 60u))
      ->capture_default_str();
  lab->add_option("--prefix", o.prefix, "name prefix of the lab's namespaces and pin directories")
      ->capture_default_str();
  lab->add_flag("-v,--verbose", o.verbose, "debug log, including libbpf and libxdp messages");
  lab->callback([] {
    o.tunnel = !no_tunnel;
    exit_code() = lab::run_lab(o);
  });
}

}  // namespace rg
