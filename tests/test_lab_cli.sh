#!/bin/sh
# test_lab_cli.sh BUILD_DIR — the lab as users run it: byte-identical JSON for
# a seed, the trace expectations, a well-formed HTML report (strict XML parse
# with xmllint) that draws every policy in a colour (no "(null)"), and a real
# browser: headless Chromium loads report.html from disk, runs its script
# without error, and the SVG panels are in the DOM.
# Without xmllint or chromium those cases skip, unless KVB_REQUIRE_BROWSER=1.
. "$(dirname "$0")/cli_lib.sh"
skip() {
    if [ "${KVB_REQUIRE_BROWSER:-0}" = 1 ]; then ko "$1" "$2 (KVB_REQUIRE_BROWSER=1)"; else sk "$1" "$2"; fi
}
ARGS="--prompt 512 --steps 256"

# determinism
"$K" lab $ARGS --seed 5 --json > "$T/a.json" 2>/dev/null; ra=$?
"$K" lab $ARGS --seed 5 --json > "$T/b.json" 2>/dev/null
"$K" lab $ARGS --seed 6 --json > "$T/c.json" 2>/dev/null
if [ $ra -eq 0 ] && cmp -s "$T/a.json" "$T/b.json" && ! cmp -s "$T/a.json" "$T/c.json"; then ok lab_json_deterministic
else ko lab_json_deterministic "exit $ra, or same seed differs, or another seed is identical"; fi

# JSON carries every audit, all passing
n=$(grep -o '"name":"[a-z0-9-]*","pass":true' "$T/a.json" | wc -l)
if [ "$n" -eq 7 ] && ! grep -q '"pass":false' "$T/a.json" && grep -q '"scenarios":\[' "$T/a.json"; then ok lab_json_audits
else ko lab_json_audits "expected 7 passing audits, found $n"; fi

# trace
"$K" lab --scenario trace > "$T/trace.txt" 2>&1
if grep -q 'final h2o cache: <s> System: PostgresDB db def query():$' "$T/trace.txt" &&
   grep -q 'final streaming cache: <s> System: as db def query():$' "$T/trace.txt" &&
   [ "$(grep -c '^  + ' "$T/trace.txt")" -eq 16 ]; then ok lab_trace
else ko lab_trace "$(tail -n 3 "$T/trace.txt")"; fi

# bad input is named
if ! "$K" lab --budget x 2> "$T/err.txt" && grep -q -- '--budget' "$T/err.txt"; then ok lab_bad_flag
else ko lab_bad_flag "$(cat "$T/err.txt")"; fi

# report
"$K" lab $ARGS --out "$T/rep" > "$T/out.txt" 2>&1; rr=$?
if [ $rr -eq 0 ] && [ -s "$T/rep/report.html" ] && grep -q "report: $T/rep/report.html" "$T/out.txt" &&
   ! grep -q -E '(src|href)="(https?:)?//' "$T/rep/report.html"; then ok lab_report_written
else ko lab_report_written "exit $rr"; fi

# every policy is drawn with a colour: a policy without one printed "(null)" (issue 47, item 15)
if [ -s "$T/rep/report.html" ] && ! grep -q '(null)' "$T/rep/report.html" && grep -q 'lminfinite' "$T/rep/report.html"; then ok lab_report_no_null
else ko lab_report_no_null "$(grep -o '.\{60\}(null).\{20\}' "$T/rep/report.html" | head -n 1)"; fi

if command -v xmllint >/dev/null 2>&1; then
    if xmllint --noout "$T/rep/report.html" 2> "$T/xml.txt"; then ok lab_report_well_formed
    else ko lab_report_well_formed "$(head -n 3 "$T/xml.txt")"; fi
else skip lab_report_well_formed "xmllint not installed (Debian libxml2-utils)"; fi

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$CHROME" ]; then
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$T/chrome" --dump-dom "file://$T/rep/report.html" > "$T/dom.html" 2> "$T/chrome.txt"
    svgs=$(grep -o '<svg' "$T/dom.html" | wc -l)
    if grep -q '<body[^>]*data-ready="1"' "$T/dom.html" && ! grep -q '<body[^>]*data-error' "$T/dom.html" && [ "$svgs" -eq 16 ] &&
       grep -q 'class="snap"' "$T/dom.html"; then ok lab_report_in_browser
    else ko lab_report_in_browser "svg panels $svgs (want 16), body: $(grep -o '<body[^>]*>' "$T/dom.html")"; fi
else skip lab_report_in_browser "chromium not installed (Debian chromium)"; fi

cli_summary
