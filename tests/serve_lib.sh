# serve_lib.sh — sourced after cli_lib.sh by the tests/test_serve*_cli.sh
# scripts (not run alone): start NAME ARGS... starts `kvbound serve` on a
# free port with ARGS, waits until it says where it listens, and sets URL,
# HOSTPORT ("HOST PORT") and PID; every server started is killed on exit,
# with the scratch folder removed as cli_lib.sh does.
PIDS=""
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
# start_redis: a redis-server of this test's own on a free loopback port
# (stopped on exit); sets RPORT, RPID and RURL (redis://...), or returns 1
# when redis-server is not installed.
start_redis() {
    command -v redis-server > /dev/null || return 1
    RPORT=$(free_port)
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no > "$T/redis-$RPORT.log" 2>&1 &
    RPID=$!
    PIDS="$PIDS $RPID"
    for _ in $(seq 1 50); do redis-cli -p "$RPORT" ping > /dev/null 2>&1 && break; sleep 0.1; done
    RURL="redis://127.0.0.1:$RPORT"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() {
    name=$1; shift
    "$K" serve --port 0 "$@" > "$T/$name.log" 2>&1 &
    PID=$!
    PIDS="$PIDS $PID"
    URL=""
    for _ in $(seq 1 100); do
        URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$T/$name.log" 2>/dev/null | head -n 1)
        [ -n "$URL" ] && break
        kill -0 $PID 2>/dev/null || break
        sleep 0.1
    done
    HOSTPORT=$(echo "$URL" | sed 's|http://||; s|:| |')
}
# serve_ready NAME MODEL WHY: whether a serve test can run: kvbound serve
# built, MODEL present, curl and python3 there (WHY: what python3 is for);
# otherwise the case NAME is skipped (or failed under KVB_REQUIRE_*), the
# summary printed, its status left in SERVE_RC, and 1 returned (callers:
# serve_ready ... || exit $SERVE_RC).
serve_ready() {
    if ! "$K" serve --help > /dev/null 2>&1; then
        skip_case serve_built "kvbound serve is not built (install libmicrohttpd-dev libcjson-dev libsqlite3-dev)"
    elif [ ! -f "$2" ]; then skip_case "$1" "missing $2"
    elif ! command -v curl > /dev/null; then skip_case serve_curl "curl is not installed"
    elif need_tool "$1_python" python3 KVB_REQUIRE_PYTHON "$3; Debian python3"; then return 0
    fi
    cli_summary
    SERVE_RC=$?
    return 1
}
