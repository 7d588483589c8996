#!/bin/sh
# Runs every test binary (one per tests/test_*.c, all expected in BUILD_DIR)
# and every tests/test_*.sh script, sums their case counts, and ends with one
# line "N passed, M failed, K skipped". A skipped case is never counted as
# passed; a test binary that is missing or not executable is a failure, as is
# one that exits non-zero or prints no "cases:" line. Exit status is non-zero
# if anything failed or nothing passed. Each test also prints "time NAME: S s",
# so a slow CI run shows where its time went.
BUILD_DIR=${1:-build}
passed=0
failed=0
skipped=0
crashed=""
HERE=$(dirname "$0")
for src in "$HERE"/test_*.c; do
    name=$(basename "$src" .c)
    if [ ! -x "$BUILD_DIR/$name" ]; then
        echo "FAIL $name: test binary $BUILD_DIR/$name is missing or not executable"
        failed=$((failed + 1))
        crashed="$crashed $name"
    fi
done
for t in "$BUILD_DIR"/test_* "$HERE"/test_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t")
    t0=$(date +%s)
    case "$t" in
        *.sh) out=$(sh "$t" "$BUILD_DIR" 2>&1) ;;
        *) [ -x "$t" ] || continue; out=$("$t" 2>&1) ;;
    esac
    rc=$?
    printf '%s\n' "$out"
    echo "time $name: $(( $(date +%s) - t0 )) s"
    line=$(printf '%s\n' "$out" | grep -E '^cases: [0-9]+ passed, [0-9]+ failed' | tail -n 1)
    f=0
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^cases: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/^cases: [0-9]+ passed, ([0-9]+) failed.*/\1/')
        s=$(echo "$line" | sed -nE 's/.*, ([0-9]+) skipped.*/\1/p')
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + ${s:-0}))
    else
        echo "FAIL $name printed no 'cases:' line"
        failed=$((failed + 1))
        crashed="$crashed $name"
        continue
    fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name exited with status $rc"
        failed=$((failed + 1))
        crashed="$crashed $name"
    fi
done
if [ -n "$crashed" ]; then echo "crashed or missing:$crashed"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
