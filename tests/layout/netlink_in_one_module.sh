#!/usr/bin/env bash
# Fails if a C or C++ source outside the netlink module (loader/common/netlink.*)
# speaks netlink by hand: opens a netlink socket, addresses one, walks or
# builds messages or attributes with the kernel's macros, or calls libmnl.
# The module's own test is let off: it plays the kernel's part.
#   netlink_in_one_module.sh <source dir>
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 <source dir>" >&2; exit 2; }
cd "$1"

pattern='AF_NETLINK|sockaddr_nl|\brtattr\b|\bNLMSG_[A-Z]+\(|\bRTA_(OK|NEXT|DATA|LENGTH|PAYLOAD|ALIGN|SPACE)\b|\b(IFLA|RTM|IFA|NDA)_(RTA|PAYLOAD)\b|\bNLA_(HDRLEN|ALIGN)\b|\bmnl_[a-z_]+\('
sources=$(git ls-files -- '*.c' '*.cc' '*.cpp' '*.h' '*.hpp' 2>/dev/null || true)
[ -n "$sources" ] || sources=$(find . -name .git -prune -o -type f \( -name '*.c' -o -name '*.cpp' -o -name '*.h' \) -print)
[ -n "$sources" ] || { echo "no sources under $1; nothing proven" >&2; exit 2; }
found=$(grep -nE "$pattern" $sources | grep -vE '^(\./)?(loader/common/netlink\.(h|cpp)|tests/common/netlink_test\.cpp):' || true)
if [ -n "$found" ]; then
	echo "netlink written by hand outside loader/common/netlink.*:" >&2
	echo "$found" >&2
	exit 1
fi
echo "$(wc -w <<<"$sources") sources, netlink only in loader/common/netlink.*"
