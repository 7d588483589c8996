#!/bin/sh
# The golden text of an ARM build: greedy text of the shared stories260K
# model, as f32 and converted to q8_0 and q4_0 by the host build, from the
# cross-built kvbound under qemu-aarch64 once per forced kernel tier; each
# must equal the host (x86) build's text for the same file.
#   sh tests/qemu_golden.sh HOST_BUILD ARM_BUILD "TIERS"
# Ends with "N passed, M failed, K skipped" (skipped: the shared data are
# absent; KVB_REQUIRE_SHARED=1 makes that a failure).
set -u
HOST=${1:?host build}
ARM=${2:?arm build}
TIERS=${3:?tiers}
QEMU=${KVB_QEMU:-qemu-aarch64}
LD_PREFIX=${KVB_QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}
D=${KVB_SHARED_DATA:-../shared/data}
M="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ ! -f "$M" ]; then
    if [ "${KVB_REQUIRE_SHARED:-0}" = 1 ]; then echo "FAIL missing $M"; echo "0 passed, 1 failed, 0 skipped"; exit 1; fi
    echo "skip: missing $M"; echo "0 passed, 0 failed, 1 skipped"; exit 0
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0 failed=0
for type in f32 q8_0 q4_0; do
    f="$M"
    if [ "$type" != f32 ]; then
        f="$T/$type.gguf"
        "$HOST/kvbound" convert -m "$M" -o "$f" --type "$type" 2>/dev/null || { echo "FAIL convert to $type"; failed=$((failed + 1)); continue; }
    fi
    "$HOST/kvbound" run -m "$f" -p "Once upon a time" -n 48 --temp 0 -t 2 > "$T/host.$type.txt" 2>/dev/null
    for tier in $TIERS; do
        KVB_KERNELS=$tier "$QEMU" -L "$LD_PREFIX" "$ARM/kvbound" run -m "$f" -p "Once upon a time" -n 48 --temp 0 -t 2 > "$T/$tier.$type.txt" 2>/dev/null
        if [ -s "$T/host.$type.txt" ] && cmp -s "$T/host.$type.txt" "$T/$tier.$type.txt"; then
            passed=$((passed + 1))
        else
            echo "FAIL $type under KVB_KERNELS=$tier: the ARM text differs from the host build's"
            diff "$T/host.$type.txt" "$T/$tier.$type.txt" | head -n 6
            failed=$((failed + 1))
        fi
    done
done
echo "golden text ($(head -c 60 "$T/host.f32.txt" | tr '\n' ' ')...): $passed equal"
echo "$passed passed, $failed failed, 0 skipped"
[ "$failed" -eq 0 ]
