#!/bin/sh
# test_layers_cli.sh BUILD_DIR — the code's layering: the files of
# tools/serve call one another one way only (no circle of any length), as
# issue 33 asks; tests/serve_layers.py reads the sources. A circle made on
# purpose (a copy of the tree where sbuf.c calls serve_route) must be found.
# The library's rooms (src/*) and the files inside each, as issue 48 asks:
# tests/src_layers.py reads the real call graph from BUILD_DIR's objects
# with nm; an arrow made up on purpose (core calling the cache), a circle
# made on purpose (pool.c calling stream.c) and a unit split for size that
# its room's design note does not name must each be found.
. "$(dirname "$0")/cli_lib.sh"
need_tool serve_layers python3 KVB_REQUIRE_PYTHON "the check reads the sources with Python; Debian python3" || { cli_summary; exit; }
S="$(dirname "$0")/../tools/serve"
if out=$(python3 "$(dirname "$0")/serve_layers.py" "$S"); then ok "serve_files_no_circle ($(echo "$out" | tail -n 1))"
else ko serve_files_no_circle "$(echo "$out" | tail -n 1)"; fi
mkdir -p "$T/serve" && cp "$S"/*.c "$T/serve/"
printf '\nvoid layers_probe(void);\nvoid layers_probe(void) { serve_route(0, 0, 0); }\n' >> "$T/serve/sbuf.c"
if out=$(python3 "$(dirname "$0")/serve_layers.py" "$T/serve"); then ko serve_layers_finds_circle "a circle made on purpose was not found"
else ok serve_layers_finds_circle; fi

# the library: its real call graph, from the objects the build made
if need_tool src_layers nm KVB_REQUIRE_BINUTILS "the check reads the library's objects with nm; Debian binutils"; then
    L="$(dirname "$0")/src_layers.py"
    R=$(cd "$(dirname "$0")/.." && pwd)
    O=CMakeFiles/kvbound_obj.dir/src
    if out=$(python3 "$L" "$B"); then ok "src_rooms_down_files_one_way ($(echo "$out" | tail -n 1))"
    else ko src_rooms_down_files_one_way "$(echo "$out" | grep '^FAIL' | tr '\n' ' ')"; fi
    CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$B/CMakeCache.txt")
    objs() { rm -rf "$T/b" && mkdir -p "$T/b/CMakeFiles/kvbound_obj.dir" && cp -r "$B/$O" "$T/b/$O"; }
    # a copy of the sources (an object is read only where its source is there)
    mkdir -p "$T/root" && cp -r "$R/src" "$R/docs" "$T/root/"
    # core calls up into the cache: an arrow up, and core -> cache -> core a circle of rooms
    objs
    printf 'void kvb_cache_free(void *c);\nvoid layers_probe(void);\nvoid layers_probe(void) { kvb_cache_free(0); }\n' > "$T/root/src/core/probe.c"
    if ! "$CC" -c "$T/root/src/core/probe.c" -o "$T/b/$O/core/probe.c.o"; then ko src_layers_finds_arrow_up "cannot compile the probe with '$CC'"
    elif out=$(python3 "$L" "$T/b" --root "$T/root"); then ko src_layers_finds_arrow_up "core calling kvb_cache_free was not found"
    elif echo "$out" | grep -q '^FAIL arrow up core -> cache: core/probe.c -> cache/cache.c (kvb_cache_free' &&
         echo "$out" | grep -q '^FAIL circle of rooms '; then ok src_layers_finds_arrow_up
    else ko src_layers_finds_arrow_up "not named: $(echo "$out" | grep '^FAIL' | tr '\n' ' ')"; fi
    # pool.c (below stream.c) calls stream.c: a circle inside src/cache
    objs
    { cat "$R/src/cache/pool.c"; printf '\n#include "stream.h"\nint64_t layers_probe(void);\nint64_t layers_probe(void) { return kvb_stream_pages_needed(NULL, NULL, 1); }\n'; } > "$T/pool.c"
    if ! "$CC" -std=c11 -D_POSIX_C_SOURCE=200809L -I"$R/include" -I"$R/src/cache" -c "$T/pool.c" -o "$T/b/$O/cache/pool.c.o"; then
        ko src_layers_finds_file_circle "cannot compile the probe with '$CC'"
    elif out=$(python3 "$L" "$T/b"); then ko src_layers_finds_file_circle "pool.c calling stream.c was not found"
    elif echo "$out" | grep -q '^FAIL circle in src/cache among pool.c, stream.c: pool.c -> stream.c -> pool.c'; then ok src_layers_finds_file_circle
    else ko src_layers_finds_file_circle "not named: $(echo "$out" | grep '^FAIL' | tr '\n' ' ')"; fi
    # that circle declared one unit split for size: it passes only where the cache's design note names it,
    # and the declaration fails once the files call one way again
    rm "$T/root/src/core/probe.c"
    out=$(python3 "$L" "$T/b" --unit cache:pool.c+stream.c); r1=$?
    printf '/* one unit split for size: pool.c +\n * stream.c (the test) */\n' >> "$T/root/src/cache/cache_impl.h"
    out2=$(python3 "$L" "$T/b" --root "$T/root" --unit cache:pool.c+stream.c); r2=$?
    out3=$(python3 "$L" "$B" --root "$T/root" --unit cache:pool.c+stream.c); r3=$?
    if [ $r1 -ne 0 ] && echo "$out" | grep -q '^FAIL src/cache: the design note src/cache/cache_impl.h does not name "one unit split for size: pool.c + stream.c"' &&
       [ $r2 -eq 0 ] && [ $r3 -ne 0 ] && echo "$out3" | grep -q '^FAIL src/cache: pool.c + stream.c is declared one unit split for size, but its files no longer call one another both ways'; then
        ok src_layers_unit_named_in_note
    else ko src_layers_unit_named_in_note "rc $r1/$r2/$r3: $(echo "$out" "$out2" "$out3" | grep '^FAIL' | tr '\n' ' ')"; fi
fi
cli_summary
