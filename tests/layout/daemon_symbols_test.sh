#!/usr/bin/env bash
# Fails if the daemon library or binary defines or references a symbol of
# the test bed: the lab (namespace rg::lab: generator, WAN emulator,
# topology, report), the WAN program's skeleton (wan__*, rg_wan_*) or the
# packet builder (namespace rg::test). The daemon runs as root on every
# gateway; none of that belongs there.
#   daemon_symbols_test.sh <librg_core.a> <roceguard>
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 <library or binary>..." >&2; exit 2; }

pattern='rg::lab::|rg::test::|\bwan__|\brg_wan_'
status=0
for file in "$@"; do
	[ -r "$file" ] || { echo "$file: missing" >&2; exit 2; }
	symbols=$(nm -C "$file" 2>/dev/null) || { echo "$file: nm failed" >&2; exit 2; }
	[ -n "$symbols" ] || { echo "$file: no symbols (stripped?); nothing proven" >&2; exit 2; }
	found=$(grep -E "$pattern" <<<"$symbols" || true)
	if [ -n "$found" ]; then
		echo "$file: test bed symbols in the daemon:" >&2
		head -n 20 <<<"$found" >&2
		status=1
	else
		echo "$file: $(wc -l <<<"$symbols") symbols, none of the test bed"
	fi
done
exit $status
