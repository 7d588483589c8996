#!/bin/sh
# Runs every test binary in BUILD_DIR and every tests/test_*.sh script, sums their case counts, and ends with
# one line "N passed, M failed". Exit status is non-zero if anything failed.
BUILD_DIR=${1:-build}
passed=0
failed=0
crashed=""
HERE=$(dirname "$0")
for t in "$BUILD_DIR"/test_* "$HERE"/test_*.sh; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    case "$t" in
        *.sh) out=$(sh "$t" "$BUILD_DIR" 2>&1) ;;
        *) out=$("$t" 2>&1) ;;
    esac
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^cases: [0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^cases: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
        f=$(echo "$line" | sed -E 's/^cases: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
        passed=$((passed + p))
        failed=$((failed + f))
    fi
    if [ $rc -ne 0 ] && { [ -z "$line" ] || [ "${f:-0}" -eq 0 ]; }; then
        echo "FAIL $name exited with status $rc"
        failed=$((failed + 1))
        crashed="$crashed $name"
    fi
done
if [ -n "$crashed" ]; then echo "crashed:$crashed"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
