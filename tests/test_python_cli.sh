#!/bin/sh
# test_python_cli.sh BUILD_DIR — the Python bindings (python/kvbound, ctypes,
# standard library only) under Debian's python3: the unit cases of
# python/tests/test_kvbound.py against BUILD_DIR/libkvbound.so, then as a
# user installs them — `make install` into a temporary prefix, `pip install
# ./python` offline into a target folder — and `import kvbound` from there
# generating text with a bounded cache (library found on the system path).
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
# python3 is not in the README's gcc cmake make: without it on PATH the
# bindings are skipped (a failure under KVB_REQUIRE_PYTHON=1, as in CI)
if ! need_tool python_bindings python3 KVB_REQUIRE_PYTHON "Debian python3; .ci/run installs it"; then
    cli_summary
    exit
fi
PY=/usr/bin/python3 # Debian's, as a user of the package has it, when there
[ -x "$PY" ] || PY=$(command -v python3)
if [ -n "${KVB_TEST_QUICK:-}" ]; then
    # make asan: an instrumented libkvbound cannot be loaded into python3
    echo "quick mode (KVB_TEST_QUICK): the Python bindings are checked by make test"
    cli_summary
    exit
fi
BA=$(cd "$B" && pwd)
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ ! -f "$G" ]; then
    skip_case python_bindings "missing $G"
    cli_summary
    exit
fi
ver=$("$K" version | awk '{print $2}')
GA="$(cd "$(dirname "$G")" && pwd)/$(basename "$G")"
(cd "$HERE" && PYTHONPATH="$HERE/python" KVBOUND_LIBRARY="$BA/libkvbound.so" KVB_SHARED_DATA="$(cd "$D" && pwd)" KVB_EXPECT_VERSION="$ver" \
    "$PY" python/tests/test_kvbound.py) > "$T/py.txt" 2>&1
rc=$?
while IFS= read -r line; do
    case "$line" in
        "ok   "*) ok "python_${line#ok   }" ;;
        "FAIL "*) ko "python_${line#FAIL }" "$(grep -A4 "^$line" "$T/py.txt" | tail -n 3 | tr '\n' ' ')" ;;
        cases:*) ;;
        *) echo "  $line" ;;
    esac
done < "$T/py.txt"
grep -q '^cases: ' "$T/py.txt" && [ $rc -le 1 ] || ko python_unit_tests "python3 exited $rc: $(tail -n 3 "$T/py.txt" | tr '\n' ' ')"

# as a user installs it: the library in a prefix, the package with pip (offline), the system path
P="$T/prefix"
(cd "$HERE" && make install BUILD="$BA" PREFIX="$P" > "$T/install.log" 2>&1)
LIBDIR=$(dirname "$(ls "$P"/lib*/libkvbound.so.0.2 2>/dev/null | head -n 1)")
"$PY" -m pip install --no-index --no-cache-dir --target "$T/site" "$HERE/python" > "$T/pip.txt" 2>&1; rp=$?
out=$(cd "$T" && env -u KVBOUND_LIBRARY LD_LIBRARY_PATH="$LIBDIR" PYTHONPATH="$T/site" "$PY" -c "
import kvbound
m = kvbound.Model('$GA')
text = ''.join(m.generate('Once upon a time', 300, policy='streaming', budget=48, stop_at_eos=False))
print(kvbound.__version__, kvbound.__file__.startswith('$T/site'), m.last_context.cache_stats()['slots_max'], len(text) > 500, text[:28])
" 2>&1)
if [ $rp -eq 0 ] && [ "$out" = "$ver True 48 True , there was a little girl na" ]; then ok python_pip_install_offline_bounded_generation
else ko python_pip_install_offline_bounded_generation "pip rc $rp ($(tail -n 1 "$T/pip.txt")); $out"; fi
cli_summary
