#!/bin/sh
# test_serve_clients_cli.sh BUILD_DIR — real clients against `kvbound serve`:
# the official openai npm package (streamed chat and completion equal their
# unstreamed answers, a two-turn session, errors) on stories260K and on a
# random-weight model made with `kvbound mkmodel --vocab`; and the page at /
# in Debian's Chromium through puppeteer-core (streamed text, the cache map
# drawn and redrawn, pool usage, a random UUID as session id; with --api-key
# the key typed into the page and kept for the tab only). The npm packages live in
# tests/serve/node_modules (`npm install --prefix tests/serve`, as .ci/run
# does); without them, or without Chromium, the cases are skipped — failures
# under KVB_REQUIRE_NPM=1 / KVB_REQUIRE_BROWSER=1.
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
G="$D/models/stories260K/stories260K.llamacpp.gguf"
LV="$D/tokenizers/llama2/ggml-vocab-llama-spm.gguf"
need_npm() {
    if [ "${KVB_REQUIRE_NPM:-0}" = 1 ]; then ko "$1" "$2 (KVB_REQUIRE_NPM=1)"; else sk "$1" "$2"; fi
}
if ! "$K" serve --help > /dev/null 2>&1; then skip_case serve_built "kvbound serve is not built (install libmicrohttpd-dev libcjson-dev libsqlite3-dev)"; cli_summary; exit; fi
if [ ! -f "$G" ] || [ ! -f "$LV" ]; then skip_case serve_clients "missing $G or $LV"; cli_summary; exit; fi
if ! command -v node > /dev/null || [ ! -d "$HERE/serve/node_modules/openai" ]; then
    need_npm serve_openai_client "node or tests/serve/node_modules missing (npm install --prefix tests/serve)"
    cli_summary
    exit
fi
# report LABEL OUTPUT: each "ok X" / "FAIL X: ..." line of a node script as a case
report() {
    while IFS= read -r line; do
        case "$line" in
            "ok   "*) ok "$1_${line#ok   }" ;;
            "FAIL "*) rest=${line#FAIL }; ko "$1_${rest%%:*}" "${rest#*: }" ;;
        esac
    done <<EOT
$2
EOT
}
start s -m "$G" --sessions "$T/s" --budget 64 -t 1
report stories "$(timeout 300 node "$HERE/serve/openai_client.mjs" "$URL" 2>&1)"
if [ -x "${CHROMIUM:-/usr/bin/chromium}" ] && [ -d "$HERE/serve/node_modules/puppeteer-core" ]; then
    report browser "$(timeout 300 node "$HERE/serve/page_test.mjs" "$URL" 2>&1)"
    # with --api-key: the key is typed into the page and kept for the tab (it came from the URL)
    kill -TERM $PID; wait $PID 2>/dev/null
    start sk -m "$G" --sessions "$T/sk" --budget 64 -t 1 --api-key page-sekrit
    report browser_key "$(timeout 300 node "$HERE/serve/page_test.mjs" "$URL" page-sekrit 2>&1)"
elif [ "${KVB_REQUIRE_BROWSER:-0}" = 1 ]; then ko browser_page "no Chromium or puppeteer-core (KVB_REQUIRE_BROWSER=1)"
else sk browser_page "no Chromium or puppeteer-core"; fi
kill -TERM $PID; wait $PID 2>/dev/null
"$K" mkmodel --shape tiny --type q8_0 --vocab "$LV" -o "$T/r.gguf" > /dev/null 2>&1
start r -m "$T/r.gguf" --sessions "$T/r" --budget 64 -t 1
report mkmodel "$(timeout 300 node "$HERE/serve/openai_client.mjs" "$URL" 2>&1)"
kill -TERM $PID; wait $PID 2>/dev/null
cli_summary
