#!/usr/bin/env bash
# Fails when a room of the loader reaches where its README says it may not.
# Each directory of loader/ is a room with a README.md holding two lines:
#   Calls: `common`, `config`       the rooms its files may include, or nothing
#   Public: `config.h`, `options.h` its headers other rooms may include, or nothing
# Checked: every source is in a room; every room has both lines, naming
# rooms and headers that exist; the rooms' calls have no cycle; every
# include of a loader header is by its room ("dataplane/maps.h", never a
# bare "maps.h" or "../"), and one of another room is of a room the
# includer may call and of a header that room lists as public. The room
# table of docs/design.md section 1 names every room with the same calls.
#   rooms_keep_to_their_own.sh <loader source directory> <docs/design.md>
set -euo pipefail
[ $# -eq 2 ] && [ -d "$1" ] && [ -r "$2" ] || { echo "usage: $0 <loader source directory> <docs/design.md>" >&2; exit 2; }
design=$(realpath "$2")
cd "$1"

status=0
fail() { echo "$*" >&2; status=1; }

# The backquoted words of a README's "Key:" line; "nothing" is none.
field() {
	local line
	line=$(grep -m1 "^$2:" "$1/README.md" || true)
	[ -n "$line" ] || { fail "$1/README.md: no '$2:' line"; return 0; }
	grep -o '`[^`]*`' <<<"$line" | tr -d '`' || true
}

shopt -s nullglob
for f in *.cpp *.h; do fail "$f: outside every room (loader/ROOM/$f)"; done

rooms=()
for d in */; do rooms+=("${d%/}"); done
shopt -u nullglob
set -f  # the README's words are words, not patterns
[ ${#rooms[@]} -gt 0 ] || { echo "no rooms in $1" >&2; exit 2; }
declare -A is_room calls public
for r in "${rooms[@]}"; do is_room[$r]=1; done

for r in "${rooms[@]}"; do
	[ -f "$r/README.md" ] || { fail "$r: no README.md"; continue; }
	calls[$r]=" $(field "$r" Calls | tr '\n' ' ')"
	public[$r]=" $(field "$r" Public | tr '\n' ' ')"
	for c in ${calls[$r]}; do
		[ -n "${is_room[$c]:-}" ] || fail "$r/README.md: calls $c, which is not a room"
		[ "$c" != "$r" ] || fail "$r/README.md: calls itself"
	done
	for h in ${public[$r]}; do
		[ -f "$r/$h" ] || fail "$r/README.md: public $h does not exist"
	done
done

# No cycle: peel off rooms whose calls are all peeled off already.
declare -A peeled
left=${#rooms[@]}
while [ "$left" -gt 0 ]; do
	progress=0
	for r in "${rooms[@]}"; do
		[ -z "${peeled[$r]:-}" ] || continue
		ready=1
		for c in ${calls[$r]:-}; do [ -n "${peeled[$c]:-}" ] || [ -z "${is_room[$c]:-}" ] || ready=0; done
		[ $ready = 0 ] || { peeled[$r]=1; left=$((left - 1)); progress=1; }
	done
	if [ $progress = 0 ]; then
		cycle=""
		for r in "${rooms[@]}"; do [ -n "${peeled[$r]:-}" ] || cycle+=" $r"; done
		fail "the rooms' calls have a cycle; these are in it or call into it:$cycle"
		break
	fi
done

# The design's table: "| `room/` | owns | `calls`, ... |", "nothing" or "every room".
sorted() { tr ' ' '\n' | grep -v '^$' | sort | tr '\n' ' '; }
declare -A documented
while IFS= read -r row; do
	r=$(sed 's/^| `\([a-z_]*\)\/` |.*/\1/' <<<"$row")
	last=${row%|}
	last=${last##*|}
	case $last in
	*"every room"*) want=""; for o in "${rooms[@]}"; do [ "$o" = "$r" ] || want+=" $o"; done ;;
	*) want=$(grep -o '`[^`]*`' <<<"$last" | tr -d '`' | tr '\n' ' ' || true) ;;
	esac
	documented[$r]=1
	[ -n "${is_room[$r]:-}" ] || { fail "docs/design.md: room $r/ is not in loader/"; continue; }
	[ "$(sorted <<<"$want")" = "$(sorted <<<"${calls[$r]:-}")" ] ||
		fail "docs/design.md: $r/ calls: $(sorted <<<"$want")but $r/README.md: $(sorted <<<"${calls[$r]:-}")"
done < <(grep '^| `[a-z_]*/` |' "$design" || true)
for r in "${rooms[@]}"; do
	[ -n "${documented[$r]:-}" ] || fail "docs/design.md: no row for room $r/"
done

files=0 includes=0
while IFS= read -r -d '' file; do
	files=$((files + 1))
	room=${file%%/*}
	dir=$(dirname "$file")
	while IFS=: read -r line target; do
		includes=$((includes + 1))
		where="loader/$file:$line: #include \"$target\""
		case $target in
		../* | */../* | ./*) fail "$where: name it from loader/ by its room"; continue ;;
		esac
		if [ "${target#*/}" = "$target" ]; then
			# A bare name found next to the includer is a loader header.
			[ ! -f "$dir/$target" ] || fail "$where: include it by its room (\"$room/$target\")"
			continue
		fi
		to=${target%%/*}
		[ -n "${is_room[$to]:-}" ] || continue  # not the loader's: include/, the skeleton
		[ -f "$target" ] || { fail "$where: no such header"; continue; }
		[ "$to" != "$room" ] || continue
		case "${calls[$room]:-} " in
		*" $to "*) ;;
		*) fail "$where: $room may not call $to ($room/README.md)"; continue ;;
		esac
		case "${public[$to]:-} " in
		*" ${target#*/} "*) ;;
		*) fail "$where: ${target#*/} is private to $to ($to/README.md)" ;;
		esac
	done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
		sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/' || true)
done < <(find "${rooms[@]}" -type f \( -name '*.cpp' -o -name '*.h' \) -print0 | sort -z)

[ $status = 0 ] && echo "${#rooms[@]} rooms, $files files, $includes includes: each room keeps to what its README allows"
exit $status
