// roce-gen: the lab's RoCE v2 generator, its receiver and its lossy WAN as a
// command, for VMs and benchmarks. Every mode is bounded by --duration and
// stops cleanly on SIGINT/SIGTERM.
//
//   roce-gen recv [--netns NS] [--duration S]
//   roce-gen send --peer ADDR [--netns NS] [--qps N] [--messages N] [--ack-timeout D]
//                 [--retry-cnt N] [--retransmit gbn|sr] [--burst N] [--cc dcqcn|none]
//                 [--dcqcn KEY=VALUE,...] [--line-rate MBIT] ...
//   roce-gen wan --netns NS --interface IF [--interface IF] [--loss-ppm N]
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/error.h"
#include "lab/roce_gen.h"
#include "lab/topology.h"
#include "lab/wan.h"

namespace {

using namespace rg::lab;
using nlohmann::json;

std::atomic<bool> g_stop{false};
std::atomic<Sender*> g_sender{nullptr};

void on_signal(int) {
  g_stop = true;
  if (Sender* s = g_sender.load()) s->stop();
}

json to_json(const WanStats& w) {
  return {{"packets", w.packets}, {"bytes", w.bytes}, {"dropped", w.dropped},
          {"bleached", w.bleached}, {"ce_marked", w.ce_marked}};
}

// Runs f with the calling thread in netns (if given): sockets and BPF
// attachments made there stay there.
template <typename F>
auto in_netns(const std::string& netns, F f) {
  std::optional<NetnsGuard> guard;
  if (!netns.empty()) guard.emplace(netns);
  return f();
}

void wait_until(std::chrono::seconds duration, const std::function<void()>& every_second) {
  const auto end = std::chrono::steady_clock::now() + duration;
  auto next = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!g_stop && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (std::chrono::steady_clock::now() >= next) {
      next += std::chrono::seconds(1);
      every_second();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RoCE v2 traffic generator, receiver and lossy WAN of the roceguard lab"};
  app.require_subcommand(1);
  app.fallthrough();  // common options may follow the subcommand
  std::string netns;
  bool json_out = false, quiet = false;
  unsigned duration_s = 30;
  app.add_option("--netns", netns, "run in this network namespace (/run/netns/NAME)");
  app.add_flag("--json", json_out, "final statistics as JSON on stdout");
  app.add_flag("-q,--quiet", quiet, "no per-second lines on stderr");
  app.add_option("--duration", duration_s, "upper bound in seconds")->check(CLI::Range(1u, 86400u));

  QpPlan plan;
  auto add_plan = [&](CLI::App* c) {
    c->add_option("--qps", plan.count, "queue pairs")->check(CLI::Range(1u, 4096u));
    c->add_option("--first-psn", plan.first_psn, "starting PSN of every QP (24 bits)")
        ->check(CLI::Range(0u, 0xffffffu));
  };

  // The same text `roceguard nic` takes, rounded to the IBA exponent as the
  // profile rounds it; the sender waits the effective value.
  auto ack_timeout_check =
      CLI::Validator([](std::string& text) { return ack_timeout_problem(text); }, "DURATION");
  std::string retransmit = "gbn", transport = "rc";
  auto add_retransmit = [&](CLI::App* c) {
    c->add_option("--retransmit", retransmit,
                  "gbn: Go-Back-N; sr: selective repeat, a model of ConnectX-6 Dx and later with ROCE_ACCL "
                  "(sender and receiver must agree)")
        ->check(CLI::IsMember({"gbn", "sr"}))
        ->capture_default_str();
    c->add_option("--transport", transport,
                  "rc: Reliable Connected; uc: Unreliable Connected, every PSN sent once, no ACKs "
                  "(sender and receiver must agree)")
        ->check(CLI::IsMember({"rc", "uc"}))
        ->capture_default_str();
  };

  // DCQCN's settings by their mlx5 names, on both ends: the requester takes
  // roce_rp's, the responder min_time_between_cnps.
  std::vector<std::string> dcqcn_texts;
  auto dcqcn_check = CLI::Validator(
      [](std::string& text) {
        DcqcnSettings s;
        return apply_dcqcn_settings(text, s);
      },
      "KEY=VALUE,...");
  auto add_dcqcn = [&](CLI::App* c, const char* what) {
    c->add_option("--dcqcn", dcqcn_texts, what)->check(dcqcn_check)->allow_extra_args(false);
  };

  SenderConfig scfg;
  scfg.cc = CongestionControl::kDcqcn;
  std::string cc = "dcqcn";
  std::string opcode = "send", ack_timeout = default_ack_timeout().text;
  unsigned dscp = 0, ecn = 0;
  scfg.retry_cnt = default_retry_cnt();
  auto* send = app.add_subcommand("send", "run RC requesters towards a receiver");
  send->add_option("--peer", scfg.peer, "receiver address (IPv4 or IPv6)")->required();
  add_plan(send);
  send->add_option("--messages", scfg.messages, "messages per QP (one packet each)");
  send->add_option("--payload", scfg.payload, "payload bytes per packet")->check(CLI::Range(0, 4096));
  send->add_option("--opcode", opcode, "send or write")->check(CLI::IsMember({"send", "write"}));
  send->add_option("--dscp", dscp, "DSCP to send with")->check(CLI::Range(0u, 63u));
  send->add_option("--ecn", ecn, "ECN bits to send with (2 = ECT(0))")->check(CLI::Range(0u, 3u));
  send->add_option("--window", scfg.window,
                   "unacknowledged packets per QP (the lab sizes it to the bandwidth-delay product)")
      ->check(CLI::Range(1u, kMaxWindow))
      ->capture_default_str();
  send->add_option("--ack-timeout", ack_timeout,
                   "local ACK timeout as `roceguard nic` takes it (500us, 8ms), rounded up to 4.096 us * 2^t")
      ->check(ack_timeout_check)
      ->capture_default_str();
  send->add_option("--retry-cnt", scfg.retry_cnt, "timeouts in a row before a QP fails, 0..7 as `roceguard nic`")
      ->check(CLI::Range(0u, 7u))
      ->capture_default_str();
  add_retransmit(send);
  send->add_option("--pace", scfg.pace_pps,
                   "uc: packets per second of all QPs together (0: as fast as the sockets take them)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  send->add_option("--burst", scfg.burst,
                   "up to this many consecutive packets of one QP per sendmsg, as one UDP_SEGMENT (GSO) "
                   "datagram train; 1: one send per packet")
      ->check(CLI::Range(1u, kMaxBurst))
      ->capture_default_str();
  send->add_option("--cc", cc,
                   "congestion control: dcqcn (each QP paced at its DCQCN rate, at most --line-rate, cut by "
                   "CNPs) or none (CNPs only counted)")
      ->check(CLI::IsMember({"dcqcn", "none"}))
      ->capture_default_str();
  add_dcqcn(send, "DCQCN settings by their mlx5 names (roce_rp), e.g. rpg_time_reset=5000,rpg_min_dec_fac=95; "
                  "defaults mlx5's");
  send->add_option("--line-rate", scfg.line_mbit, "Mbit/s: the NIC's line rate, DCQCN's ceiling per QP")
      ->check(CLI::Range(1u, 4000000u))
      ->capture_default_str();
  send->add_option("--src-port", scfg.src_port_base, "UDP source port of QP 0 (QP i: +i)");
  send->add_option("--ack-port", scfg.ack_port, "port responses arrive on (default 4791)");

  ReceiverConfig rcfg;
  auto* recv = app.add_subcommand("recv", "serve RC responders until --duration or a signal");
  add_plan(recv);
  recv->add_option("--ack-every", rcfg.ack_every, "ACK at least every n packets")->check(CLI::Range(1u, 1024u));
  recv->add_option("--reply-port", rcfg.reply_port, "port responses are sent to (default 4791)");
  bool no_cnp = false;
  recv->add_flag("--no-cnp", no_cnp, "do not answer ECN CE with CNPs");
  add_dcqcn(recv, "min_time_between_cnps=US: at most one CNP per QP per this (default 4; the other DCQCN "
                  "keys are the requester's)");
  add_retransmit(recv);

  rg_wan_config wcfg{};
  wcfg.flags = RG_WAN_F_BLEACH;
  std::vector<std::string> ifnames;
  bool no_bleach = false, roce_only = false;
  auto* wan = app.add_subcommand("wan", "attach the lossy WAN until --duration or a signal");
  wan->add_option("--interface", ifnames, "interface to attach to (TC ingress)")->required();
  wan->add_option("--loss-ppm", wcfg.loss_ppm, "UDP packets dropped, per million")
      ->check(CLI::Range(0u, RG_WAN_PPM));
  wan->add_option("--ce-ppm", wcfg.ce_ppm, "ECN-capable packets marked CE, per million")
      ->check(CLI::Range(0u, RG_WAN_PPM));
  wan->add_flag("--no-bleach", no_bleach, "leave DSCP alone");
  wan->add_flag("--roce-only", roce_only, "drop/mark only UDP 4791 and 6081");

  CLI11_PARSE(app, argc, argv);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);

  try {
    if (*send) {
      scfg.qps = plan;
      scfg.opcode = opcode == "write" ? kOpWriteOnly : kOpSendOnly;
      scfg.tos = static_cast<uint8_t>(dscp << 2 | ecn);
      scfg.timeout = ack_timeout_setting(ack_timeout).wait;
      scfg.retransmit = *parse_retransmit(retransmit);
      scfg.transport = *parse_transport(transport);
      scfg.duration = std::chrono::seconds(duration_s);
      parse_congestion_control(cc, &scfg.cc);
      scfg.dcqcn = parse_dcqcn_settings(dcqcn_texts);
      if (!quiet)
        scfg.on_second = [](const SenderStats& s) {
          std::cerr << s.elapsed.count() / 1000 << "s sent=" << s.packets
                    << " retransmits=" << s.retransmits << " naks=" << s.naks
                    << " timeouts=" << s.timeouts << " completed=" << s.completed
                    << " cnps=" << s.cnps << "\n";
        };
      auto sender = in_netns(netns, [&] { return std::make_unique<Sender>(scfg); });
      g_sender = sender.get();
      SenderStats s = sender->run();
      g_sender = nullptr;
      if (json_out) std::cout << to_json(s).dump(2) << "\n";
      else std::cerr << "done: " << to_json(s).dump() << "\n";
      return s.qps_failed == 0 && s.qps_done == plan.count ? 0 : 1;
    }
    if (*recv) {
      rcfg.qps = plan;
      rcfg.cnp = !no_cnp;
      rcfg.cnp_interval = std::chrono::microseconds(parse_dcqcn_settings(dcqcn_texts).min_time_between_cnps);
      rcfg.retransmit = *parse_retransmit(retransmit);
      rcfg.transport = *parse_transport(transport);
      auto receiver = in_netns(netns, [&] { return std::make_unique<Receiver>(rcfg); });
      receiver->start();
      wait_until(std::chrono::seconds(duration_s), [&] {
        if (quiet) return;
        auto r = receiver->stats();
        std::cerr << "received=" << r.packets << " delivered=" << r.delivered
                  << " naks=" << r.naks << " lost_estimate=" << r.lost_estimate
                  << " ecn_ce=" << r.ecn_ce << "\n";
      });
      receiver->stop();
      if (json_out) std::cout << to_json(receiver->stats()).dump(2) << "\n";
      return 0;
    }
    if (*wan) {
      if (no_bleach) wcfg.flags &= ~RG_WAN_F_BLEACH;
      if (roce_only) wcfg.flags |= RG_WAN_F_ROCE_ONLY;
      if (netns.empty()) throw rg::Error("wan: --netns is required (the WAN runs in its own namespace)", rg::kExitUsage);
      Wan w(netns, ifnames, wcfg);
      auto dump = [&] {
        json j = json::object();
        for (const auto& ifname : ifnames)
          for (int c = 0; c < RG_WAN_CLASS_MAX; ++c) {
            auto cls = static_cast<rg_wan_class>(c);
            j[ifname][wan_class_name(cls)] = to_json(w.stats(ifname, cls));
          }
        return j;
      };
      wait_until(std::chrono::seconds(duration_s), [&] {
        if (!quiet) std::cerr << dump().dump() << "\n";
      });
      if (json_out) std::cout << dump().dump(2) << "\n";
      return 0;
    }
  } catch (const rg::Error& e) {
    std::cerr << "roce-gen: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "roce-gen: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
