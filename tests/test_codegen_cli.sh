#!/bin/sh
# test_codegen_cli.sh — what the compiler made of the kernels, read back from
# the built library with objdump. The attention kernels' software prefetch
# lives in helpers, and GCC deletes calls to a function made of prefetches
# alone (it has no side effects to keep): until 2026-12-03 the AVX-512
# attention issued no prefetch, and nothing but a 1.45x slower step showed
# it. Each kernel below must still contain prefetch instructions.
. "$(dirname "$0")/cli_lib.sh"

LIB="$B/libkvbound.a"
if [ "$(uname -m)" != x86_64 ]; then
    sk attention_prefetch_survives "not x86_64: the kernels checked are the x86 families'"
    cli_summary
    exit
fi
if ! command -v objdump > /dev/null 2>&1; then
    ko attention_prefetch_survives "objdump (binutils) is missing"
    cli_summary
    exit
fi
if [ ! -f "$LIB" ]; then
    ko attention_prefetch_survives "no $LIB"
    cli_summary
    exit
fi
objdump -d --no-show-raw-insn "$LIB" > "$T/dis.txt" 2> "$T/dis.err" || { ko attention_prefetch_survives "objdump failed: $(head -c 300 "$T/dis.err")"; cli_summary; exit; }

# prefetches NAME: prefetch instructions in the functions named NAME (or a
# compiler's clone of it, NAME.constprop.0 and the like).
prefetches() {
    awk -v f="$1" '
        /^[0-9a-f]+ <.*>:$/ { name = $2; sub(/^</, "", name); sub(/>:$/, "", name); inside = (name == f || index(name, f ".") == 1); next }
        inside && /prefetch/ { n++ }
        END { print n + 0 }' "$T/dis.txt"
}

missing=""
for f in scores_avx512 scores_avx2 kvb_scores_i8_vnni kvb_scores_i8_avx2; do
    if ! grep -qE "^[0-9a-f]+ <$f(\.[a-z0-9.]+)?>:$" "$T/dis.txt"; then
        missing="$missing $f(not found)"
        continue
    fi
    n=$(prefetches "$f")
    [ "$n" -gt 0 ] || missing="$missing $f(0 prefetches)"
done
if [ -z "$missing" ]; then ok attention_prefetch_survives
else ko attention_prefetch_survives "kernels without their prefetch:$missing"; fi

cli_summary
