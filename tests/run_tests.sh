#!/bin/sh
# Runs every test binary (one per tests/test_*.c, all expected in BUILD_DIR)
# and every tests/test_*.sh script, sums their case counts, and ends with one
# line "N passed, M failed, K skipped". A skipped case is never counted as
# passed; a test binary that is missing or not executable is a failure, as is
# one that exits non-zero or prints no "cases:" line. Exit status is non-zero
# if anything failed or nothing passed. Each test also prints "time NAME: S s",
# so a slow CI run shows where its time went.
# KVB_TEST_JOBS=N runs N tests at a time (default 1); each test's output is
# printed whole when it ends, and the counts are the same either way.
if [ "${1:-}" = --one ]; then # internal: run test $3 against build $2, results under $4
    name=$(basename "$3")
    t0=$(date +%s)
    case "$3" in
        *.sh) sh "$3" "$2" > "$4/$name.out" 2>&1 ;;
        *) "$3" > "$4/$name.out" 2>&1 ;;
    esac
    echo $? > "$4/$name.rc"
    { cat "$4/$name.out"; echo "time $name: $(( $(date +%s) - t0 )) s"; } > "$4/$name.log"
    cat "$4/$name.log"
    exit 0
fi
BUILD_DIR=${1:-build}
JOBS=${KVB_TEST_JOBS:-1}
passed=0
failed=0
skipped=0
crashed=""
HERE=$(dirname "$0")
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
for src in "$HERE"/test_*.c; do
    name=$(basename "$src" .c)
    if [ ! -x "$BUILD_DIR/$name" ]; then
        echo "FAIL $name: test binary $BUILD_DIR/$name is missing or not executable"
        failed=$((failed + 1))
        crashed="$crashed $name"
    fi
done
: > "$R/list"
for t in "$HERE"/test_*.sh "$BUILD_DIR"/test_*; do # the scripts, the longest, first
    [ -f "$t" ] || continue
    case "$t" in *.sh) ;; *) [ -x "$t" ] || continue ;; esac
    echo "$t" >> "$R/list"
done
xargs -P "$JOBS" -I {} sh "$0" --one "$BUILD_DIR" {} "$R" < "$R/list"
while read -r t; do
    name=$(basename "$t")
    rc=$(cat "$R/$name.rc" 2>/dev/null || echo 127)
    line=$(grep -E '^cases: [0-9]+ passed, [0-9]+ failed' "$R/$name.out" 2>/dev/null | tail -n 1)
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
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name exited with status $rc"
        failed=$((failed + 1))
        crashed="$crashed $name"
    fi
done < "$R/list"
if [ -n "$crashed" ]; then echo "crashed or missing:$crashed"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
