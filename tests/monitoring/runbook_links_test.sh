#!/usr/bin/env bash
# Every alert in the shipped rules has a runbook_url of the form
# docs/runbook.md#ANCHOR, and ANCHOR is a heading of docs/runbook.md (the
# anchor GitHub and most Markdown renderers give it: lower case, spaces as
# hyphens, punctuation dropped); the runbook's own #links resolve too. Then
# checks that the check does fail: on a runbook without one alert's section,
# and on rules with one runbook_url removed.
# Usage: runbook_links_test.sh SOURCE_DIR
set -euo pipefail
src=$1
rules=$src/packaging/prometheus/roceguard-rules.yml
runbook=$src/docs/runbook.md

# "NAME URL" per alert, URL empty when the alert has none. The rules file
# is YAML as promtool checks it; each alert's keys follow its "- alert:".
alerts() {
  awk '
    function flush() { if (name != "") print name, url; name = ""; url = "" }
    /^[[:space:]]*- (alert|record|name):/ { flush() }
    /^[[:space:]]*- alert:/ { name = $3 }
    name != "" && /^[[:space:]]*runbook_url:/ {
      url = $0
      sub(/^[[:space:]]*runbook_url:[[:space:]]*/, "", url)
      gsub(/^["'\'']|["'\'']$/, "", url)
    }
    END { flush() }
  ' "$1"
}

# The anchors of the runbook's headings, outside fenced code.
anchors() {
  awk '
    /^```/ { fenced = !fenced; next }
    !fenced && /^#+ / {
      h = $0
      sub(/^#+ +/, "", h)
      h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h)
      gsub(/ /, "-", h)
      print h
    }
  ' "$1"
}

# check RULES RUNBOOK: prints each problem, fails if there is one.
check() {
  local rules=$1 runbook=$2 bad=0 n=0 name url anchor
  local known
  known=$(anchors "$runbook")
  while read -r name url; do
    n=$((n + 1))
    if [ -z "$url" ]; then
      echo "$name: no runbook_url"
      bad=1
      continue
    fi
    case $url in
      docs/runbook.md#?*) anchor=${url#docs/runbook.md#} ;;
      *) echo "$name: runbook_url \"$url\" is not docs/runbook.md#ANCHOR"; bad=1; continue ;;
    esac
    if ! grep -qxF -- "$anchor" <<<"$known"; then
      echo "$name: runbook_url \"$url\": no heading in $(basename "$runbook") has the anchor \"$anchor\""
      bad=1
    fi
  done < <(alerts "$rules")
  if [ "$n" -ne "$(grep -c '^[[:space:]]*- alert:' "$rules")" ] || [ "$n" -eq 0 ]; then
    echo "read $n alerts from $rules; it has $(grep -c '^[[:space:]]*- alert:' "$rules")"
    bad=1
  fi
  # Links within the runbook.
  while read -r anchor; do
    if ! grep -qxF -- "$anchor" <<<"$known"; then
      echo "$(basename "$runbook"): link to #$anchor, which no heading has"
      bad=1
    fi
  done < <(grep -o '](#[^)]*)' "$runbook" | sed 's/^](#//; s/)$//' | sort -u)
  [ "$bad" -eq 0 ] && echo "$n alerts, each with a runbook_url whose anchor is in $(basename "$runbook")"
  return "$bad"
}

check "$rules" "$runbook"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The first alert's section gone from the runbook.
first=$(alerts "$rules" | head -n1 | cut -d' ' -f1)
grep -v "^## $first\$" "$runbook" >"$tmp/runbook.md"
if out=$(check "$rules" "$tmp/runbook.md"); then
  echo "a runbook without the section of $first was accepted:" >&2
  echo "$out" >&2
  exit 1
fi
echo "a runbook without the section of $first is refused: $out"
# One runbook_url gone from the rules.
awk '/^[[:space:]]*runbook_url:/ && !done { done = 1; next } { print }' "$rules" >"$tmp/rules.yml"
if out=$(check "$tmp/rules.yml" "$runbook"); then
  echo "rules with an alert lacking its runbook_url were accepted:" >&2
  echo "$out" >&2
  exit 1
fi
echo "rules with an alert lacking its runbook_url are refused: $out"
