#!/usr/bin/env bash
# The manual pages gen-man.sh writes from the binary: each renders with
# man and with groff without a warning, has the sections a page needs
# (EXIT STATUS with every exit code), and roceguard.toml(5) names every key
# of the option table (`config options --markdown`, the README's table).
# Usage: man-pages.sh BINARY GEN_MAN
set -euo pipefail
bin=$1 gen=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
"$gen" "$bin" "$dir"
mapfile -t pages <"$dir/pages"
[ "${#pages[@]}" -ge 3 ] || { echo "too few pages: ${pages[*]}"; exit 1; }
for want in roceguard.8 roceguard.toml.5 roceguard-run.8 roceguard-attach.8 roceguard-detach.8 \
            roceguard-status.8 roceguard-stats.8 roceguard-config.8 roceguard-nic.8 roceguard-doctor.8; do
  [ -f "$dir/$want" ] || { echo "missing page $want"; fail=1; }
done
for page in "${pages[@]}"; do
  groff_warnings=$(groff -man -Tutf8 -ww -z "$dir/$page" 2>&1)
  [ -z "$groff_warnings" ] || { echo "$page: groff: $groff_warnings"; fail=1; }
  man_warnings=$(MANWIDTH=80 man --warnings=w -l "$dir/$page" 2>&1 >/dev/null)
  [ -z "$man_warnings" ] || { echo "$page: man: $man_warnings"; fail=1; }
  text=$(MANWIDTH=250 man -l "$dir/$page" 2>/dev/null)
  for section in NAME SYNOPSIS DESCRIPTION "SEE ALSO"; do
    grep -qx "$section" <<<"$text" || { echo "$page: no $section section"; fail=1; }
  done
  if [ "$page" != roceguard.toml.5 ]; then
    grep -qx "EXIT STATUS" <<<"$text" || { echo "$page: no EXIT STATUS section"; fail=1; }
    for code in 0 1 2 3 4 5; do
      grep -qE "^       $code +[a-z]" <<<"$text" || { echo "$page: exit code $code not listed"; fail=1; }
    done
  fi
done
toml=$(MANWIDTH=250 man -l "$dir/roceguard.toml.5" 2>/dev/null)
keys=$("$bin" config options --markdown | awk -F'|' 'NR > 2 { gsub(/[ `]/, "", $2); print $2 }')
[ -n "$keys" ] || { echo "no keys in config options --markdown"; exit 1; }
n=0
while read -r key; do
  n=$((n + 1))
  grep -qxF "       $key" <<<"$toml" || { echo "roceguard.toml(5) does not name $key"; fail=1; }
done <<<"$keys"
echo "${#pages[@]} pages, $n keys in roceguard.toml(5)"
exit "$fail"
