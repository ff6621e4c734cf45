// `roceguard man PAGE` (hidden): the manual pages, written as troff from
// the CLI11 app itself and the option table, so a page lists exactly the
// commands and flags of the binary it ships with. roceguard(8) names the
// commands; roceguard-COMMAND(8) has one command's flags and those of its
// subcommands; roceguard.toml(5) is the option table. packaging/gen-man.sh
// writes every page `man --list` names.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "common/error.h"
#include "common/version.h"

namespace rg {
namespace {

constexpr const char* kToml = "roceguard.toml";

struct ExitCode {
  int code;
  const char* meaning;
};
// common/error.h's codes, in words.
constexpr ExitCode kExitCodes[] = {
    {kExitOk, "success"},
    {kExitFailure, "runtime failure: the kernel refused, input or output failed"},
    {kExitUsage, "bad command line or configuration"},
    {kExitNotFound, "not found: nothing attached with this pin path, no pinned state, no device"},
    {kExitConflict, "conflict: a foreign XDP program or TC filter, incompatible pinned maps, another roceguard "
                    "managing the pin path"},
    {kExitUnhealthy, "status: something configured is not attached; doctor: something will not work"},
};

bool hidden(const CLI::App* sub) { return sub->get_group().empty(); }

std::string header(const std::string& name, int section) {
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return ".TH " + troff_text(upper) + " " + std::to_string(section) + " \"\" \"roceguard " +
         troff_text(running_version().version) + "\" \"" +
         (section == 5 ? "File Formats" : "System Administration") + "\"\n";
}

// One .TP item per option that is listed in --help (--help itself
// optionally: the global one is the command's too).
void options_of(std::ostringstream& o, const CLI::App* app, bool with_help = true) {
  for (const CLI::Option* opt : app->get_options()) {
    if (opt->get_group().empty() || (!with_help && opt == app->get_help_ptr())) continue;
    std::string names;
    for (const auto& s : opt->get_snames()) names += (names.empty() ? "" : ", ") + ("\\fB\\-" + troff_text(s) + "\\fR");
    for (const auto& l : opt->get_lnames())
      names += (names.empty() ? "" : ", ") + ("\\fB\\-\\-" + troff_text(l) + "\\fR");
    if (names.empty()) names = "\\fI" + troff_text(opt->get_name()) + "\\fR";  // a positional
    else if (opt->get_type_size() != 0) names += " \\fI" + troff_text(opt->get_type_name()) + "\\fR";
    o << ".TP\n" << names << "\n" << troff_text(opt->get_description()) << "\n";
  }
}

void exit_status(std::ostringstream& o) {
  o << ".SH \"EXIT STATUS\"\n";
  for (const auto& e : kExitCodes) o << ".TP\n.B " << e.code << "\n" << troff_text(e.meaning) << "\n";
}

std::string page_name(const CLI::App* sub) { return "roceguard-" + sub->get_name(); }

// The footer of a command's --help, "" when it is the option table (which
// run, attach and config check print there): that is roceguard.toml(5).
std::string footer_of(const CLI::App* sub) {
  const std::string footer = sub->get_footer();
  return footer.empty() || footer == options_text() ? "" : ".PP\n" + troff_text(footer) + ".\n";
}

// The command's flags, then its subcommands, each as a section.
void command_body(std::ostringstream& o, const CLI::App* sub, const std::string& path) {
  options_of(o, sub);
  for (const CLI::App* child : sub->get_subcommands({})) {
    if (hidden(child)) continue;
    const std::string child_path = path + " " + child->get_name();
    o << ".SS \"" << troff_text(child_path) << "\"\n" << troff_text(child->get_description()) << "\n"
      << footer_of(child);
    command_body(o, child, child_path);
  }
}

std::string command_page(const CLI::App& app, const CLI::App* sub) {
  std::ostringstream o;
  const std::string name = page_name(sub);
  o << header(name, 8) << ".SH NAME\n" << troff_text(name) << " \\- " << troff_text(sub->get_description()) << "\n"
    << ".SH SYNOPSIS\n.B roceguard\n[\\fIGLOBAL OPTIONS\\fR]\n.B " << troff_text(sub->get_name()) << "\n";
  if (!sub->get_subcommands({}).empty()) o << "\\fICOMMAND\\fR\n";
  o << "[\\fIOPTIONS\\fR]\n.SH DESCRIPTION\n" << troff_text(sub->get_description()) << ".\n" << footer_of(sub);
  if (sub->get_footer() == options_text())
    o << ".PP\nThe configuration options, their flags and environment variables are in\n.BR " << kToml
      << " (5).\n";
  o << ".SH OPTIONS\n";
  command_body(o, sub, "roceguard " + sub->get_name());
  o << ".SH \"GLOBAL OPTIONS\"\nAccepted before or after the command.\n";
  options_of(o, &app, false);
  if (sub->get_name() == "run")
    o << ".SH SIGNALS\n.TP\n.B SIGTERM, SIGINT\nExit; the programs stay attached and the maps pinned.\n.TP\n"
         ".B SIGHUP\nRead the configuration again (\\fBsystemctl reload roceguard\\fR). The tunnel peers with "
         "their routes and the metrics settings (\\fBmetrics.listen\\fR, \\fBmetrics.health_listen\\fR, "
         "\\fBmetrics.web_config\\fR and the file it names, \\fBmetrics.per_qp\\fR, \\fBmetrics.top_qps\\fR) "
         "apply in place; any other key that changed is logged as needing a restart and is not applied. A file "
         "that does not parse or validate is refused, and the configuration in force stays.\n";
  exit_status(o);
  o << ".SH \"SEE ALSO\"\n.BR roceguard (8),\n.BR " << kToml << " (5)\n";
  return o.str();
}

std::string main_page(const CLI::App& app) {
  std::ostringstream o;
  o << header("roceguard", 8) << ".SH NAME\nroceguard \\- " << troff_text(app.get_description()) << "\n"
    << ".SH SYNOPSIS\n.B roceguard\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n"
    << ".SH DESCRIPTION\n"
       "eBPF programs (TC egress and XDP or TC ingress) for gateways that carry RoCE v2 across networks that "
       "bleach DSCP or lose packets, and the loader that attaches them, exports their counters and tunes the "
       "RDMA NIC.\n"
       "Each command has its own page, \\fBroceguard\\-\\fR\\fICOMMAND\\fR(8).\n"
    << ".SH COMMANDS\n";
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (hidden(sub)) continue;
    o << ".TP\n.BR " << troff_text(page_name(sub)) << " (8)\n" << troff_text(sub->get_description()) << "\n";
  }
  o << ".SH \"GLOBAL OPTIONS\"\nAccepted before or after the command "
       "(\\fBroceguard \\-j status\\fR and \\fBroceguard status \\-j\\fR alike).\n";
  options_of(o, &app);
  o << ".SH FILES\n.TP\n.I /etc/roceguard/roceguard.toml\nthe configuration, see\n.BR " << kToml
    << " (5);\nchecked with \\fBroceguard config check\\fR\n"
       ".TP\n.I /sys/fs/bpf/roceguard\npinned maps and the attach record; \\fBroceguard detach\\fR removes them\n"
       ".TP\n.I /usr/share/roceguard/\nGrafana dashboard, Prometheus alerting rules, Kubernetes manifests\n";
  exit_status(o);
  o << ".SH \"SEE ALSO\"\n";
  for (const CLI::App* sub : app.get_subcommands({}))
    if (!hidden(sub)) o << ".BR " << troff_text(page_name(sub)) << " (8),\n";
  o << ".BR " << kToml << " (5),\n.BR bpftool (8)\n";
  return o.str();
}

std::string toml_page() {
  std::ostringstream o;
  o << header(kToml, 5) << ".SH NAME\n" << kToml << " \\- roceguard configuration file\n"
    << ".SH SYNOPSIS\n.I /etc/roceguard/roceguard.toml\n"
    << ".SH DESCRIPTION\n"
       "The configuration of \\fBroceguard run\\fR and \\fBroceguard attach\\fR, in TOML.\n"
       "A key \\fIsection.name\\fR is the key \\fIname\\fR of the table \\fB[\\fR\\fIsection\\fR\\fB]\\fR; "
       "\\fBtunnel.peer[]\\fR keys are those of each \\fB[[tunnel.peer]]\\fR table.\n"
       "Each option can also be given by an environment variable and most by a flag:\n"
       "the flag wins over the variable, the variable over the file, the file over the default.\n"
       "\\fBroceguard config check\\fR \\fIFILE\\fR validates a file as \\fBrun\\fR would.\n"
    << ".SH OPTIONS\n" << options_man()
    << ".SH \"SEE ALSO\"\n.BR roceguard (8),\n.BR roceguard\\-config (8)\n";
  return o.str();
}

std::vector<std::string> page_names(const CLI::App& app) {
  std::vector<std::string> out = {"roceguard.8", std::string(kToml) + ".5"};
  for (const CLI::App* sub : app.get_subcommands({}))
    if (!hidden(sub)) out.push_back(page_name(sub) + ".8");
  return out;
}

void cmd_man(const CLI::App& app, const std::string& page, bool list) {
  if (list) {
    for (const auto& n : page_names(app)) std::cout << n << "\n";
    return;
  }
  if (page == "roceguard" || page == "roceguard.8") {
    std::cout << main_page(app);
    return;
  }
  if (page == kToml || page == std::string(kToml) + ".5") {
    std::cout << toml_page();
    return;
  }
  for (const CLI::App* sub : app.get_subcommands({}))
    if (!hidden(sub) && (page == page_name(sub) || page == page_name(sub) + ".8")) {
      std::cout << command_page(app, sub);
      return;
    }
  throw Error("no manual page " + page + " (`roceguard man --list` names them)", kExitNotFound);
}

}  // namespace

void add_man_command(CLI::App& app) {
  static std::string page;
  static bool list = false;
  auto* man = app.add_subcommand("man", "print a manual page as troff (for packaging)");
  man->group("");  // hidden: the pages are installed; this writes them
  man->add_option("page", page, "roceguard, roceguard-COMMAND or roceguard.toml");
  man->add_flag("--list", list, "the pages, one file name a line");
  man->callback([&app] { cmd_man(app, page, list); });
}

}  // namespace rg
