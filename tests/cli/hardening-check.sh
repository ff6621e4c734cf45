#!/usr/bin/env bash
# Checks that each given ELF file was built hardened: position independent,
# full RELRO (GNU_RELRO + BIND_NOW), a non-executable stack, the stack
# protector, and _FORTIFY_SOURCE's checked functions where the program
# calls any of the functions it fortifies.
set -uo pipefail
fail=0
for f in "$@"; do
  dyn=$(readelf -d "$f")
  hdr=$(readelf -h "$f")
  ph=$(readelf -lW "$f")
  syms=$(nm -D --undefined-only "$f" 2>/dev/null)
  problems=()
  grep -q 'Type:.*DYN' <<<"$hdr" || problems+=("not position independent (ELF type is not DYN)")
  grep -q 'GNU_RELRO' <<<"$ph" || problems+=("no GNU_RELRO segment")
  grep -Eq 'BIND_NOW|FLAGS.*\bNOW\b' <<<"$dyn" || problems+=("no BIND_NOW (partial RELRO only)")
  grep -E 'GNU_STACK' <<<"$ph" | grep -q 'RWE' && problems+=("executable stack")
  grep -q '__stack_chk_fail' <<<"$syms" || problems+=("no stack protector (__stack_chk_fail not referenced)")
  # Fortified variants exist only for calls the compiler could check; a
  # program calling memcpy/snprintf/read and friends gets at least one.
  if grep -Eq '\b(memcpy|memmove|memset|snprintf|vsnprintf|strcpy|read|sprintf)(@|$)' <<<"$syms"; then
    grep -q '__[a-z]*_chk' <<<"$syms" || problems+=("no _FORTIFY_SOURCE checked functions")
  fi
  if [ ${#problems[@]} -eq 0 ]; then
    echo "ok: $f"
  else
    for p in "${problems[@]}"; do echo "FAIL: $f: $p"; done
    fail=1
  fi
done
exit $fail
