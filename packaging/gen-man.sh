#!/usr/bin/env bash
# Writes roceguard(8) with help2man from the built binary: the top-level
# --help and --version, plus one section per subcommand from its own --help,
# so the page lists exactly the flags of the binary it ships with.
# Usage: gen-man.sh BINARY OUT
set -euo pipefail
bin=$1 out=$2
include=$(mktemp)
trap 'rm -f "$include"' EXIT

subcommands() {  # subcommands PATH... -> names listed under "Subcommands:"
  "$bin" "$@" --help 2>/dev/null | awk '
    /^[A-Za-z].*:$/ { in_section = ($0 == "Subcommands:"); next }
    in_section && /^  [^ -]/ { print $1 }'
}

describe() {  # describe PATH...: its help, then its subcommands'
  local sub
  printf '.SS "roceguard %s"\n.nf\n' "$*"
  "$bin" "$@" --help | sed -e 's/\\/\\e/g' -e 's/^[.'"'"']/\\\&&/'
  printf '.fi\n'
  for sub in $(subcommands "$@"); do describe "$@" "$sub"; done
}

{
  echo "[COMMANDS]"
  for sub in $(subcommands); do describe "$sub"; done
  cat <<'MORE'
[FILES]
.TP
.I /etc/roceguard/roceguard.toml
the configuration (TOML), checked with \fBroceguard config check\fR
.TP
.I /sys/fs/bpf/roceguard
pinned maps and the attach record; \fBroceguard detach\fR removes them
.TP
.I /usr/share/roceguard/
Grafana dashboard, Prometheus alerting rules, Kubernetes DaemonSet
[EXIT STATUS]
0 success; 1 runtime failure; 2 bad command line or configuration;
3 not found; 4 conflict (foreign program or filter, incompatible pinned
maps, another roceguard managing the pin path).
MORE
} >"$include"

help2man --no-info --no-discard-stderr --section 8 \
  --name "RoCE v2 DSCP re-marking, Geneve tunnelling and loss accounting" \
  --include "$include" --output "$out" "$bin"
