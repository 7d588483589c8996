#!/bin/sh
# test_fresh_machine_cli.sh BUILD_DIR — the README's promise that `make test`
# passes on a machine with only gcc, cmake and make: with pkg-config and
# python3 off PATH, the scripts that use them skip those cases naming the
# tool (0 failed), and CI's KVB_REQUIRE_PKGCONFIG=1 / KVB_REQUIRE_PYTHON=1
# turn the skips into failures; no other test script runs python3 or
# pkg-config without asking need_tool (tests/cli_lib.sh) first.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)

# every script make test runs that calls python3 / pkg-config checks for it first
bad=""
for f in "$HERE"/test_*.sh; do
    [ "$(basename "$f")" = test_fresh_machine_cli.sh ] && continue
    for tool in python3 pkg-config; do
        # (serve_ready, tests/serve_lib.sh, asks need_tool for python3)
        checked=$(grep -c -e "need_tool [a-z_]* $tool " -e "^serve_ready .*|| exit" "$f")
        [ "$tool" = python3 ] || checked=$(grep -c "need_tool [a-z_]* $tool " "$f")
        if sed 's/#.*//' "$f" | grep -q "$tool" && [ "$checked" -eq 0 ]; then bad="$bad $(basename "$f"):$tool"; fi
    done
done
if [ -z "$bad" ]; then ok optional_tools_checked_before_use; else ko optional_tools_checked_before_use "unchecked:$bad"; fi

if [ -n "${KVB_TEST_QUICK:-}" ]; then
    # make asan: the scripts below then stop before their tools are looked for
    echo "quick mode (KVB_TEST_QUICK): the scripts without pkg-config and python3 are run by make test"
    cli_summary
    exit
fi
# a PATH without them: links to every other program on PATH (the first of a name wins)
NB="$T/bin"
mkdir "$NB"
old_ifs=$IFS
IFS=:
for d in $PATH; do [ -d "$d" ] && ln -s "$d"/* "$NB"/ 2> /dev/null; done
IFS=$old_ifs
rm -f "$NB"/python* "$NB"/pip* "$NB"/pkg-config "$NB"/pkgconf "$NB"/*-pkg-config
if PATH="$NB" command -v python3 > /dev/null || PATH="$NB" command -v pkg-config > /dev/null || ! PATH="$NB" command -v cmake > /dev/null; then
    ko path_without_tools "python3 or pkg-config still found, or cmake lost, in $NB"
    cli_summary
    exit
fi
bare() { PATH="$NB" env -u KVB_REQUIRE_PYTHON -u KVB_REQUIRE_PKGCONFIG -u KVB_TEST_QUICK "$@"; }

bare sh "$HERE/test_python_cli.sh" "$B" > "$T/py.txt" 2>&1; r1=$?
bare KVB_REQUIRE_PYTHON=1 sh "$HERE/test_python_cli.sh" "$B" > "$T/py_req.txt" 2>&1; r2=$?
if [ $r1 -eq 0 ] && grep -q '^skip python_bindings: python3 is not installed' "$T/py.txt" && grep -q '^cases: 0 passed, 0 failed, 1 skipped' "$T/py.txt" &&
   [ $r2 -ne 0 ] && grep -q '^FAIL python_bindings: python3 is not installed (.*KVB_REQUIRE_PYTHON=1)' "$T/py_req.txt"; then
    ok python_absent_skips_named
else ko python_absent_skips_named "rc $r1/$r2: $(cat "$T/py.txt" "$T/py_req.txt" | tr '\n' ' ')"; fi

bare sh "$HERE/test_install_cli.sh" "$B" > "$T/in.txt" 2>&1; r1=$?
bare KVB_REQUIRE_PKGCONFIG=1 sh "$HERE/test_install_cli.sh" "$B" > "$T/in_req.txt" 2>&1; r2=$?
# without pkg-config the library still installs and the examples build from the installed tree and run
if [ $r1 -eq 0 ] && grep -q '^skip examples_build_with_pkg_config: pkg-config is not installed' "$T/in.txt" &&
   grep -q '^cases: [0-9]* passed, 0 failed, 1 skipped' "$T/in.txt" && grep -q '^ok   make_install_prefix' "$T/in.txt" &&
   grep -q '^ok   example_cache_scores_shared' "$T/in.txt" &&
   [ $r2 -ne 0 ] && grep -q '^FAIL examples_build_with_pkg_config: pkg-config is not installed (.*KVB_REQUIRE_PKGCONFIG=1)' "$T/in_req.txt"; then
    ok pkg_config_absent_skips_named
else ko pkg_config_absent_skips_named "rc $r1/$r2: $(grep -v '^ok' "$T/in.txt" "$T/in_req.txt" | tr '\n' ' ')"; fi
cli_summary
