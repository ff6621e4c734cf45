// roceguard-lab: the self-contained demonstration in network namespaces.
// Users run it as `roceguard lab`, which execs this binary with the same
// arguments: the daemon ships neither the generator nor the WAN emulator.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "common/error.h"
#include "lab/dcqcn.h"
#include "lab/lab_run.h"
#include "lab/roce_gen.h"

namespace rg {
namespace {

int lab_exit_code = kExitOk;

void add_lab_options(CLI::App* lab) {
  static lab::LabOptions o;
  static bool no_tunnel = false;
  lab->add_option("--scenario", o.scenario,
                  "congestion: gateway B's port to host B is a rate-limited, DSCP-scheduled link shared with "
                  "bulk TCP, and so is gateway A's uplink, scheduled by skb->priority; bleach: the lossy, "
                  "DSCP-bleaching WAN only")
      ->check(CLI::IsMember({"congestion", "bleach"}))
      ->capture_default_str();
  lab->add_option("--mode", o.mode, "without, with or both (without first)")
      ->check(CLI::IsMember({"with", "without", "both"}))
      ->capture_default_str();
  lab->add_option("--duration", o.duration_s, "seconds of traffic per phase")
      ->check(CLI::Range(1u, 3600u))
      ->capture_default_str();
  lab->add_option("--loss", o.loss_pct, "percent of RoCE packets the WAN drops")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  lab->add_option("--loss-burst", o.loss_burst,
                  "mean length of a WAN loss burst, packets (a Gilbert-Elliott chain per direction); 1: each "
                  "packet lost on its own")
      ->check(CLI::Range(1.0, 10000.0))
      ->capture_default_str();
  static std::string wan_delay = "2ms", wan_jitter = "0";
  lab->add_option("--wan-delay", wan_delay,
                  "one-way WAN delay, each direction, e.g. 500us, 2ms, 10ms (0: none); UDP crosses a delay line")
      ->capture_default_str();
  lab->add_option("--wan-jitter", wan_jitter,
                  "each packet's delay varies uniformly by up to this much, order kept (at most --wan-delay)")
      ->capture_default_str();
  lab->add_option("--wan-rate", o.wan_rate_mbit,
                  "the WAN's own bottleneck, Mbit/s each direction: a drop-tail shaper that neither marks nor "
                  "pauses (0: none)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  static std::string wan_buffer = "bdp";
  lab->add_option("--wan-buffer", wan_buffer,
                  "the bottleneck's buffer in time at --wan-rate, e.g. 500us, 10ms; bdp: one bandwidth-delay "
                  "product over the lab's round trip")
      ->capture_default_str();
  lab->add_option("--wan-cross", o.wan_cross,
                  "bulk TCP streams (iperf3) from bulk sender A to the bulk sender through the WAN's bottleneck "
                  "and delay, sharing it with the RoCE traffic (--scenario bleach and --wan-rate; 0: none)")
      ->check(CLI::Range(0u, 128u))
      ->capture_default_str();
  lab->add_option("--wan-cross-cc", o.wan_cross_cc,
                  "the --wan-cross streams' TCP congestion control, one the kernel offers (cubic, reno, bbr, ...; "
                  "default: the namespace's)");
  lab->add_option("--reorder", o.reorder_pct,
                  "percent of UDP packets the WAN sends after the packet behind them (default: it never reorders)")
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
  lab->add_option("--ack-timeout", o.ack_timeout,
                  "host A's local ACK timeout, as `roceguard nic` takes it (500us, 8ms), rounded up to "
                  "4.096 us * 2^t; the generator waits the effective value")
      ->check(CLI::Validator([](std::string& text) { return lab::ack_timeout_problem(text); }, "DURATION"))
      ->capture_default_str();
  lab->add_option("--retry-cnt", o.retry_cnt,
                  "host A's retry count, 0..7 as `roceguard nic`: a QP fails after retry-cnt + 1 timeouts in a row")
      ->check(CLI::Range(0u, 7u))
      ->capture_default_str();
  lab->add_option("--retransmit", o.retransmit,
                  "gbn: Go-Back-N; sr: selective repeat, a model of ConnectX-6 Dx and later with ROCE_ACCL")
      ->check(CLI::IsMember({"gbn", "sr"}))
      ->capture_default_str();
  lab->add_option("--transport", o.transport,
                  "the QPs' transport: rc (Reliable Connected: ACKs, NAKs, resends as --retransmit says); uc "
                  "(Unreliable Connected: every PSN sent once at host A's line rate, no ACKs, no resends; host B "
                  "counts the PSN gaps)")
      ->check(CLI::IsMember({"rc", "uc"}))
      ->capture_default_str();
  lab->add_option("--cc", o.cc,
                  "host A's congestion control: dcqcn (each QP paced at its DCQCN rate, at most --host-rate, cut "
                  "by the CNPs host B sends for CE marks; a model of ConnectX) or none (CNPs only counted)")
      ->check(CLI::IsMember({"dcqcn", "none"}))
      ->capture_default_str();
  lab->add_option("--dcqcn", o.dcqcn,
                  "DCQCN settings by their mlx5 names (ecn/roce_rp, and roce_np's min_time_between_cnps for host "
                  "B), KEY=VALUE,...; defaults mlx5's; e.g. rpg_time_reset=5000,rpg_min_dec_fac=95,clamp_tgt_rate=1")
      ->check(CLI::Validator(
          [](std::string& text) {
            lab::DcqcnSettings s;
            return lab::apply_dcqcn_settings(text, s);
          },
          "KEY=VALUE,..."))
      ->allow_extra_args(false);
  auto* no_tunnel_flag =
      lab->add_flag("--no-tunnel", no_tunnel, "roceguard re-marks and repairs DSCP only, no Geneve between the gateways");
  lab->add_option("--tunnel-kind", o.tunnel_kind,
                  "what crosses the WAN between the gateways: geneve (roceguard's tunnel, with roceguard); vxlan (the "
                  "kernel's VXLAN device, UDP 4789, tos inherit, in both phases; roceguard on it re-marks, repairs "
                  "and counts, as with --no-tunnel)")
      ->check(CLI::IsMember({"geneve", "vxlan"}))
      ->excludes(no_tunnel_flag)
      ->capture_default_str();
  lab->add_option("--shield", o.shield,
                  "the gateways' loss shield (tunnel.shield): off; control: each gateway sends a second copy into "
                  "the tunnel of ACK/NAK, CNP, READ, atomic and AckReq packets and of the first resend of each burst; "
                  "all: of every RoCE packet; the "
                  "receiving gateway drops whichever copy arrives second; auto: all while the far gateway "
                  "reports a raw loss of at least 0.05 % (tunnel.shield_auto_loss_ppm) without congestion")
      ->check(CLI::IsMember({"off", "control", "all", "auto"}))
      ->capture_default_str();
  lab->add_option("--congestion", o.congestion,
                  "the gateways' congestion loop (tunnel.congestion): on: each gateway reports the rate and "
                  "queueing delay of what it receives back to the other, models the WAN's bottleneck from the "
                  "reports and marks inner CE on the RoCE it sends faster than a little under it, so host A's "
                  "DCQCN slows down before the WAN's queue fills")
      ->check(CLI::IsMember({"off", "on"}))
      ->capture_default_str();
  lab->add_option("--congestion-signal", o.congestion_signal,
                  "what the congestion loop tells host A (tunnel.congestion_signal): cnp, CNPs gateway A makes from "
                  "host B's ACKs; ce, inner CE marks host B answers with CNPs a WAN round trip later; both")
      ->check(CLI::IsMember({"both", "cnp", "ce"}))
      ->capture_default_str();
  lab->add_option("--ingress-hook", o.ingress_hook,
                  "where the gateways run roceguard's ingress program (dataplane.ingress_hook): auto picks TC "
                  "ingress on the lab's veths")
      ->check(CLI::IsMember({"auto", "xdp", "tc"}))
      ->capture_default_str();
  lab->add_flag("--xdp-forward", o.xdp_forward,
                "the gateways run the XDP fast path (dataplane.xdp_forward) between their LAN and WAN "
                "interfaces, both attached");
  lab->add_option("--burst", o.burst,
                  "host A sends up to this many consecutive packets of one QP as one UDP_SEGMENT (GSO) send, "
                  "as an RNIC's burst arrives; 1: one send per packet")
      ->check(CLI::Range(1u, lab::kMaxBurst))
      ->capture_default_str();
  lab->add_flag("--gro-forwarding", o.gro_forwarding,
                "UDP GRO for forwarding (ethtool rx-udp-gro-forwarding) on the gateways' LAN-facing veths: "
                "datagrams of a flow arriving back to back reach roceguard's TC egress merged into one GSO skb");
  lab->add_option("--report", o.report_dir, "report directory (default ./roceguard-lab-<UTC time>)");
  lab->add_option("--metrics-listen", o.metrics_listen,
                  "gateway A's Prometheus endpoint; gateway B's is on the next port (port 0: any free)")
      ->capture_default_str();
  lab->add_option("--pcap-seconds", o.pcap_seconds, "seconds captured at every hop per phase (0: none)")
      ->check(CLI::Range(0u, 60u))
      ->capture_default_str();
  lab->add_option("--prefix", o.prefix, "name prefix of the lab's namespaces and pin directories")
      ->capture_default_str();
  lab->add_option("--host-rate", o.sender_mbit,
                  "congestion: Mbit/s host A's NIC sends at most (the RoCE traffic's offered load)")
      ->check(CLI::Range(1u, 10000u))
      ->capture_default_str();
  lab->add_option("--link-rate", o.link_mbit, "congestion: Mbit/s of gateway B's port to host B")
      ->check(CLI::Range(2u, 10000u))
      ->capture_default_str();
  lab->add_option("--priority-rate", o.priority_mbit,
                  "congestion: Mbit/s guaranteed to DSCP 46 there; best effort is guaranteed the rest")
      ->check(CLI::Range(1u, 9999u))
      ->capture_default_str();
  lab->add_option("--queue", o.queue_packets, "congestion: buffer of each scheduler class, packets")
      ->check(CLI::Range(1u, 10000u))
      ->capture_default_str();
  lab->add_option("--fabric-ecn", o.fabric_ecn,
                  "congestion: ECN marking at gateway B's port, by each class queue's depth as a datacenter switch "
                  "marks: on (Kmin a quarter, Kmax three quarters of --queue full frames, Pmax 0.2), off, or "
                  "KMIN,KMAX,PMAX (bytes, bytes, a fraction)")
      ->capture_default_str();
  lab->add_option("--bulk-streams", o.bulk_streams, "congestion: TCP streams of each bulk sender (iperf3)")
      ->check(CLI::Range(1u, 128u))
      ->capture_default_str();
  lab->add_option("--uplink-rate", o.uplink_mbit, "congestion: Mbit/s of gateway A's uplink (its wan0)")
      ->check(CLI::Range(2u, 10000u))
      ->capture_default_str();
  lab->add_option("--uplink-priority-rate", o.uplink_priority_mbit,
                  "congestion: Mbit/s guaranteed there to the class roceguard's skb->priority picks; best effort "
                  "is guaranteed the rest")
      ->check(CLI::Range(1u, 9999u))
      ->capture_default_str();
  lab->add_flag("-v,--verbose", o.verbose, "debug log, including libbpf and libxdp messages");
  lab->callback([] {
    o.tunnel = !no_tunnel && o.tunnel_kind == "geneve";
    o.wan_delay = lab::parse_wan_duration("--wan-delay", wan_delay);
    o.wan_jitter = lab::parse_wan_duration("--wan-jitter", wan_jitter);
    o.wan_buffer = wan_buffer == "bdp" ? std::chrono::microseconds{0} : lab::parse_wan_duration("--wan-buffer", wan_buffer);
    if (wan_buffer != "bdp" && o.wan_buffer.count() == 0)
      throw Error("lab: --wan-buffer must be above 0, or bdp", kExitUsage);
    lab_exit_code = lab::run_lab(o);
  });
}

}  // namespace
}  // namespace rg

int main(int argc, char** argv) {
  // Named as users type it; `roceguard lab --help` prints this usage.
  CLI::App app{"RoCE v2 from a congested gateway uplink across a lossy, DSCP-bleaching WAN into a congested, "
               "DSCP-scheduled network, in network namespaces, without and with roceguard",
               "roceguard lab"};
  rg::add_lab_options(&app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : rg::kExitUsage;
  } catch (const rg::Error& e) {
    std::fprintf(stderr, "roceguard lab: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "roceguard lab: %s\n", e.what());
    return rg::kExitFailure;
  }
  return rg::lab_exit_code;
}
