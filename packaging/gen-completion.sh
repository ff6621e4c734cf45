#!/usr/bin/env bash
# Writes a bash completion for roceguard from the binary's own --help
# (CLI11 has no completion generator), so completion always matches the
# flags of the binary it ships with: subcommands, flags, and the values of
# a flag that lists them (CLI11's TEXT:{a,b,c}, the option table's choices
# and booleans), after a blank or an '='. It uses bash-completion's functions
# (_init_completion -s, _filedir, _available_interfaces).
# Usage: gen-completion.sh BINARY OUT
set -euo pipefail
bin=$1 out=$2

# CLI11 help: "Options:" and "Subcommands:" sections, entries indented by
# two spaces, flags as "-h,--help TYPE" and subcommands as their bare name.
section_words() {  # section_words SECTION ARGS... -> one word per line
  local section=$1; shift
  "$bin" "$@" --help 2>/dev/null | awk -v want="$section" '
    /^[A-Za-z].*:$/ { in_section = ($0 == want ":"); next }
    in_section && /^  [^ ]/ {
      n = split($1, names, ",")
      for (i = 1; i <= n; i++) print names[i]
    }'
}

# "--flag a b c" for each flag of ARGS... whose type lists its values.
flag_choices() {
  "$bin" "$@" --help 2>/dev/null | awk '
    /^  -/ && match($2, /:\{[^}]*\}/) {
      list = substr($2, RSTART + 2, RLENGTH - 3)
      gsub(",", " ", list)
      n = split($1, names, ",")
      for (i = 1; i <= n; i++) print names[i] " " list
    }'
}

# The global options (-j, --log-level...) are accepted after any command.
global=$(section_words Options | grep -vxE -- '-h|--help|--version' | tr '\n' ' ')
declare -A subcommands flags choices
walk() {  # walk PATH...; keyed "roceguard PATH..." (bash has no empty keys)
  local key="roceguard${*:+ $*}" sub subs flag list
  subs=$(section_words Subcommands "$@" | grep -v '^-' | tr '\n' ' ' || true)
  subcommands[$key]=$subs
  flags[$key]=$(section_words Options "$@" | grep '^-' | tr '\n' ' ')
  [ $# -eq 0 ] || [ "$1" = lab ] || flags[$key]+=$global
  while read -r flag list; do
    [ -n "$flag" ] && choices[$flag]=$list
  done < <(flag_choices "$@")
  for sub in $subs; do walk "$@" "$sub"; done
}
walk

{
  echo "# bash completion for roceguard, generated from roceguard --help by gen-completion.sh"
  echo "_roceguard() {"
  echo "  local cur prev words cword split"
  echo "  _init_completion -s || return"
  echo "  local -A subcommands=("
  for key in "${!subcommands[@]}"; do
    printf '    [%q]=%q\n' "$key" "${subcommands[$key]% }"
  done | sort
  echo "  )"
  echo "  local -A flags=("
  for key in "${!flags[@]}"; do
    printf '    [%q]=%q\n' "$key" "${flags[$key]% }"
  done | sort
  echo "  )"
  echo "  local -A choices=("
  for key in "${!choices[@]}"; do
    printf '    [%q]=%q\n' "$key" "${choices[$key]}"
  done | sort
  echo "  )"
  cat <<'BODY'
  if [[ -n ${choices[$prev]+set} ]]; then
    COMPREPLY=($(compgen -W "${choices[$prev]}" -- "$cur"))
    return
  fi
  case $prev in
    -c|--config|--pin-path|-o|--output|--report|--nic-state-dir) _filedir; return ;;
    -i|--interface) _available_interfaces; return ;;
  esac
  $split && return
  local path=roceguard i
  for ((i = 1; i < cword; i++)); do
    [[ -n ${subcommands["$path ${words[i]}"]+set} ]] && path="$path ${words[i]}"
  done
  # A word that is not a flag yet: the subcommands, else a file (config
  # check's FILE); a word starting with '-': the flags.
  if [[ $cur != -* && -n ${subcommands[$path]} ]]; then
    COMPREPLY=($(compgen -W "${subcommands[$path]}" -- "$cur"))
  elif [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "${flags[$path]}" -- "$cur"))
  else
    _filedir
  fi
  return 0
}
complete -F _roceguard roceguard
BODY
} >"$out.tmp"
bash -n "$out.tmp"
mv "$out.tmp" "$out"
