# cli_lib.sh — sourced by the tests/test_*_cli.sh scripts (not run alone):
# B build dir (first argument), K the kvbound binary, D the shared data,
# T a scratch directory removed on exit, ok/ko/skip_case to count cases and
# cli_summary to print "cases: P passed, F failed, S skipped" and set the exit
# status. skip_case NAME WHY fails instead under KVB_REQUIRE_SHARED=1, as a
# missing shared file is then an error. need_tool NAME TOOL VAR WHY checks that
# a program is on PATH: when it is not, case NAME is skipped naming it, or
# fails when the environment variable VAR is 1 (CI's KVB_REQUIRE_*).
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
need_tool() {
    command -v "$2" > /dev/null 2>&1 && return 0
    eval "_req=\${$3:-0}"
    if [ "$_req" = 1 ]; then ko "$1" "$2 is not installed ($4; $3=1)"; else sk "$1" "$2 is not installed ($4)"; fi
    return 1
}
cli_summary() {
    echo "cases: $pass passed, $fail failed, $skipped skipped"
    [ "$fail" -eq 0 ]
}
