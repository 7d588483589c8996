#!/bin/sh
# test_install_cli.sh BUILD_DIR — the library as a C programmer adopts it:
# `make install PREFIX=tmp` installs libkvbound.so (with its soname),
# libkvbound.a, kvbound.h, kvbound.pc and the tool; examples/*.c build with
# `pkg-config --cflags --libs kvbound` against the installed tree only and
# run; the shared library exports only kvb_ symbols.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-cc}

# exports: only what kvbound.h declares, all kvb_
so="$B/libkvbound.so"
if [ -f "$so" ]; then
    bad=$(nm -D --defined-only "$so" | awk 'NF >= 3 {print $3}' | grep -v '^kvb_' | head -5)
    n=$(nm -D --defined-only "$so" | awk 'NF >= 3' | wc -l)
    if [ -z "$bad" ] && [ "$n" -gt 50 ]; then ok exports_only_kvb_symbols
    else ko exports_only_kvb_symbols "$n exported, not kvb_: $bad"; fi
else ko exports_only_kvb_symbols "no $so"; fi

# the static library defines only kvb_ globals too (internal names are
# prefixed: a static link next to libggml must not clash on gguf_open)
a="$B/libkvbound.a"
if [ -f "$a" ]; then
    # (an ASan build adds its own __odr_asan.* indicators, one per global)
    bad=$(nm -g --defined-only "$a" 2>/dev/null | awk 'NF >= 3 {print $3}' | grep -v '^kvb_' | grep -v '^__odr_asan\.kvb_' | sort -u | head -5)
    if [ -z "$bad" ]; then ok static_defines_only_kvb_symbols
    else ko static_defines_only_kvb_symbols "not kvb_: $bad"; fi
else ko static_defines_only_kvb_symbols "no $a"; fi

# the cache asks, the policy answers: no policy id is switched on in the cache
hits=$(grep -n 'KVB_POLICY_' "$HERE"/src/cache/*.c "$HERE"/src/cache/*.h)
if [ -z "$hits" ]; then ok cache_knows_no_policy_ids; else ko cache_knows_no_policy_ids "$hits"; fi

# policies see only their view: policy files include only policy.h and core
pinc=$(grep -n '#include "' "$HERE"/src/policies/*.c "$HERE"/src/policies/*.h | grep -v '"policy.h"\|"../core/core.h"')
if [ -z "$pinc" ]; then ok policies_include_only_core; else ko policies_include_only_core "$pinc"; fi

# programs include only the public header
inc=$(grep -n '#include "' "$HERE"/tools/kvbound/*.c "$HERE"/tools/kvbound/*.h | grep -v '"cli.h"\|"lab.h"\|"kvbound.h"')
if [ -z "$inc" ]; then ok cli_includes_only_kvbound_h; else ko cli_includes_only_kvbound_h "$inc"; fi

if [ -n "${KVB_TEST_QUICK:-}" ]; then
    # make asan: an instrumented library cannot be linked into plain programs;
    # make test installs the release build
    echo "quick mode (KVB_TEST_QUICK): install and examples are checked by make test"
    cli_summary
    exit
fi
# without pkg-config (not in the README's gcc cmake make) the examples build
# with the installed tree's flags spelled out; only the pkg-config case skips
have_pc=1
need_tool examples_build_with_pkg_config pkg-config KVB_REQUIRE_PKGCONFIG "Debian pkg-config; .ci/run installs it" || have_pc=0
if [ $have_pc -eq 0 ] && [ "${KVB_REQUIRE_PKGCONFIG:-0}" = 1 ]; then cli_summary; exit; fi
P="$T/prefix"
BA=$(cd "$B" && pwd) # the build under test, reconfigured with the prefix and installed
if (cd "$HERE" && make install BUILD="$BA" PREFIX="$P" > "$T/install.log" 2>&1) &&
   [ -f "$P/include/kvbound.h" ] && [ -x "$P/bin/kvbound" ] && ls "$P"/lib*/libkvbound.a > /dev/null 2>&1 &&
   ls "$P"/lib*/libkvbound.so.0.2 > /dev/null 2>&1; then ok make_install_prefix
else ko make_install_prefix "$(tail -n 5 "$T/install.log")"; fi
PC=$(ls -d "$P"/lib*/pkgconfig 2>/dev/null | head -n 1)
export PKG_CONFIG_PATH="$PC"
if [ $have_pc -eq 1 ]; then
    LIBDIR=$(pkg-config --variable=libdir kvbound 2>/dev/null)
    ver=$(pkg-config --modversion kvbound 2>/dev/null)
    FLAGS=$(pkg-config --cflags --libs kvbound)
else
    LIBDIR=$(dirname "$PC")
    FLAGS="-I$P/include -L$LIBDIR -lkvbound"
fi
built=0
for e in stream cache_scores tokenize; do
    # the installed tree only: no -I into the source, no build directory
    $CC -std=c11 -Wall -Wextra -Werror "$HERE/examples/$e.c" $FLAGS -o "$T/$e" 2> "$T/cc_$e.txt" || { echo "  $e: $(head -n 3 "$T/cc_$e.txt")"; built=1; }
done
if [ $have_pc -eq 1 ]; then
    if [ $built -eq 0 ] && [ "$ver" = "$("$P/bin/kvbound" version | awk '{print $2}')" ]; then ok examples_build_with_pkg_config
    else ko examples_build_with_pkg_config "pkg-config version '$ver'"; fi
elif [ $built -ne 0 ]; then ko examples_build "with $FLAGS"; fi
# a custom PREFIX: kvbound.pc carries an rpath, so a program built with it runs as is
if [ $have_pc -eq 1 ]; then
    if [ -x "$T/cache_scores" ] && [ "$(env -u LD_LIBRARY_PATH "$T/cache_scores" 2>&1)" = "kept: <s> System: PostgresDB db def query():" ] &&
       env -u LD_LIBRARY_PATH ldd "$T/cache_scores" | grep -q "libkvbound.so.0.2 => $LIBDIR"; then ok example_runs_without_ld_library_path
    else ko example_runs_without_ld_library_path "$(env -u LD_LIBRARY_PATH "$T/cache_scores" 2>&1 | head -n 1); $(pkg-config --libs kvbound)"; fi
fi
export LD_LIBRARY_PATH="$LIBDIR"
if [ -x "$T/cache_scores" ] && [ "$("$T/cache_scores")" = "kept: <s> System: PostgresDB db def query():" ] &&
   ldd "$T/cache_scores" | grep -q "libkvbound.so.0.2 => $LIBDIR"; then ok example_cache_scores_shared
else ko example_cache_scores_shared "$("$T/cache_scores" 2>&1 | head -n 2)"; fi
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ -f "$G" ]; then
    "$T/stream" "$G" "Once upon a time" 400 > "$T/s.txt" 2>&1
    if head -c 60 "$T/s.txt" | grep -q '^Once upon a time, there was a little girl' &&
       grep -q '^\[[0-9]* tokens seen, KV [0-9]* bytes, longest stream 64 tokens\]$' "$T/s.txt"; then ok example_stream_bounded
    else ko example_stream_bounded "$(tail -n 2 "$T/s.txt")"; fi
    if [ "$("$T/tokenize" "$G" "Once upon a time" | head -n 1)" = "[1, 403, 407, 261, 378]" ]; then ok example_tokenize
    else ko example_tokenize "$("$T/tokenize" "$G" "Once upon a time" 2>&1 | head -n 2)"; fi
else
    skip_case example_stream_bounded "missing $G"
    skip_case example_tokenize "missing $G"
fi
cli_summary
