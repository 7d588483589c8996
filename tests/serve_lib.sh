# serve_lib.sh — sourced after cli_lib.sh by the tests/test_serve*_cli.sh
# scripts (not run alone): start NAME ARGS... starts `kvbound serve` on a
# free port with ARGS, waits until it says where it listens, and sets URL,
# HOSTPORT ("HOST PORT") and PID; every server started is killed on exit,
# with the scratch folder removed as cli_lib.sh does.
PIDS=""
trap 'for p in $PIDS; do kill -9 $p 2>/dev/null; done; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start() {
    name=$1; shift
    "$K" serve --port 0 "$@" > "$T/$name.log" 2>&1 &
    PID=$!
    PIDS="$PIDS $PID"
    URL=""
    for _ in $(seq 1 100); do
        URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$T/$name.log" | head -n 1)
        [ -n "$URL" ] && break
        kill -0 $PID 2>/dev/null || break
        sleep 0.1
    done
    HOSTPORT=$(echo "$URL" | sed 's|http://||; s|:| |')
}
