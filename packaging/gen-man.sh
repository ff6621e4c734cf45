#!/usr/bin/env bash
# Writes the manual pages the binary prints (`roceguard man`, hidden):
# roceguard(8), one roceguard-COMMAND(8) per command and roceguard.toml(5)
# from the option table, so the pages list exactly the commands, flags and
# keys of the binary they ship with. Each page must render without a
# warning from groff.
# Usage: gen-man.sh BINARY OUTDIR [--gzip]   (--gzip: PAGE.gz beside each)
set -euo pipefail
bin=$1 out=$2 gz=${3:-}
mkdir -p "$out"
"$bin" man --list >"$out/pages.tmp"
while read -r page; do
  "$bin" man "$page" >"$out/$page.tmp"
  if command -v groff >/dev/null; then
    warnings=$(groff -man -Tutf8 -ww -z "$out/$page.tmp" 2>&1)
    if [ -n "$warnings" ]; then
      echo "$page: $warnings" >&2
      exit 1
    fi
  fi
  mv "$out/$page.tmp" "$out/$page"
  if [ "$gz" = --gzip ]; then gzip -n -9 -c "$out/$page" >"$out/$page.gz"; fi
done <"$out/pages.tmp"
mv "$out/pages.tmp" "$out/pages"
