# cli_lib.sh — sourced by the tests/test_*_cli.sh scripts (not run alone):
# B build dir (first argument), K the kvbound binary, D the shared data,
# T a scratch directory removed on exit, ok/ko/skip_case to count cases and
# cli_summary to print "cases: P passed, F failed, S skipped" and set the exit
# status. skip_case NAME WHY fails instead under KVB_REQUIRE_SHARED=1, as a
# missing shared file is then an error. need_tool NAME TOOL VAR WHY checks that
# a program is on PATH: when it is not, case NAME is skipped naming it, or
# fails when the environment variable VAR is 1 (CI's KVB_REQUIRE_*).
# ppl_field, near, near_list and check_ppl compare published figures with a
# `kvbound ppl --json` output (test_figures_cli.sh, test_trained_cli.sh).
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
# ppl_field FILE POLICY FIELD: FIELD of the run of POLICY in a `kvbound ppl --json` output
ppl_field() {
    awk -v pol="$2" -v fld="$3" '{
        n = split($0, runs, /\{"policy":/)
        for (i = 2; i <= n; i++) if (index(runs[i], "\"" pol "\"") == 1) {
            if (match(runs[i], "\"" fld "\":[-0-9.e]+")) { v = substr(runs[i], RSTART, RLENGTH); sub(/.*:/, "", v); print v; exit }
        }
    }' "$1"
}
# near NAME GOT WANT TOL
near() {
    if [ -n "$2" ] && awk -v g="$2" -v w="$3" -v t="$4" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= t) }'; then return 0; fi
    echo "  $1: got '${2:-none}', the doc says $3 (tolerance $4)"
    return 1
}
# near_list NAME "GOT..." "WANT..." TOL: near for each pair, the i-th of GOT against the i-th of WANT
near_list() {
    _bad=0; _i=1
    for _w in $3; do
        near "$1 $_i" "$(echo "$2" | awk -v i=$_i '{print $i}')" "$_w" "$4" || _bad=1
        _i=$((_i + 1))
    done
    return $_bad
}
# check_ppl CASE FILE "POLICY FIELD WANT TOL" ...: one case, every listed figure
check_ppl() {
    name=$1; file=$2; shift 2; bad=0
    for spec in "$@"; do
        set -- $spec
        near "$name $1 $2" "$(ppl_field "$file" "$1" "$2")" "$3" "$4" || bad=1
    done
    if [ $bad -eq 0 ]; then ok "$name"; else ko "$name" "a published figure moved (update the doc with the change)"; fi
}
