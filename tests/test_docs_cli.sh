#!/bin/sh
# test_docs_cli.sh BUILD_DIR — every `kvbound` command in a code block of
# docs/*.md runs as written, from a scratch folder, with ../shared/data read
# from the shared data. Lines with placeholders (MODEL, VOCAB, ...) are
# templates, not commands. To keep make test short, three numbers shrink
# and are the only changes: `--steps N` runs 2 steps, `--reps N` 1
# repetition, and War and Peace is its first 200 KB. The EVALUATION.md
# figures are recomputed by test_figures_cli.sh; the install commands of
# API.md by test_install_cli.sh; SERVING.md's server session by
# test_serve_cli.sh. Under KVB_TEST_QUICK (make asan) the
# bench commands are left to make test.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$D/tokenizers" ] || [ ! -f "$D/text/pg2600_war_and_peace.txt" ]; then
    skip_case docs_commands "missing $D/tokenizers or War and Peace"
    cli_summary
    exit
fi
DA=$(cd "$D" && pwd)
KA=$(cd "$(dirname "$K")" && pwd)/kvbound
head -c 200000 "$DA/text/pg2600_war_and_peace.txt" > "$T/wp.txt"
for f in "$HERE"/docs/*.md; do
    awk '/^```/ { inb = !inb; next }
         inb && cont { line = line " " $0; if ($0 !~ /\\$/) { print line; cont = 0 } else sub(/\\$/, "", line); next }
         inb && /^(\/usr\/bin\/time [^k]*)?kvbound / { line = $0; if ($0 ~ /\\$/) { sub(/\\$/, "", line); cont = 1 } else print line }' "$f" |
        sed 's/  *#.*$//' | grep -v -E '\b(MODEL|PROMPT|TEXT|VOCAB)\b|\.\.\.|^kvbound serve ' | sed "s#^#$(basename "$f") #"
done > "$T/cmds.txt"
n=0
while IFS= read -r entry; do
    n=$((n + 1))
    doc=${entry%% *}
    cmd=${entry#* }
    if [ -n "${KVB_TEST_QUICK:-}" ]; then # make asan: measuring commands are left to make test
        case "$cmd" in *"kvbound bench"*) continue ;; esac
    fi
    run=$(printf '%s\n' "$cmd" | sed -e "s#\(^\| \)kvbound #\1$KA #" -e "s#\.\./shared/data/text/pg2600_war_and_peace\.txt#$T/wp.txt#g" \
        -e "s#\.\./shared/data#$DA#g" -e 's#--steps [0-9]*#--steps 2#' -e 's#--reps [0-9]*#--reps 1#')
    (cd "$T" && timeout 600 sh -c "$run" > "$T/out$n.txt" 2>&1); rc=$?
    name="docs_${doc%.md}_$(printf '%s' "$cmd" | sed 's#^/usr/bin/time [^k]*##' | awk '{print $2}')_$n"
    if [ $rc -eq 0 ]; then ok "$name"; else ko "$name" "exit $rc: $cmd :: $(tail -n 2 "$T/out$n.txt" | tr '\n' ' ')"; fi
done < "$T/cmds.txt"
if [ "$n" -ge 4 ]; then ok docs_commands_found; else ko docs_commands_found "only $n commands in docs/*.md code blocks"; fi
cli_summary
