#!/bin/sh
# Runs cross-built unit tests (make cross-aarch64) under qemu-user, once per
# forced kernel tier (KVB_KERNELS=<tier>), and ends with run_tests.sh's
# closing line, "N passed, M failed, K skipped", over every (tier, test).
#   sh tests/run_qemu_tests.sh BUILD_DIR "TIERS" [TEST ...]
# BUILD_DIR: the cross build (build-aarch64); TIERS: e.g. "ref neon dotprod
# i8mm sve"; TEST: unit test names (default: every test_* program there). The
# emulated CPU is qemu's default, "max" (every feature, 512-bit SVE, so each
# tier runs its own kernels); QEMU_CPU names another (qemu-user reads it;
# QEMU_CPU=max,sve-default-vector-length=32 gives 256-bit SVE). KVB_QEMU
# (default qemu-aarch64) and KVB_QEMU_LD_PREFIX (default
# /usr/aarch64-linux-gnu, the cross libc) name the emulator and the target's
# libraries; KVB_TEST_JOBS runs that many at once (default 2). Emulation
# times say nothing about an ARM CPU's speed.
set -u
QEMU=${KVB_QEMU:-qemu-aarch64}
LD_PREFIX=${KVB_QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}

if [ "${1:-}" = "--one" ]; then # internal: one (tier, test) into R
    tier=$2 t=$3 R=$4
    name=$(basename "$t")
    KVB_KERNELS=$tier "$QEMU" -L "$LD_PREFIX" "$t" > "$R/$tier.$name.out" 2>&1
    echo $? > "$R/$tier.$name.rc"
    echo "$tier $name: $(tail -n 1 "$R/$tier.$name.out")"
    exit 0
fi

BUILD_DIR=${1:?usage: run_qemu_tests.sh BUILD_DIR TIERS [TEST ...]}
TIERS=${2:?usage: run_qemu_tests.sh BUILD_DIR TIERS [TEST ...]}
shift 2
JOBS=${KVB_TEST_JOBS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v "$QEMU" >/dev/null 2>&1 || { echo "$QEMU not found (Debian: apt-get install qemu-user)"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
if [ $# -eq 0 ]; then
    for t in "$BUILD_DIR"/test_*; do [ -f "$t" ] && [ -x "$t" ] && set -- "$@" "$(basename "$t")"; done
fi
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
: > "$R/list"
for tier in $TIERS; do
    for name in "$@"; do echo "$tier $BUILD_DIR/$name $R" >> "$R/list"; done
done
xargs -P "$JOBS" -L 1 sh "$HERE/run_qemu_tests.sh" --one < "$R/list"
passed=0 failed=0 skipped=0 crashed=""
while read -r tier t _; do
    name=$(basename "$t")
    out="$R/$tier.$name.out"
    rc=$(cat "$R/$tier.$name.rc" 2>/dev/null || echo 127)
    line=$(grep -E '^cases: [0-9]+ passed, [0-9]+ failed' "$out" 2>/dev/null | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $tier $name printed no 'cases:' line"; tail -n 20 "$out" 2>/dev/null
        failed=$((failed + 1)) crashed="$crashed $tier/$name"
        continue
    fi
    p=$(echo "$line" | sed -E 's/^cases: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^cases: [0-9]+ passed, ([0-9]+) failed.*/\1/')
    s=$(echo "$line" | sed -nE 's/.*, ([0-9]+) skipped.*/\1/p')
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
    [ "$f" -eq 0 ] || grep -E '^(FAIL|  )' "$out" | head -n 20
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $tier $name exited with status $rc"
        failed=$((failed + 1)) crashed="$crashed $tier/$name"
    fi
done < "$R/list"
if [ -n "$crashed" ]; then echo "crashed or missing:$crashed"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
