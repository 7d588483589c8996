# cli_lib.sh — sourced by the tests/test_*_cli.sh scripts (not run alone):
# B build dir (first argument), K the kvbound binary, D the shared data,
# T a scratch directory removed on exit, ok/ko/skip_case to count cases and
# cli_summary to print "cases: P passed, F failed, S skipped" and set the exit
# status. skip_case NAME WHY fails instead under KVB_REQUIRE_SHARED=1, as a
# missing shared file is then an error.
B=${1:-build}
K="$B/kvbound"
D=${KVB_SHARED_DATA:-../shared/data}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
skipped=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
sk() { echo "skip $1: $2"; skipped=$((skipped + 1)); }
skip_case() {
    if [ "${KVB_REQUIRE_SHARED:-0}" = 1 ]; then ko "$1" "$2 (KVB_REQUIRE_SHARED=1)"; else sk "$1" "$2"; fi
}
cli_summary() {
    echo "cases: $pass passed, $fail failed, $skipped skipped"
    [ "$fail" -eq 0 ]
}
