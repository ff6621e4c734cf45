#!/usr/bin/env bash
# Writes a bash completion for roceguard from the binary's own --help
# (CLI11 has no completion generator), so completion always matches the
# flags of the binary it ships with. Usage: gen-completion.sh BINARY OUT
set -euo pipefail
bin=$1 out=$2

# CLI11 help: "Options:" and "Subcommands:" sections, entries indented by
# two spaces, flags as "-h,--help" and subcommands as their bare name.
section_words() {  # section_words SECTION ARGS... -> one word per line
  local section=$1; shift
  "$bin" "$@" --help 2>/dev/null | awk -v want="$section" '
    /^[A-Za-z].*:$/ { in_section = ($0 == want ":"); next }
    in_section && /^  [^ ]/ {
      n = split($1, names, ",")
      for (i = 1; i <= n; i++) print names[i]
    }'
}

declare -A words
walk() {  # walk PATH...; keyed "roceguard PATH..." (bash has no empty keys)
  local key="roceguard${*:+ $*}" sub
  local flags subs
  flags=$(section_words Options "$@" | grep '^-' | tr '\n' ' ')
  subs=$(section_words Subcommands "$@" | grep -v '^-' | tr '\n' ' ' || true)
  words[$key]="$subs$flags"
  for sub in $subs; do walk "$@" "$sub"; done
}
walk

{
  echo "# bash completion for roceguard, generated from roceguard --help by gen-completion.sh"
  echo "_roceguard() {"
  echo "  local -A words=("
  for key in "${!words[@]}"; do
    printf '    [%q]=%q\n' "$key" "${words[$key]% }"
  done | sort
  echo "  )"
  cat <<'BODY'
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} path=roceguard i
  case $prev in
    -c|--config|--pin-path|-o|--output|--report) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    -i|--interface) COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")); return ;;
  esac
  for ((i = 1; i < COMP_CWORD; i++)); do
    local next="$path ${COMP_WORDS[i]}"
    [[ -n ${words[$next]+set} ]] && path=$next
  done
  COMPREPLY=($(compgen -W "${words[$path]}" -- "$cur"))
  [[ ${#COMPREPLY[@]} -eq 0 && $cur != -* ]] && COMPREPLY=($(compgen -f -- "$cur"))
  return 0
}
complete -F _roceguard roceguard
BODY
} >"$out.tmp"
bash -n "$out.tmp"
mv "$out.tmp" "$out"
