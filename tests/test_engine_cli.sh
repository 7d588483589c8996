#!/bin/sh
# test_engine_cli.sh BUILD_DIR — the engine as users run it, on the shared
# models: `run` prints exactly prompt + generated text (the README's greedy
# reference) with stats on stderr; a bounded policy runs far past the trained
# context in constant KV memory; `full` stops at the context limit with a
# clear message; `chat` works through a pipe with /save and /load; `convert`
# and `mkmodel` write models that load; --no-mmap gives the same text; --keep pins
# the first tokens under every policy (run, chat, mem); bad
# flags are named.
. "$(dirname "$0")/cli_lib.sh"
if [ ! -f "$D/models/stories260K/stories260K.llamacpp.gguf" ]; then
    skip_case shared_data "missing $D/models/stories260K (every case of this script needs it)"
    cli_summary
    exit
fi
G="$D/models/stories260K/stories260K.llamacpp.gguf"
REF='Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.
Lily'

"$K" run -m "$G" -p "Once upon a time" -n 60 --temp 0 > "$T/out.txt" 2> "$T/err.txt"
printf '%s\n' "$REF" > "$T/want.txt"
if cmp -s "$T/out.txt" "$T/want.txt" && grep -q 'prefill .* tok/s, decode .* tok/s' "$T/err.txt"; then ok run_greedy_stdout_exact
else ko run_greedy_stdout_exact "$(head -c 200 "$T/out.txt")"; fi

"$K" run -m "$D/models/stories260K/stories260K.bin" -z "$D/models/stories260K/tok512.bin" -p "Once upon a time" -n 60 --temp 0 -t 1 > "$T/bin.txt" 2>/dev/null
if cmp -s "$T/bin.txt" "$T/want.txt"; then ok run_llama2c_bin; else ko run_llama2c_bin "$(head -c 120 "$T/bin.txt")"; fi

# --no-mmap: the weights read into memory give the same text; a missing file is named
"$K" run -m "$G" -p "Once upon a time" -n 60 --temp 0 --no-mmap > "$T/nm.txt" 2>/dev/null
"$K" run -m "$T/missing.gguf" -p "Once" --no-mmap > /dev/null 2> "$T/nme.txt"; rn=$?
if cmp -s "$T/nm.txt" "$T/want.txt" && [ $rn -eq 1 ] && grep -q "cannot open '$T/missing.gguf'" "$T/nme.txt"; then ok run_no_mmap_same_text
else ko run_no_mmap_same_text "exit $rn: $(head -c 120 "$T/nm.txt") $(head -n 1 "$T/nme.txt")"; fi

# seeded sampling: same seed and threads, same text
"$K" run -m "$G" -p "Once" -n 40 --temp 0.9 --seed 7 -t 2 > "$T/s1.txt" 2>/dev/null
"$K" run -m "$G" -p "Once" -n 40 --temp 0.9 --seed 7 -t 2 > "$T/s2.txt" 2>/dev/null
"$K" run -m "$G" -p "Once" -n 40 --temp 0.9 --seed 8 -t 2 > "$T/s3.txt" 2>/dev/null
if cmp -s "$T/s1.txt" "$T/s2.txt" && ! cmp -s "$T/s1.txt" "$T/s3.txt"; then ok run_seed_reproducible; else ko run_seed_reproducible "seeded runs differ or seeds agree"; fi

# bounded: 3000 tokens on a model trained for 128 positions (llama.cpp's GGUF key), constant KV
"$K" run -m "$G" -p "Once upon a time" -n 3000 --ignore-eos --policy streaming --budget 64 > /dev/null 2> "$T/b.txt"
if grep -q '(3000 tokens), KV \([0-9.]*\) MB (peak \1 MB), policy streaming' "$T/b.txt"; then ok run_bounded_past_context
else ko run_bounded_past_context "$(tail -n 1 "$T/b.txt")"; fi

# --keep N: the first N positions pinned under every bounded policy, on top of the budget (the
# longest stream holds keep + budget); --keep -1 pins the whole prompt; a bad value names the flag
P30='Once upon a time there was a little girl named Lily. She loved to play outside in the park'
bad=""
for p in window streaming h2o tova scissorhands snapkv pyramidkv adakv knorm block-h2o lminfinite keydiff expected-attention kvzip; do
    "$K" run -m "$G" -p "$P30" -n 100 --temp 0 --ignore-eos --policy $p --budget 32 --keep 20 > /dev/null 2> "$T/k.txt"
    grep -q 'keep 20: positions 0..19 pinned in every stream (20 tokens)' "$T/k.txt" || bad="$bad $p: $(tail -n 1 "$T/k.txt")"
done
"$K" run -m "$G" -p "$P30" -n 100 --temp 0 --ignore-eos --policy streaming --budget 32 --keep 20 > /dev/null 2> "$T/k1.txt"
"$K" run -m "$G" -p "Once upon a time there was a little girl" -n 100 --temp 0 --ignore-eos --policy h2o --budget 32 --keep -1 > /dev/null 2> "$T/k2.txt"
"$K" run -m "$G" -p x --keep -2 > /dev/null 2> "$T/k3.txt"; rk=$?
if [ -z "$bad" ] && grep -q 'the longest stream holds 52 tokens' "$T/k1.txt" &&
   grep -q 'keep 12: positions 0..11 pinned in every stream (12 tokens), the longest stream holds 44 tokens' "$T/k2.txt" &&
   [ $rk -eq 2 ] && grep -q -- '--keep: -2 is out of range' "$T/k3.txt"
then ok run_keep_pins_the_span_under_every_policy
else ko run_keep_pins_the_span_under_every_policy "$bad $(tail -n 1 "$T/k1.txt") $(tail -n 1 "$T/k2.txt") $(cat "$T/k3.txt")"; fi
# chat --keep -1: the system message's span (the first turn's tokens before the user's words) stays
printf 'Tell me a story about a dog and a cat.\nMore please.\n/stats\n/quit\n' |
    "$K" chat -m "$G" --temp 0 -n 60 --budget 32 -sys "You are a storyteller who tells short stories." --keep -1 > "$T/kc.txt" 2>&1
if grep -q 'longest 74)' "$T/kc.txt" && grep -q '^\[keep 42: positions 0..41 pinned in every stream\]' "$T/kc.txt"
then ok chat_keep_minus_one_pins_the_system_message
else ko chat_keep_minus_one_pins_the_system_message "$(tail -n 3 "$T/kc.txt")"; fi

# mem --keep: a stream holds min(budget + keep, tokens): 4 layers x 2 KV heads x (64 + 160) tokens x 256 bytes
"$K" mem --layers 4 --kv-heads 2 --head-dim 64 --ctx 4096 --policy h2o --budget 64 --keep 160 --block-size 16 --json > "$T/m1.txt" 2>&1
"$K" mem --layers 4 --kv-heads 2 --head-dim 64 --ctx 4096 --policy h2o --budget 64 --block-size 16 --json > "$T/m2.txt" 2>&1
"$K" mem --layers 4 --kv-heads 2 --head-dim 64 --ctx 4096 --keep 16 > /dev/null 2> "$T/m3.txt"; rm3=$?
if grep -q '"keep":160,.*"bounded_bytes":458752,' "$T/m1.txt" && grep -q '"bounded_bytes":131072,' "$T/m2.txt" && ! grep -q keep "$T/m2.txt" &&
   [ $rm3 -eq 2 ] && grep -q -- '--keep needs a bounded --policy' "$T/m3.txt"
then ok mem_keep_counts_the_pinned_span
else ko mem_keep_counts_the_pinned_span "$(cat "$T/m1.txt" "$T/m2.txt" "$T/m3.txt" | head -c 400)"; fi
# mem counts expected-attention's query statistics: 4 layers x 2 KV heads x (4 + 1) blocks x (64 + 64^2) floats on top
# of the 64-token budget's 131072 bytes; without the query heads (--heads or -m) it is refused by name
"$K" mem --layers 4 --kv-heads 2 --heads 8 --head-dim 64 --ctx 4096 --policy expected-attention --budget 64 --block-size 16 --json > "$T/mq1.txt" 2>&1
"$K" mem --layers 4 --kv-heads 2 --head-dim 64 --ctx 4096 --policy expected-attention --budget 64 > /dev/null 2> "$T/mq2.txt"; rq2=$?
if grep -q '"bounded_bytes":796672,.*"query_stats_bytes":665600}' "$T/mq1.txt" && [ $rq2 -eq 2 ] && grep -q -- 'expected-attention keeps query statistics.*--heads' "$T/mq2.txt"
then ok mem_counts_query_statistics
else ko mem_counts_query_statistics "$(cat "$T/mq1.txt" "$T/mq2.txt" | head -c 400)"; fi

# full: stops at the context limit with a clear message, exit 0
"$K" run -m "$G" -p "Once upon a time" -n 500 --ignore-eos --policy full > /dev/null 2> "$T/f.txt"; rf=$?
if [ $rf -eq 0 ] && grep -q 'context full: 128 + 1 tokens exceed n_ctx 128' "$T/f.txt"; then ok run_full_stops_at_context
else ko run_full_stops_at_context "exit $rf: $(head -n 2 "$T/f.txt")"; fi
"$K" run -m "$G" -p "x" -n 1 --ctx 256 > /dev/null 2> "$T/w.txt"
if grep -q 'beyond the model' "$T/w.txt"; then ok run_warns_past_trained_length; else ko run_warns_past_trained_length "$(head -n 1 "$T/w.txt")"; fi

# errors name the flag or file
"$K" run -m "$G" -p x --top-p 7 2> "$T/e1.txt"; r1=$?
"$K" run -m /nonexistent.gguf -p x 2> "$T/e2.txt"; r2=$?
"$K" run -m "$D/models/stories260K/stories260K.bin" -p x 2> "$T/e3.txt"; r3=$?
if [ $r1 -eq 2 ] && grep -q -- '--top-p' "$T/e1.txt" && [ $r2 -eq 1 ] && grep -q nonexistent "$T/e2.txt" && [ $r3 -eq 1 ] && grep -q tokenizer "$T/e3.txt"
then ok run_errors_named; else ko run_errors_named "$(cat "$T/e1.txt" "$T/e2.txt" "$T/e3.txt" | head -n 3)"; fi

# chat through a pipe, with save and load
printf 'Tell me a story.\n/save %s\n/reset\n/load %s\n/stats\n/quit\n' "$T/c.kvb" "$T/c.kvb" |
    "$K" chat -m "$G" --temp 0 -n 30 --budget 64 > "$T/chat.txt" 2>&1
if grep -q "^\[saved $T/c.kvb\]" "$T/chat.txt" && grep -q "^\[loaded $T/c.kvb: [0-9]* tokens seen\]" "$T/chat.txt" &&
   grep -q '^\[tokens seen' "$T/chat.txt" && [ "$(sed -n 2p "$T/chat.txt" | wc -c)" -gt 20 ]; then ok chat_pipe_save_load
else ko chat_pipe_save_load "$(head -n 5 "$T/chat.txt")"; fi

# convert and mkmodel
"$K" convert -m "$D/models/stories260K/stories260K.bin" -z "$D/models/stories260K/tok512.bin" -o "$T/c.gguf" --type f32 2>/dev/null &&
    "$K" run -m "$T/c.gguf" -p "Once upon a time" -n 60 --temp 0 > "$T/conv.txt" 2>/dev/null
if cmp -s "$T/conv.txt" "$T/want.txt"; then ok convert_roundtrip; else ko convert_roundtrip "$(head -c 120 "$T/conv.txt")"; fi
"$K" mkmodel --shape tiny --type q4_k -o "$T/t.gguf" 2>/dev/null && "$K" info -m "$T/t.gguf" > "$T/info.txt" 2>&1
if grep -q 'architecture  llama' "$T/info.txt" && grep -q 'blk.0.attn_q.weight *q4_K' "$T/info.txt" && grep -q 'KV per token  1024 bytes' "$T/info.txt"
then ok mkmodel_and_info; else ko mkmodel_and_info "$(head -n 4 "$T/info.txt")"; fi
"$K" mkmodel --shape nope -o "$T/x.gguf" 2> "$T/e4.txt"; r4=$?
if [ $r4 -eq 2 ] && grep -q 'tinyllama-1.1b' "$T/e4.txt"; then ok mkmodel_unknown_shape; else ko mkmodel_unknown_shape "$(cat "$T/e4.txt")"; fi

# chat templates: the second turn closes the cut answer the template's way
printf 'Once upon a time\nThe cat\n' | "$K" chat -m "$G" --temp 0 -n 5 --template chatml --show-prompt 2> "$T/cp.txt" > /dev/null
if grep -q '^\[prompt: <|im_start|>user$' "$T/cp.txt" && grep -q '^\[prompt: <|im_end|>$' "$T/cp.txt" &&
   [ "$(grep -c '^<|im_start|>assistant$' "$T/cp.txt")" -eq 2 ]; then ok chat_template_turns
else ko chat_template_turns "$(head -n 8 "$T/cp.txt")"; fi
# a template the vocabulary has no tokens for is said, not silent; plain
# (no template) keeps --system as a "System:" line; tokenize takes plain too
if grep -q "warning: --template chatml: the vocabulary has no <|im_start|> token" "$T/cp.txt"; then ok chat_template_tokens_missing_warns
else ko chat_template_tokens_missing_warns "$(head -n 3 "$T/cp.txt")"; fi
printf 'Hi\n' | "$K" chat -m "$G" --temp 0 -n 3 --system "Be kind." --show-prompt 2> "$T/pp.txt" > /dev/null
if grep -q '^\[prompt: System: Be kind\.$' "$T/pp.txt" && grep -q '^User: Hi$' "$T/pp.txt" && grep -q 'template plain' "$T/pp.txt" &&
   ! grep -q 'ignored' "$T/pp.txt"; then ok chat_plain_keeps_system
else ko chat_plain_keeps_system "$(head -n 6 "$T/pp.txt")"; fi
"$K" tokenize -m "$G" --ids --template plain --chat user:Hi --chat assistant:Hello --chat user:Bye > "$T/tp.txt" 2>&1
"$K" tokenize -m "$G" --ids -p "$(printf 'User: Hi\nAssistant: Hello\nUser: Bye\nAssistant:')" > "$T/tq.txt" 2>&1
if [ "$(wc -c < "$T/tp.txt")" -gt 20 ] && cmp -s "$T/tp.txt" "$T/tq.txt"; then ok tokenize_template_plain
else ko tokenize_template_plain "$(head -c 200 "$T/tp.txt")"; fi
"$K" chat -m "$G" --template nope < /dev/null 2> "$T/e5.txt"; r5=$?
if [ $r5 -eq 2 ] && grep -q "'nope' unknown" "$T/e5.txt"; then ok chat_unknown_template; else ko chat_unknown_template "$(cat "$T/e5.txt")"; fi

# tokenize: llama-tokenize's formats, on the shared vocab-only files
V3="$D/tokenizers/llama3/llama3-8b-instruct.vocab.gguf"
if [ -f "$V3" ]; then
    if [ "$("$K" tokenize -m "$V3" -p 'Hello world' --ids)" = "[128000, 9906, 1917]" ] &&
       [ "$("$K" tokenize -m "$V3" -p 'Hello world' --ids --no-bos)" = "[9906, 1917]" ] &&
       [ "$("$K" tokenize -m "$V3" -p '<|eot_id|>' --ids --no-bos)" = "[128009]" ] &&
       [ "$("$K" tokenize -m "$V3" -p '<|eot_id|>' --ids --no-bos --no-parse-special | tr -d '[]' | tr ',' '\n' | wc -l)" -gt 1 ] &&
       "$K" tokenize -m "$V3" -p 'Hello' | grep -q "^  9906 -> 'Hello'$"; then ok tokenize_formats
    else ko tokenize_formats "$("$K" tokenize -m "$V3" -p 'Hello world' 2>&1 | head -3)"; fi
else skip_case tokenize_formats "missing $V3"; fi
# a random-weight model with a real byte-level BPE vocabulary: written, loaded, run
VS="$D/tokenizers/smollm2/smollm2-135m-instruct.vocab.gguf"
if [ -f "$VS" ]; then
    "$K" mkmodel --shape tiny --type q8_0 --vocab "$VS" -o "$T/bpe.gguf" 2>/dev/null
    a=$("$K" tokenize -m "$T/bpe.gguf" -p 'Hello world, 12345 <|im_start|>' --ids 2>&1)
    b=$("$K" tokenize -m "$VS" -p 'Hello world, 12345 <|im_start|>' --ids 2>&1)
    "$K" run -m "$T/bpe.gguf" -p 'Hello world' -n 4 --temp 0 > "$T/bpe.txt" 2>/dev/null; rb=$?
    if [ "$a" = "$b" ] && [ "$a" = "[19556, 905, 28, 216, 33, 34, 35, 36, 37, 216, 1]" ] && [ $rb -eq 0 ] && grep -q '^Hello world' "$T/bpe.txt"
    then ok mkmodel_bpe_vocab_runs; else ko mkmodel_bpe_vocab_runs "$a / $b / rc $rb"; fi
else skip_case mkmodel_bpe_vocab_runs "missing $VS"; fi
"$K" tokenize -m "$G" 2> "$T/e6.txt"; r6=$?
"$K" tokenize -m "$T/nothere.gguf" -p x 2> "$T/e7.txt"; r7=$?
if [ $r6 -eq 2 ] && [ $r7 -eq 1 ] && grep -q 'nothere.gguf' "$T/e7.txt"; then ok tokenize_errors; else ko tokenize_errors "$(cat "$T/e6.txt" "$T/e7.txt")"; fi

# prompt compression on the paths people use (issue: policy fidelity)
"$K" run -m "$G" -p "Once upon a time" --policy adakv --budget 128 -n 20 --temp 0 > /dev/null 2> "$T/ada.txt"
if grep -q 'prompt 5 tokens, compressed prompt 5.0 tokens per stream (min 5, max 5)' "$T/ada.txt"; then ok run_adakv_short_prompt_kept_whole
else ko run_adakv_short_prompt_kept_whole "$(tail -n 1 "$T/ada.txt")"; fi
head -c 3000 "$D/text/tinystories_validation_head.txt" > "$T/long.txt"
"$K" run -m "$G" -f "$T/long.txt" --policy snapkv --budget 64 -n 100 --temp 0 > /dev/null 2> "$T/snap.txt"
"$K" run -m "$G" -f "$T/long.txt" --policy pyramidkv --budget 64 -n 100 --temp 0 > /dev/null 2> "$T/pyr.txt"
if grep -q 'prompt 1499 tokens, compressed prompt 64.0 tokens per stream (min 64, max 64).*KV 0.09 MB (peak 0.96 MB), policy snapkv' "$T/snap.txt" &&
   grep -q 'compressed prompt 63.[0-9] tokens per stream (min 3[0-9], max 9[0-9])' "$T/pyr.txt"; then ok run_snapkv_pyramidkv_report_compressed_prompt
else ko run_snapkv_pyramidkv_report_compressed_prompt "$(tail -n 1 "$T/snap.txt") / $(tail -n 1 "$T/pyr.txt")"; fi
printf 'Tell me a story about a cat and a dog who play in the park.\nAnd then?\n/stats\n' |
    "$K" chat -m "$G" --policy snapkv --budget 16 --decode-budget 8 -n 20 --temp 0 > "$T/sc.txt" 2>&1
n=$(grep -c '^\[compressed prompt: 16.0 tokens per stream (min 16, max 16) of [0-9]* seen\]' "$T/sc.txt")
if [ "$n" -eq 2 ] && grep -q 'longest 24)' "$T/sc.txt"; then ok chat_snapkv_compresses_every_turn
else ko chat_snapkv_compresses_every_turn "$(grep -E 'compressed|tokens seen' "$T/sc.txt" | head -3)"; fi
hb=0
for c in run chat ppl sweep needle; do
    "$K" $c --help > "$T/h.txt" 2>&1
    for f in --decode-budget --prefill-budget --obs-window --pool-kernel --pool --heavy-ratio --recent --history --threshold \
             --pyramid-beta --ada-floor --tova-scope --max-distance; do
        grep -q -- "^  $f " "$T/h.txt" || { echo "  $c --help lacks $f"; hb=1; }
    done
done
"$K" run -m "$G" -p x --policy snapkv --pool mean 2> "$T/e7.txt"; r7=$?
if [ $hb -eq 0 ] && [ $r7 -eq 2 ] && grep -q -- "--pool: 'mean' is not max or avg" "$T/e7.txt" &&
   "$K" policies | grep -q '^lminfinite '; then ok policy_options_everywhere
else ko policy_options_everywhere "$(cat "$T/e7.txt")"; fi
# llama.cpp's habits and the newcomer's errors (issue: library people adopt)
out=$(printf 'Once upon a time' | "$K" run -m "$G" -f - -n 60 -s 0 -c 256 -b 64 -ngl 99 --temp 0 2> "$T/l.txt")
if [ "$out" = "$REF" ] && grep -q -- '-ngl ignored: kvbound runs on the CPU' "$T/l.txt" &&
   grep -q 'stopped at the token limit (-n)' "$T/l.txt"; then ok run_llamacpp_flags_and_stdin
else ko run_llamacpp_flags_and_stdin "$(head -c 120 "$T/l.txt")"; fi
"$K" run -m "$G" -f "$T" 2> "$T/e8.txt"; r8=$?
"$K" run -m "$G" -p x -f "$T/long.txt" 2> "$T/e9.txt"; r9=$?
"$K" run -m "$G" -f "$D/text/tinystories_validation_head.txt" > "$T/o10.txt" 2> "$T/e10.txt"; r10=$?
"$K" run -m "$0" -p x 2> "$T/e11.txt"; r11=$?
"$K" run -m "$G" -p x --budget 64 -n 1 > /dev/null 2> "$T/e12.txt"
if [ $r8 -eq 1 ] && grep -q 'is a directory' "$T/e8.txt" && [ $r9 -eq 2 ] && grep -q 'not both' "$T/e9.txt" &&
   [ $r10 -eq 1 ] && [ ! -s "$T/o10.txt" ] && grep -q 'more than the context of 128 that policy full keeps' "$T/e10.txt" &&
   [ $r11 -eq 1 ] && grep -q 'is not a GGUF file' "$T/e11.txt" && grep -q -- '--budget has no effect with policy full' "$T/e12.txt"
then ok run_errors_name_the_cause
else ko run_errors_name_the_cause "$(cat "$T/e8.txt" "$T/e9.txt" "$T/e10.txt" "$T/e11.txt" "$T/e12.txt" | head -n 5)"; fi
if [ -f "$V3" ] && "$K" info -m "$V3" > "$T/i.txt" 2>&1 && grep -q 'vocabulary only' "$T/i.txt" && grep -q '128256 tokens' "$T/i.txt"
then ok info_vocab_only
elif [ -f "$V3" ]; then ko info_vocab_only "$(head -n 3 "$T/i.txt")"
else skip_case info_vocab_only "missing $V3"; fi
cli_summary
