#!/bin/sh
# test_readme_cli.sh BUILD_DIR — every `kvbound` command in the README's code
# blocks runs as written, on the shared data: model.gguf is stories260K's
# GGUF, stories260K.bin / tok512.bin its llama2.c files, book.txt /
# prompt.txt / long_prompt.txt the first 12,000 bytes of TinyStories; chat
# reads one line from stdin; outputs go to a scratch folder. Lines with
# placeholders (MODEL, PROMPT, ...) are the reference table, not commands.
# The only change: `-n 1000000` runs 300 tokens. Under KVB_TEST_QUICK
# (make asan) the measuring commands (ppl, sweep, needle, ruler, bench) are left to
# make test, long_prompt.txt is 3,000 bytes (1,450 tokens) and `-n 2000` runs 100
# (still past the budget of 1024, so recall evicts and fetches): this script
# took 416 s of make asan's 26 minutes with them.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
S="$D/models/stories260K"
if [ ! -f "$S/stories260K.llamacpp.gguf" ] || [ ! -f "$D/text/tinystories_validation_head.txt" ]; then
    skip_case readme_commands "missing $S or the TinyStories text"
    cli_summary
    exit
fi
SA=$(cd "$S" && pwd)
KA=$(cd "$(dirname "$K")" && pwd)/kvbound
head -c 12000 "$D/text/tinystories_validation_head.txt" > "$T/book.txt"
cp "$T/book.txt" "$T/prompt.txt"
cp "$T/book.txt" "$T/long_prompt.txt"
[ -n "${KVB_TEST_QUICK:-}" ] && head -c 3000 "$T/book.txt" > "$T/long_prompt.txt"
# the commands: code-block lines starting with "kvbound ", continuations joined, comments dropped
awk '/^## Command line/ { exit }
     /^```/ { inb = !inb; next }
     inb && cont { line = line " " $0; if ($0 !~ /\\$/) { print line; cont = 0 } else sub(/\\$/, "", line); next }
     inb && /^kvbound / { line = $0; if ($0 ~ /\\$/) { sub(/\\$/, "", line); cont = 1 } else print line }' "$HERE/README.md" |
    sed 's/  *#.*$//' | grep -v -E ' (MODEL|PROMPT|TEXT|VOCAB)\b|\.\.\.|\[options\]|\||^kvbound help$' > "$T/cmds.txt"
n=0
while IFS= read -r cmd; do
    n=$((n + 1))
    if [ -n "${KVB_TEST_QUICK:-}" ]; then
        case "$cmd" in "kvbound ppl"*|"kvbound sweep"*|"kvbound needle"*|"kvbound ruler"*|"kvbound bench"*) continue ;; esac
        cmd=$(printf '%s\n' "$cmd" | sed 's#-n 2000 #-n 100 #')
    fi
    run=$(printf '%s\n' "$cmd" | sed -e "s#^kvbound #$KA #" -e "s#model\.gguf#$SA/stories260K.llamacpp.gguf#g" \
        -e "s#stories260K\.bin#$SA/stories260K.bin#g" -e "s#tok512\.bin#$SA/tok512.bin#g" -e 's#-n 1000000#-n 300#')
    (cd "$T" && printf 'Hello\n' | timeout 600 sh -c "$run" > "$T/out$n.txt" 2>&1); rc=$?
    name="readme_$(printf '%s' "$cmd" | awk '{print $2}')_$n"
    if [ $rc -eq 0 ]; then ok "$name"; else ko "$name" "exit $rc: $cmd :: $(tail -n 2 "$T/out$n.txt" | tr '\n' ' ')"; fi
done < "$T/cmds.txt"
[ $n -ge 10 ] || ko readme_commands_found "only $n commands extracted from the README"
cli_summary
