#!/usr/bin/env bash
# The bash completion gen-completion.sh writes from the binary, in a bash
# with bash-completion loaded: subcommands, flags, and a flag's values
# after a blank and after '='.
# Usage: completion.sh BINARY GEN_COMPLETION
set -uo pipefail
bin=$1 gen=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$gen" "$bin" "$dir/roceguard" || exit 1
cat >"$dir/check.bash" <<'CHECK'
source /usr/share/bash-completion/bash_completion || exit 1
source "$1" || exit 1
fail=0
# complete LINE: COMPREPLY for the cursor at the end of LINE, words split
# as readline splits them (COMP_WORDBREAKS makes '=' a word of its own).
complete_line() {
  local line=$1
  COMP_LINE=$line COMP_POINT=${#line}
  local IFS=$' \t\n' w=() rest=$line
  # readline: blanks separate words, '=' is a word of its own
  rest=${rest//=/ = }
  read -r -a w <<<"$rest"
  [[ $line == *[\ =] ]] && w+=("")
  COMP_WORDS=("${w[@]}") COMP_CWORD=$((${#w[@]} - 1))
  COMPREPLY=()
  _roceguard roceguard "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
}
expect() {  # expect LINE WANTED: COMPREPLY is exactly WANTED (sorted, blank-separated)
  local got
  got=$(complete_line "$1")
  if [[ "$got" != "$2 " ]]; then
    echo "'$1': got '$got', want '$2'"
    fail=1
  fi
}
expect_has() {  # expect_has LINE WORD: COMPREPLY contains WORD
  local got
  got=" $(complete_line "$1")"
  [[ "$got" == *" $2 "* ]] || { echo "'$1': got '$got', want it to contain '$2'"; fail=1; }
}
expect "roceguard st" "stats status"
expect "roceguard attach --tc-attach=" "auto clsact tcx"
expect "roceguard attach --tc-attach " "auto clsact tcx"
expect "roceguard attach --tc-attach=t" "tcx"
expect "roceguard --log-level w" "warn"
expect "roceguard nic s" "show"
expect "roceguard config " "check options"
expect_has "roceguard attach --" "--tc-attach"
expect_has "roceguard attach --" "--json"
expect_has "roceguard status -" "--pin-path"
expect_has "roceguard -j " "status"
exit $fail
CHECK
bash --norc --noprofile "$dir/check.bash" "$dir/roceguard"
