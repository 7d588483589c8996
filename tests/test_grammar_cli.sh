#!/bin/sh
# test_grammar_cli.sh BUILD_DIR — `kvbound grammar` and `kvbound grammar-bench`
# as a user drives them: a schema to GBNF, a text checked against a grammar or a
# schema (exit status), errors named, --help honest, and the benchmark's JSON on
# a shared vocabulary (no decode).
. "$(dirname "$0")/cli_lib.sh"

printf '{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":12}},"required":["n"]}' > "$T/s.json"
if "$K" grammar --json-schema "$T/s.json" > "$T/g.gbnf" 2> "$T/e.txt" && grep -q '^root ::= ' "$T/g.gbnf"; then ok schema_to_gbnf
else ko schema_to_gbnf "$(head -n 2 "$T/e.txt")"; fi

printf '{"n": 12}' > "$T/good.txt"
printf '{"n": 13}' > "$T/bad.txt"
"$K" grammar --json-schema "$T/s.json" --check "$T/good.txt" > "$T/o1.txt"; r1=$?
"$K" grammar --gbnf "$T/g.gbnf" --check "$T/bad.txt" > "$T/o2.txt"; r2=$?
if [ $r1 -eq 0 ] && grep -q '^match' "$T/o1.txt" && [ $r2 -eq 1 ] && grep -q 'refused at byte 7' "$T/o2.txt"; then ok check_exit_status
else ko check_exit_status "rc $r1 $(cat "$T/o1.txt") / rc $r2 $(cat "$T/o2.txt")"; fi

printf 'root ::= x\n' > "$T/u.gbnf"
"$K" grammar --gbnf "$T/u.gbnf" > /dev/null 2> "$T/e.txt"; r=$?
if [ $r -eq 1 ] && grep -q "undefined rule 'x'" "$T/e.txt"; then ok error_named
else ko error_named "rc $r $(cat "$T/e.txt")"; fi

printf '{"not":{}}' > "$T/n.json"
"$K" grammar --json-schema "$T/n.json" > /dev/null 2> "$T/e.txt"; r=$?
if [ $r -eq 1 ] && grep -q '"not"' "$T/e.txt"; then ok unsupported_named
else ko unsupported_named "rc $r $(cat "$T/e.txt")"; fi

bad=""
for c in grammar grammar-bench; do
    "$K" $c --help > "$T/h.txt" 2>&1 || bad="$bad [$c --help rc]"
    "$K" $c --bogus > /dev/null 2> "$T/u.txt"; r=$?
    [ $r -eq 2 ] && grep -q "unknown option '--bogus'" "$T/u.txt" || bad="$bad [$c --bogus: rc $r]"
    grep -oE "(^|[ ,[(])(-[a-zA-Z]+|--[a-z][a-z0-9-]+) [A-Z][A-Z_]*" "$T/h.txt" | sed -E 's/^[ ,[(]*//; s/ .*//' | sort -u > "$T/flags.txt"
    while IFS= read -r f; do
        "$K" $c "$f" > /dev/null 2> "$T/u.txt"; r=$?
        [ $r -eq 2 ] && grep -q -- "$f needs a value" "$T/u.txt" || bad="$bad [$c $f: rc $r $(head -n 1 "$T/u.txt")]"
    done < "$T/flags.txt"
done
if [ -z "$bad" ]; then ok help_and_options; else ko help_and_options "$bad"; fi

V="$D/tokenizers/llama2/ggml-vocab-llama-spm.gguf"
if [ -f "$V" ]; then
    if "$K" grammar-bench -m "$V" --no-decode --walks 2 --tokens 40 > "$T/b.json" 2> "$T/e.txt" &&
       grep -q '"n_vocab": 32000,' "$T/b.json" && grep -qE '"string_states": [1-9]' "$T/b.json" &&
       grep -qE '"string_mask_us_median": [0-9]' "$T/b.json" && grep -q '"decode_step_ms": null' "$T/b.json"; then
        ok bench_json
    else ko bench_json "$(cat "$T/e.txt" "$T/b.json" | head -n 5)"; fi
else skip_case bench_json "shared data missing: $V"; fi

cli_summary
