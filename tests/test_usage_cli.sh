#!/bin/sh
# test_usage_cli.sh BUILD_DIR — the command line as a newcomer meets it
# (issue 32, "the newcomer list"): every value option that a command's
# --help shows, given last with no value, "needs a value", and an unknown
# option anywhere is called unknown; chat takes llama.cpp's flags (-c,
# sampling, -f, -sys) and refuses a turn that does not fit the context
# without ending the conversation, naming only flags it has; run -n -1 goes
# to end-of-sequence or the context; -f drops one trailing newline; chat on
# a terminal (a pty) edits lines, recalls them, and Ctrl-C stops an answer.
. "$(dirname "$0")/cli_lib.sh"
G="$D/models/stories260K/stories260K.llamacpp.gguf"

# every command: "--bogus" last is an unknown option; each option its --help names is taken, and each
# value option from its --help, last, needs a value
# (a kvbound built without the server's libraries has no serve options to check: its serve only says
# what to install, so serve is left out there, and said so, as on a fresh Debian with gcc, cmake, make)
bad=""
nflags=0
serve_cmd=serve
if "$K" serve --bogus 2>&1 | grep -q 'built without the server'; then
    serve_cmd=""
    sk unknown_option_serve "this kvbound was built without the server (libmicrohttpd, cJSON, SQLite): no serve options to check"
fi
for c in run chat $serve_cmd ppl sweep needle ruler mem tokenize template info convert mkmodel lab cold policies \
         bench:cache bench:decode bench:prefill bench:stream bench:tokenize bench:batch bench:serve-memory; do
    cmd=$(echo "$c" | tr ':' ' ')
    # shellcheck disable=SC2086
    "$K" $cmd --bogus > /dev/null 2> "$T/u.txt"; r=$?
    [ $r -eq 2 ] && grep -q "unknown option '--bogus'" "$T/u.txt" || bad="$bad [$cmd --bogus: rc $r $(head -n 1 "$T/u.txt")]"
    "$K" $cmd --bogus -t 1 > /dev/null 2> "$T/u.txt"; r=$?
    [ $r -eq 2 ] && grep -q "unknown option '--bogus'" "$T/u.txt" || bad="$bad [$cmd --bogus -t 1: rc $r $(head -n 1 "$T/u.txt")]"
    "$K" $cmd --help > "$T/h.txt" 2>&1
    # every option --help names is one the command takes (cold's help names run's --recall --cold-dir)
    grep -oE "(^|[][ ,(/|])(-[a-zA-Z]+|--[a-z][a-z0-9-]+)" "$T/h.txt" | sed -E 's/^[][ ,(/|]*//' | sort -u > "$T/all.txt"
    while IFS= read -r f; do
        case "$cmd $f" in "cold --recall"|"cold --cold-dir") continue ;; esac
        # (X --bogus-end: the line is refused before any work whatever $f is)
        "$K" $cmd "$f" X --bogus-end < /dev/null > /dev/null 2> "$T/u.txt"
        ! grep -q -F "unknown option '$f'" "$T/u.txt" || bad="$bad [$cmd --help names $f: $(head -n 1 "$T/u.txt")]"
    done < "$T/all.txt"
    grep -oE "(^|[ ,[(])(-[a-zA-Z]+|--[a-z][a-z0-9-]+) [A-Z][A-Z_]*" "$T/h.txt" | sed -E 's/^[ ,[(]*//; s/ .*//' | sort -u > "$T/flags.txt"
    while IFS= read -r f; do
        nflags=$((nflags + 1))
        "$K" $cmd "$f" > /dev/null 2> "$T/u.txt"; r=$?
        [ $r -eq 2 ] && grep -q -- "$f needs a value" "$T/u.txt" || bad="$bad [$cmd $f: rc $r $(head -n 1 "$T/u.txt")]"
    done < "$T/flags.txt"
done
if [ -z "$bad" ] && [ $nflags -gt 250 ]; then ok unknown_option_or_missing_value_named
else ko unknown_option_or_missing_value_named "$nflags flags;$bad"; fi

# kvbound help lists every command main.c runs and every benchmark bench.c runs
SRC=$(cd "$(dirname "$0")/.." && pwd)/tools/kvbound
"$K" help > "$T/help.txt" 2>&1
miss=""
for c in $(grep -o 'strcmp(cmd, "[a-z-]*")' "$SRC/main.c" | sed 's/.*, "//; s/")//'); do
    case $c in help|-*) continue ;; esac
    grep -q "^  $c " "$T/help.txt" || miss="$miss $c"
done
nb=0
for b in $(grep -o 'strcmp(argv\[1\], "[a-z-]*")' "$SRC/bench.c" | sed 's/.*, "//; s/")//'); do
    case $b in -*) continue ;; esac
    nb=$((nb + 1))
    grep -q "^  bench $b " "$T/help.txt" || miss="$miss bench:$b"
done
if [ -z "$miss" ] && [ $nb -ge 7 ]; then ok help_lists_every_command
else ko help_lists_every_command "missing from kvbound help:$miss ($nb benchmarks)"; fi
# bench stream --help names every key of its JSON and the checkpoints the code uses
"$K" bench stream --help > "$T/bs.txt" 2>&1
keys=$(grep -o '\\"[a-z0-9_]*\\":' "$SRC/bench_stream.c" | tr -d '\\":' | sort -u) # its file prints that JSON only
miss=""
for k in $keys; do grep -q "$k" "$T/bs.txt" || miss="$miss $k"; done
if [ -z "$miss" ] && [ "$(echo "$keys" | wc -w)" -ge 10 ] &&
   grep -q 'const int64_t cps\[4\] = {1000, 10000, 100000, 1000000};' "$SRC/bench_stream.c" &&
   grep -q '1,000, 10,000 and' "$T/bs.txt" && grep -q '1,000,000 with --long' "$T/bs.txt" &&
   grep -q 'bench stream .*1,000, 10,000 and 100,000 tokens' "$T/help.txt" && grep -q 'threads (default 1)' "$T/bs.txt"; then
    ok bench_stream_help_matches_its_output
else ko bench_stream_help_matches_its_output "keys not in --help:$miss; $(head -n 3 "$T/bs.txt")"; fi

# README's table of defaults is what each --help and Python's signature say
ROOT=$(cd "$(dirname "$0")/.." && pwd)
dflt() { # dflt CMD FLAG-LINE-PATTERN: the default on that line of CMD --help
    # shellcheck disable=SC2086
    "$K" $1 --help 2>/dev/null | grep -E -- "$2" | head -n 1 | sed -E 's/.*\(default:? ([^;,)]*).*/\1/'
}
row() { # row LABEL RUN CHAT SERVE PY: the table's line
    printf '| %s | %s | %s | %s | %s |\n' "$@"
}
have_serve=0
"$K" serve --help > /dev/null 2>&1 && have_serve=1
sv() { if [ $have_serve -eq 1 ]; then dflt serve "$1"; else echo "@"; fi; }
pydef=$(grep -A1 'def generate(self, prompt, n_tokens' "$ROOT/python/kvbound/__init__.py" | tr -d '\n ')
pyctx=$(grep 'def context(self' "$ROOT/python/kvbound/__init__.py" | tr -d ' ')
pyv() { printf '%s' "$pydef" | sed -E "s/.*[(,]$1=\"?([^,\")]*).*/\1/"; }
sampler_temp=$(dflt run '^  --temp ')  # serve: a request without temperature gets the library's sampler default, as run
{
    row temperature "$(dflt run '^  --temp ')" "$(dflt chat '^  --temp ')" "$([ $have_serve -eq 1 ] && echo "$sampler_temp" || echo @)" "$(pyv temp)"
    row threads "$(dflt run '^  -t, --threads')" "$(dflt chat '^  -t, --threads')" "$(sv '^  -t, --threads' | sed 's/^the cores$/the cores/')" "$(pyv threads)"
    row policy "$(dflt run '^  --policy ' | cut -d' ' -f1)" "$(dflt chat '^  --policy ' | cut -d' ' -f1)" "$(sv '^  --policy ' | cut -d' ' -f1)" "$(pyv policy)"
    row budget "$(dflt run '^  --budget N')" "$(dflt chat '^  --budget N')" "$(sv '^  --budget N')" "$(pyv budget)"
    row 'KV dtype' "$(dflt run '^  --kv-dtype T')" "$(dflt chat '^  --kv-dtype T')" "$(sv '^  --kv-dtype T')" "$(printf '%s' "$pyctx" | sed -E 's/.*kv_dtype="([^"]*)".*/\1/')"
    row 'tokens to generate' "$(dflt run '^  -n, --n-predict' | cut -d' ' -f1)" "$(dflt chat '^  -n, --n-predict' | cut -d' ' -f1)" "$(sv '^  --default-max-tokens')" '(required)'
} > "$T/rows.txt"
miss=""
while IFS= read -r r; do
    pat=$(printf '%s' "$r" | sed 's/[].*^$[]/\\&/g; s/@/[^|]*/g')
    [ -n "$pat" ] && grep -q "^$pat\$" "$ROOT/README.md" || miss="$miss [$r]"
done < "$T/rows.txt"
if [ -z "$miss" ] && [ "$(wc -l < "$T/rows.txt")" -eq 6 ] && ! grep -q '||' "$T/rows.txt" && ! grep -q '|  |' "$T/rows.txt"; then ok readme_defaults_table_true
else ko readme_defaults_table_true "rows the README lacks (from --help):$miss"; fi

# tokenize --chat formats as chat does: the model's template (here written into
# copies of the shared vocabularies, which have none) and its default system message
le64() { n=$1; k=0; while [ $k -lt 8 ]; do printf "\\$(printf '%03o' $((n % 256)))"; n=$((n / 256)); k=$((k + 1)); done; }
gguf_add_str() { # gguf_add_str IN KEY VALUE OUT: IN with one more string key, first after the header
    nkv=$(od -An -t u8 -j 16 -N 8 "$1" | tr -d ' ')
    { head -c 16 "$1"; le64 $((nkv + 1)); le64 ${#2}; printf '%s' "$2"; printf '\010\000\000\000'
      le64 "$(printf '%s' "$3" | wc -c)"; printf '%s' "$3"; tail -c +25 "$1"; } > "$4"
}
V3="$D/tokenizers/llama3/llama3-8b-instruct.vocab.gguf"
VQ="$D/tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf"
if [ -f "$V3" ] && [ -f "$VQ" ]; then
    gguf_add_str "$V3" tokenizer.chat_template "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}{{ '<|eot_id|>' }}" "$T/l3.gguf"
    qt="{% if messages[0]['role'] != 'system' %}<|im_start|>system
You are Qwen, a test.<|im_end|>
{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}{% endfor %}"
    gguf_add_str "$VQ" tokenizer.chat_template "$qt" "$T/qw.gguf"
    a=$("$K" tokenize -m "$T/l3.gguf" --chat user:Hi --ids 2>&1)
    b=$("$K" tokenize -m "$T/l3.gguf" --chat user:Hi --ids --template llama3 2>&1)
    c=$("$K" tokenize -m "$T/qw.gguf" --chat user:Hi --ids 2>&1)
    printf '<|im_start|>system\nYou are Qwen, a test.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n' > "$T/qw.txt"
    d=$("$K" tokenize -m "$VQ" --ids -f "$T/qw.txt" 2>&1)
    e=$("$K" tokenize -m "$T/qw.gguf" --chat system:Brief --chat user:Hi 2>&1)
    if [ "$a" = "$b" ] && [ "$a" = "[128000, 128006, 882, 128007, 271, 13347, 128009, 128006, 78191, 128007, 271]" ] &&
       [ "$c" = "$d" ] && [ -n "$c" ] && ! printf '%s' "$e" | grep -q Qwen; then ok tokenize_chat_uses_the_model_template
    else ko tokenize_chat_uses_the_model_template "$a / $b / $c / $d"; fi
else skip_case tokenize_chat_uses_the_model_template "missing $V3 or $VQ"; fi

# progress off a terminal: whole lines, no \r; convert/mkmodel -o checked before any work
"$K" mkmodel --shape tiny --type q8_0 -o "$T/tiny.gguf" 2> "$T/pg.err"; r1=$?
"$K" mkmodel --shape tiny --type q8_0 -o "$T/nodir/tiny.gguf" 2> "$T/pg2.err"; r2=$?
"$K" mkmodel --shape tiny --type q8_0 -o "$T" 2> "$T/pg3.err"; r3=$?
if [ $r1 -eq 0 ] && ! grep -q "$(printf '\r')" "$T/pg.err" && [ "$(tail -c 1 "$T/pg.err" | od -An -c | tr -d ' ')" = '\n' ] &&
   [ "$(grep -c '^kvbound: writing [0-9]*/[0-9]*$' "$T/pg.err")" -ge 2 ] &&
   [ $r2 -eq 1 ] && grep -q "cannot use directory '$T/nodir'" "$T/pg2.err" && ! grep -q writing "$T/pg2.err" &&
   [ $r3 -eq 1 ] && grep -q "'$T' is a directory" "$T/pg3.err" && ! grep -q writing "$T/pg3.err"; then
    ok progress_lines_and_output_checked_first
else ko progress_lines_and_output_checked_first "rc $r1/$r2/$r3: $(cat -A "$T/pg.err" "$T/pg2.err" "$T/pg3.err" | head -n 4)"; fi
# written paths have one slash after a directory given with a trailing one
"$K" lab --scenario needle --budget 64 --policies streaming --out "$T/lab/" > "$T/lab.txt" 2>&1; r1=$?
if [ $r1 -eq 0 ] && grep -q "^report: $T/lab/report.html$" "$T/lab.txt" && ! grep -q '//' "$T/lab.txt"; then ok no_doubled_slashes
else ko no_doubled_slashes "rc $r1: $(tail -n 2 "$T/lab.txt")"; fi
# the server's default session store (./kvbound-sessions) is ignored by git
if command -v git > /dev/null && git -C "$ROOT" rev-parse --git-dir > /dev/null 2>&1; then
    if git -C "$ROOT" check-ignore -q kvbound-sessions/sessions.sqlite; then ok sessions_dir_git_ignored
    else ko sessions_dir_git_ignored "git does not ignore kvbound-sessions/"; fi
elif grep -q '^kvbound-sessions/\?$' "$ROOT/.gitignore"; then ok sessions_dir_git_ignored
else ko sessions_dir_git_ignored "no kvbound-sessions line in .gitignore"; fi

if [ ! -f "$G" ]; then
    skip_case usage_with_a_model "missing $G"
    cli_summary
    exit
fi

# chat, policy full: a turn that does not fit is refused, the conversation goes on, only chat's own flags are named
long="Once upon a time there was a big dog and a cat and a bird that lived in a house near the park with a tree."
printf '%s\n/stats\nHi\n' "$long" | "$K" chat -m "$G" --policy full -c 20 --temp 0 -n 4 > "$T/cf.txt" 2> "$T/cf.err"; r=$?
printf 'Hi\n' | "$K" chat -m "$G" --policy full -c 20 --temp 0 -n 4 > "$T/cf2.txt" 2> /dev/null
if [ $r -eq 1 ] && grep -q 'this turn is not read: its [0-9]* tokens do not fit the context (0 of 20 used' "$T/cf.err" &&
   grep -q 'a larger -c' "$T/cf.err" && ! grep -q -- '--ctx' "$T/cf.err" &&
   grep -q '^\[tokens seen 0,' "$T/cf.txt" && [ "$(grep -v '^\[' "$T/cf.txt")" = "$(cat "$T/cf2.txt")" ] && [ -s "$T/cf2.txt" ]; then
    ok chat_full_refuses_a_turn_and_goes_on
else ko chat_full_refuses_a_turn_and_goes_on "rc $r: $(cat "$T/cf.err" "$T/cf.txt" | head -n 6)"; fi
# an answer that fills the context stops there, said so; the next turn is refused, /reset makes room
printf 'Once upon a time\nThe dog\n/reset\nThe dog\n' | "$K" chat -m "$G" --policy full -c 24 --temp 0 -n -1 > "$T/cc.txt" 2> "$T/cc.err"; r=$?
if [ $r -eq 1 ] && grep -q 'the answer stops here: the context of 24 tokens is full' "$T/cc.err" &&
   [ "$(grep -c 'the answer stops here' "$T/cc.err")" -eq 2 ] && [ "$(grep -c 'this turn is not read' "$T/cc.err")" -eq 1 ] &&
   [ "$(sed -n 2p "$T/cc.txt")" = '[conversation reset]' ] && [ "$(wc -l < "$T/cc.txt")" -eq 3 ]; then
    ok chat_full_answer_cut_then_reset
else ko chat_full_answer_cut_then_reset "rc $r: $(cat "$T/cc.err" "$T/cc.txt" | head -n 8)"; fi

# chat takes llama.cpp's flags: -c, --top-k/--top-p/--min-p/--repeat-penalty (as run), -f, -sys
printf 'Hi\n' | "$K" chat -m "$G" --temp 0.9 --seed 3 --top-k 5 --top-p 0.5 --min-p 0.2 --repeat-penalty 1.3 -n 12 > "$T/s1.txt" 2>/dev/null; r1=$?
printf 'Hi\n' | "$K" chat -m "$G" --temp 0.9 --seed 3 -n 12 > "$T/s2.txt" 2>/dev/null
printf 'Hi\n' | "$K" chat -m "$G" --temp 0.9 --seed 3 --top-k 5 --top-p 0.5 --min-p 0.2 --repeat-penalty 1.3 -n 12 > "$T/s3.txt" 2>/dev/null
"$K" chat -m "$G" --top-p 7 < /dev/null 2> "$T/s4.err"; r4=$?
if [ $r1 -eq 0 ] && [ -s "$T/s1.txt" ] && cmp -s "$T/s1.txt" "$T/s3.txt" && ! cmp -s "$T/s1.txt" "$T/s2.txt" &&
   [ $r4 -eq 2 ] && grep -q -- '--top-p: 7 is out of range' "$T/s4.err"; then ok chat_sampling_flags
else ko chat_sampling_flags "rc $r1/$r4: $(cat "$T/s1.txt" "$T/s2.txt" "$T/s4.err" | head -n 4)"; fi
printf 'Once upon a time\n' > "$T/turn.txt"
"$K" chat -m "$G" -f "$T/turn.txt" -sys "Be kind." --temp 0 -n 8 --show-prompt < /dev/null > "$T/f1.txt" 2> "$T/f1.err"; r1=$?
printf 'Once upon a time\n' | "$K" chat -m "$G" --system-prompt "Be kind." --temp 0 -n 8 --show-prompt > "$T/f2.txt" 2> "$T/f2.err"
printf 'The end\n' | "$K" chat -m "$G" -p "Once upon a time" --system "Be kind." --temp 0 -n 8 > "$T/f3.txt" 2> /dev/null
if [ $r1 -eq 0 ] && [ -s "$T/f1.txt" ] && cmp -s "$T/f1.txt" "$T/f2.txt" && grep -q '^\[prompt: System: Be kind\.$' "$T/f1.err" &&
   grep -q 'User: Once upon a time$' "$T/f1.err" && [ "$(head -n 1 "$T/f3.txt")" = "$(cat "$T/f1.txt")" ] && [ "$(wc -l < "$T/f3.txt")" -eq 2 ]; then
    ok chat_first_turn_from_file_and_system_prompt
else ko chat_first_turn_from_file_and_system_prompt "rc $r1: $(cat "$T/f1.txt" "$T/f2.txt" "$T/f1.err" | head -n 6)"; fi
"$K" chat -m "$G" --policy full -c 64 -n 2 < /dev/null 2> "$T/c1.err"; r1=$?
"$K" chat -m "$G" --policy full -c 256 -n 2 < /dev/null 2> "$T/c2.err"; r2=$?
if [ $r1 -eq 0 ] && grep -q 'policy full (context 64)' "$T/c1.err" && [ $r2 -eq 0 ] && grep -q 'beyond the model.s trained length 128' "$T/c2.err"; then
    ok chat_ctx_size
else ko chat_ctx_size "rc $r1/$r2: $(cat "$T/c1.err" "$T/c2.err")"; fi

# warnings: a --budget past the trained length (128 here) only when --budget was given; sweep's full baseline past it
"$K" chat -m "$G" -n 2 < /dev/null 2> "$T/w1.err"; r1=$?
"$K" chat -m "$G" -n 2 --budget 512 < /dev/null 2> "$T/w2.err"
head -c 4000 "$D/text/tinystories_validation_head.txt" > "$T/book.txt"
"$K" sweep -m "$G" -f "$T/book.txt" --policies streaming --budgets 64 --max-tokens 200 --out "$T/sw" > /dev/null 2> "$T/w3.err"; r3=$?
"$K" sweep -m "$G" -f "$T/book.txt" --policies streaming --budgets 64 --max-tokens 100 --out "$T/sw2" > /dev/null 2> "$T/w4.err"; r4=$?
if [ $r1 -eq 0 ] && ! grep -q 'trained length' "$T/w1.err" && grep -q -- '--budget 512 exceeds the model.s trained length 128' "$T/w2.err" &&
   [ $r3 -eq 0 ] && grep -q 'the full baseline runs 200 tokens, past the model.s trained length 128' "$T/w3.err" &&
   [ $r4 -eq 0 ] && ! grep -q 'trained length' "$T/w4.err"; then ok trained_length_warnings
else ko trained_length_warnings "rc $r1/$r3/$r4: $(cat "$T/w1.err" "$T/w3.err" "$T/w4.err" | head -n 6)"; fi

"$K" needle -m "$G" --lengths 200 --depths 0.5 --policy streaming --budget 64 --out "$T/nd/" > "$T/nd.txt" 2>&1; r1=$?
if [ $r1 -eq 0 ] && grep -q "^needle: $T/nd/needle.json, $T/nd/needle.md, $T/nd/needle.svg$" "$T/nd.txt"; then ok needle_paths_one_slash
else ko needle_paths_one_slash "rc $r1: $(tail -n 2 "$T/nd.txt")"; fi

# run -n -1: until end-of-sequence (here after 431 tokens), or the context (llama.cpp's meaning)
"$K" run -m "$G" -p "The end" -n -1 --temp 0 --policy streaming --budget 64 > /dev/null 2> "$T/n1.err"; r1=$?
"$K" run -m "$G" -p "Once upon a time" -n -1 --temp 0 -c 300 --ignore-eos > /dev/null 2> "$T/n2.err"; r2=$?
"$K" run -m "$G" -p "Once upon a time" -n -2 2> "$T/n3.err"; r3=$?
if [ $r1 -eq 0 ] && grep -q '(431 tokens), .*stopped at end of sequence' "$T/n1.err" &&
   [ $r2 -eq 0 ] && grep -q '(296 tokens), .*stopped at the context limit' "$T/n2.err" &&
   [ $r3 -eq 2 ] && grep -q -- '-n: -2 is out of range -1' "$T/n3.err"; then ok run_n_minus_one_unbounded
else ko run_n_minus_one_unbounded "rc $r1/$r2/$r3: $(tail -n 1 "$T/n1.err") / $(tail -n 1 "$T/n2.err") / $(cat "$T/n3.err")"; fi

# -f FILE drops one trailing newline, as llama.cpp does: the same text as -p without it
printf 'Once upon a time\n' > "$T/p1.txt"
printf 'Once upon a time\n\n' > "$T/p2.txt"
"$K" run -m "$G" -f "$T/p1.txt" -n 20 --temp 0 > "$T/o1.txt" 2> "$T/o1.err"
"$K" run -m "$G" -p "Once upon a time" -n 20 --temp 0 > "$T/o2.txt" 2> /dev/null
"$K" run -m "$G" -f "$T/p2.txt" -n 20 --temp 0 > "$T/o3.txt" 2> "$T/o3.err"
if [ -s "$T/o1.txt" ] && cmp -s "$T/o1.txt" "$T/o2.txt" && grep -q 'prompt 5 tokens' "$T/o1.err" &&
   head -c 17 "$T/o3.txt" | cmp -s - "$T/p1.txt" && grep -q 'prompt 6 tokens' "$T/o3.err"; then ok prompt_file_drops_one_trailing_newline
else ko prompt_file_drops_one_trailing_newline "$(head -c 80 "$T/o1.txt") / $(tail -n 1 "$T/o1.err") / $(tail -n 1 "$T/o3.err")"; fi
# chat on a terminal (a pty from tests/pty_run.py): the line editor (arrows, home/end, backspace,
# Ctrl-A/E/U/K, up/down history), and Ctrl-C during an answer stops the answer, not the chat (issue 47, item 14)
if need_tool chat_line_editor python3 KVB_REQUIRE_PYTHON "Debian python3"; then
    PTY="python3 $(dirname "$0")/pty_run.py"
    cat > "$T/keys.txt" <<'EOF'
b"helo\x1b[D\x1b[Dl\r"
b"\x1b[A\r"
b"xyz\x01ab\x05c\r"
b"junk\x15ok\r"
b"abcdef\x01\x1b[C\x1b[C\x0b\r"
b"abx\x7fc\x1b[H>\x1b[F<\r"
b"typed\x1b[A\x1b[A\x1b[B\x1b[B!\r"
b"/quit\r"
EOF
    $PTY --keys "$T/keys.txt" --timeout 60 "$K" chat -m "$G" -n 4 --temp 0 -t 1 --show-prompt > "$T/le.txt" 2>&1; r=$?
    got=$(tr -d '\r' < "$T/le.txt" | grep -a -o 'User: .*' | sed 's/^User: //' | tr '\n' '|')
    if [ $r -eq 0 ] && [ "$got" = 'hello|hello|abxyzc|ok|ab|>abc<|typed!|' ]; then ok chat_line_editor
    else ko chat_line_editor "rc $r, lines read: $got"; fi
    if [ -f "$VQ" ]; then
        # a random model with Qwen's 151k vocabulary: it almost never ends an answer by itself
        "$K" mkmodel --shape tiny --type q8_0 --vocab "$VQ" -o "$T/tq.gguf" 2> /dev/null
        printf '%s\n' 'b"go on\r"' '(1.0, b"\x03")' 'b"/stats\r"' 'b"/quit\r"' > "$T/keys2.txt"
        $PTY --keys "$T/keys2.txt" --timeout 60 "$K" chat -m "$T/tq.gguf" -n 1000000 -t 1 > "$T/cc.txt" 2>&1; r=$?
        if [ $r -eq 0 ] && grep -a -q '^\[answer stopped (Ctrl-C); the chat goes on\]' "$T/cc.txt" && grep -a -q '^\[tokens seen [0-9]*,' "$T/cc.txt"
        then ok chat_ctrl_c_stops_the_answer
        else ko chat_ctrl_c_stops_the_answer "rc $r: $(tr -d '\r' < "$T/cc.txt" | tail -n 3 | cut -c1-200)"; fi
    else skip_case chat_ctrl_c_stops_the_answer "missing $VQ"; fi
fi
cli_summary
