# cli_lib.sh — sourced by the tests/test_*_cli.sh scripts (not run alone):
# B build dir (first argument), K the kvbound binary, D the shared data,
# T a scratch directory removed on exit, ok/ko to count cases and
# cli_summary to print "cases: P passed, F failed" and set the exit status.
B=${1:-build}
K="$B/kvbound"
D=${KVB_SHARED_DATA:-../shared/data}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
ko() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
cli_summary() {
    echo "cases: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
