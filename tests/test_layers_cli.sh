#!/bin/sh
# test_layers_cli.sh BUILD_DIR — the code's layering: the files of
# tools/serve call one another one way only (no circle of any length), as
# issue 33 asks; tests/serve_layers.py reads the sources. A circle made on
# purpose (a copy of the tree where sbuf.c calls serve_route) must be found.
. "$(dirname "$0")/cli_lib.sh"
need_tool serve_layers python3 KVB_REQUIRE_PYTHON "the check reads the sources with Python; Debian python3" || { cli_summary; exit; }
S="$(dirname "$0")/../tools/serve"
if out=$(python3 "$(dirname "$0")/serve_layers.py" "$S"); then ok "serve_files_no_circle ($(echo "$out" | tail -n 1))"
else ko serve_files_no_circle "$(echo "$out" | tail -n 1)"; fi
mkdir -p "$T/serve" && cp "$S"/*.c "$T/serve/"
printf '\nvoid layers_probe(void);\nvoid layers_probe(void) { serve_route(0, 0, 0); }\n' >> "$T/serve/sbuf.c"
if out=$(python3 "$(dirname "$0")/serve_layers.py" "$T/serve"); then ko serve_layers_finds_circle "a circle made on purpose was not found"
else ok serve_layers_finds_circle; fi
cli_summary
