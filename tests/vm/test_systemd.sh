#!/usr/bin/env bash
# packaging/roceguard.service as shipped, under systemd as the guest's PID 1:
# the service starts as its own user with its two capabilities, attaches
# to a veth pair, serves /metrics, keeps its pins across a restart and
# leaves the data plane attached when stopped (guest/systemd-check.sh). The
# guest's share keeps journal.json (journalctl -o json of the unit) for
# checks of what the service logs.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
# A full systemd boot under TCG on a busy machine and five starts.
RGVM_TIMEOUT=540
rgvm_setup
RGVM_PID1=script rgvm_start a none systemd.sh
rc=0
rgvm_wait a || rc=$?
share=$(rgvm_share a)
if [ "$rc" != 0 ]; then
	for f in boot.log status.txt journal.txt; do
		[ -s "$share/$f" ] && { echo "----- $f -----"; cat "$share/$f"; }
	done
	exit 1
fi
fail=0
[ -s "$share/journal.json" ] || { echo "FAIL: no journal.json in the share"; fail=1; }
jq -e -s 'any(.[]; ._SYSTEMD_UNIT == "roceguard.service")' \
	"$share/journal.json" >/dev/null || { echo "FAIL: journal.json is not the unit's journal"; fail=1; }
# Under systemd the loader logs to the journal itself: syslog priorities,
# its identifier, and no timestamp of its own in the message.
jq -e -s 'any(.[]; ._SYSTEMD_UNIT == "roceguard.service" and .SYSLOG_IDENTIFIER == "roceguard"
		and ._TRANSPORT == "journal" and .PRIORITY == "6" and (.MESSAGE | startswith("attached to rgsd0")))' \
	"$share/journal.json" >/dev/null ||
	{ echo "FAIL: no info entry (PRIORITY 6) of roceguard's own in the journal"; fail=1; }
jq -e -s '[.[] | select(.SYSLOG_IDENTIFIER == "roceguard") | select(.MESSAGE | test("^\\[[0-9]{4}-"))] | length == 0' \
	"$share/journal.json" >/dev/null ||
	{ echo "FAIL: roceguard's journal entries carry a second timestamp"; fail=1; }
echo "guest's exposure score: $(tail -n 1 "$share/security.txt")"
exit $fail
