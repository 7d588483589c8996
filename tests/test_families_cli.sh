#!/bin/sh
# test_families_cli.sh BUILD_DIR — every model family as users meet it: for
# each family's tiny `mkmodel` shape (q8_0 weights), `info` names the family's
# features, `run` with a bounded policy and q8_0 KV generates, and the same
# greedy text comes from the Python bindings and from `kvbound serve`
# (one completion, then a second turn on a stored session). Gemma's shapes
# (windows of 8 tokens) also print their window in `info` and both kinds of
# layers in `run`'s stats, and `mem` counts the window layers at their width.
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
HERE=$(cd "$(dirname "$0")/.." && pwd)
# python3 compares the texts (and runs the bindings); without it those cases are skipped (failed under KVB_REQUIRE_PYTHON=1)
have_py=0; need_tool families_python python3 KVB_REQUIRE_PYTHON "Debian python3; .ci/run installs it" && have_py=1
have_serve=0; [ $have_py -eq 1 ] && "$K" serve --help > /dev/null 2>&1 && need_tool families_curl curl KVB_REQUIRE_SHARED "Debian curl" && have_serve=1
for spec in "tiny-llama-bias:output/FFN biases" "tiny-qwen3:q/k norms per head" "tiny-granite:scales: embedding 12" \
            "tiny-olmo2:no pre-norms" "tiny-phi3:LongRoPE" "tiny-mistral3:YaRN x4" "tiny-smollm3:1 of 4 layers without RoPE" \
            "tiny-gemma2:attention softcap 5; final softcap 10; window 8 on 2 of 4 layers" "tiny-gemma3:window 8 on 4 of 6 layers" \
            "tiny-qwen3moe:2 of 8 experts per token (softmax, renormalized), expert FFN 128" "tiny-mixtral:2 of 8 experts per token" \
            "tiny-granitemoe:2 of 8 experts per token" "tiny-gpt-oss:(softmax of the top logits), expert FFN 128; clamped SwiGLU; attention sinks" \
            "tiny-granitemoe-shared:expert FFN 256; shared experts of FFN 192" "tiny-qwen2moe:2 of 8 experts per token (softmax), expert FFN 128; gated shared experts of FFN 320" \
            "tiny-deepseek:3 of 8 experts per token (softmax), expert FFN 96; expert weights x1.5; shared experts of FFN 192; the first 1 layer dense" \
            "tiny-olmoe:2 of 8 experts per token (softmax), expert FFN 128; q/k norms over the projection" \
            "tiny-gemma4:3 KV-shared layers; window heads 32 (rotary 32); V norm; PLE 16"; do
    s=${spec%%:*}; feat=${spec#*:}; case_name=$(echo "$s" | tr '-' '_')
    M="$T/$s.gguf"
    "$K" mkmodel --shape "$s" --type q8_0 -o "$M" > /dev/null 2>&1
    "$K" info -m "$M" > "$T/$s.info" 2>&1
    if grep -q "^features .*$feat" "$T/$s.info"; then ok "${case_name}_info_features"
    else ko "${case_name}_info_features" "$(grep -E '^(architecture|features)' "$T/$s.info" | tr '\n' ' ')"; fi
    "$K" run -m "$M" -p "Once upon" -n 24 --temp 0 --policy h2o --budget 16 --kv-dtype q8_0 --ignore-eos > "$T/$s.run" 2> "$T/$s.err"; rr=$?
    if [ $rr -eq 0 ] && [ "$(wc -c < "$T/$s.run")" -gt 10 ] && grep -q "policy h2o" "$T/$s.err"; then ok "${case_name}_run_bounded_q8_0_kv"
    else ko "${case_name}_run_bounded_q8_0_kv" "exit $rr: $(tail -n 1 "$T/$s.err")"; fi
    case $s in tiny-gemma*)
        # the window and both kinds of layers, as info and run's stats line give them (a 24-token run: 3 windows)
        if grep -q "^window        8 tokens on" "$T/$s.info" && grep -q "layers: [0-9]* sliding-window (the model's window: [0-9]* tokens" "$T/$s.err"
        then ok "${case_name}_info_and_run_window_layers"
        else ko "${case_name}_info_and_run_window_layers" "$(grep -E '^window' "$T/$s.info"; grep layers: "$T/$s.err")"; fi ;;
    esac
    "$K" run -m "$M" -p "Once upon" -n 12 --temp 0 --ignore-eos > "$T/$s.greedy" 2>/dev/null
    # make asan (KVB_TEST_QUICK): an instrumented libkvbound cannot be loaded into python3; make test runs this case
    if [ $have_py -eq 1 ] && [ -z "${KVB_TEST_QUICK:-}" ]; then
        BA=$(cd "$B" && pwd)
        # random weights emit invalid UTF-8: both sides compared as Python decodes them (U+FFFD)
        out=$(PYTHONPATH="$HERE/python" KVBOUND_LIBRARY="$BA/libkvbound.so" python3 -c "
import sys, kvbound
m = kvbound.Model(sys.argv[1])
got = 'Once upon' + ''.join(m.generate('Once upon', 12, policy='full', stop_at_eos=False))
want = open(sys.argv[2], 'rb').read().decode('utf-8', 'replace').rstrip('\\n')
print('same' if got == want else 'differ: %r vs %r' % (got, want))" "$M" "$T/$s.greedy" 2>&1)
        if [ "$out" = same ]; then ok "${case_name}_python_same_text"; else ko "${case_name}_python_same_text" "$out"; fi
    fi
    if [ $have_serve -eq 1 ]; then
        start "$s" -m "$M" --sessions "$T/$s.db" --budget 64 -t 1
        body='{"prompt":"Once upon","max_tokens":12,"temperature":0,"ignore_eos":true,"session_id":"f"}'
        curl -s -H 'Content-Type: application/json' -d "$body" "$URL/v1/completions" > "$T/$s.json"
        same=$(python3 -c "
import json, sys
got = json.load(open(sys.argv[1]))['choices'][0]['text']
want = open(sys.argv[2], 'rb').read().decode('utf-8', 'replace').rstrip('\\n')[len('Once upon'):]
print('same' if got == want else 'differ: %r vs %r' % (got, want))" "$T/$s.json" "$T/$s.greedy" 2>&1)
        c2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
             -d '{"prompt":" again","max_tokens":4,"temperature":0,"session_id":"f"}' "$URL/v1/completions")
        if [ "$s" = tiny-gemma4 ]; then
            # /map: a KV-shared layer lists the positions of its source layer (which it attends), and kv_source names it
            curl -s "$URL/v1/sessions/f/map" > "$T/$s.map"
            m=$(python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
src, L = j.get('kv_source'), j['layers']
ok = src is not None and len(src) == len(L) and any(x >= 0 for x in src) and all(
    (L[l] == L[x] and any(L[l])) if x >= 0 else True for l, x in enumerate(src))
print('same' if ok else 'differ: kv_source %r, sizes %r' % (src, [[len(h) for h in l] for l in L]))" "$T/$s.map" 2>&1)
            if [ "$m" = same ]; then ok gemma4_serve_map_kv_shared_layers_list_their_source; else ko gemma4_serve_map_kv_shared_layers_list_their_source "$m"; fi
        fi
        kill -TERM $PID; wait $PID 2>/dev/null
        if [ "$same" = same ] && [ "$c2" = 200 ]; then ok "${case_name}_serve_same_text_and_session"
        else ko "${case_name}_serve_same_text_and_session" "$same; second turn $c2"; fi
    elif [ $have_py -eq 1 ]; then skip_case "${case_name}_serve_same_text_and_session" "kvbound serve is not built (libmicrohttpd-dev libcjson-dev libsqlite3-dev)"; fi
done
# qwen35/qwen35moe (the forward pass is the lead's, in progress: info only): the Gated DeltaNet layers, their state,
# the MTP layer, the KV of the one attention layer in four
for spec in "tiny-qwen35-mtp:gated deltanet 3 of 4; gated attention; MTP layers 1 (not run)" \
            "tiny-qwen35moe:gated deltanet 3 of 4; gated attention; 2 of 8 experts per token (softmax, renormalized), expert FFN 32; gated shared experts of FFN 48"; do
    s=${spec%%:*}; feat=${spec#*:}; case_name=$(echo "$s" | tr '-' '_')
    "$K" mkmodel --shape "$s" --type q8_0 -o "$T/$s.gguf" > /dev/null 2>&1
    "$K" info -m "$T/$s.gguf" > "$T/$s.info" 2>&1
    if grep -q "^features      $feat" "$T/$s.info" &&
       grep -q "^deltanet      3 Gated DeltaNet layers (no KV): 2 key heads, 4 value heads of 16, conv 4 taps; state 16896 bytes a sequence" "$T/$s.info" &&
       grep -q "^KV per token  256 bytes in f16 (2 x 1 attention layers x 2 KV heads x 32 dims x 2 bytes)" "$T/$s.info" &&
       { [ "$s" != tiny-qwen35-mtp ] || grep -q "^mtp           1 multi-token-prediction layers (loaded, not run)" "$T/$s.info"; }
    then ok "${case_name}_info_deltanet_state_and_mtp_layers"
    else ko "${case_name}_info_deltanet_state_and_mtp_layers" "$(grep -E '^(architecture|features|deltanet|mtp|KV)' "$T/$s.info" | tr '\n' ' ')"; fi
done
# the mixtures of experts under every policy (a prompt past the budget of 16, so each one evicts), and the info line of experts;
# deepseek's experts start after its dense first layer, and its shared ones are said
if grep -q "^experts       8 per layer on 2 layers, 3 used per token, expert ffn 96" "$T/tiny-deepseek.info" &&
   grep -q "^shared        a dense ffn of 192 on each expert layer" "$T/tiny-deepseek.info"; then ok deepseek_info_dense_lead_and_shared
else ko deepseek_info_dense_lead_and_shared "$(grep -E '^(experts|shared)' "$T/tiny-deepseek.info")"; fi
for s in tiny-qwen3moe tiny-gpt-oss tiny-qwen2moe tiny-deepseek; do
    bad=""
    for p in $("$K" policies | awk '{print $1}'); do
        "$K" run -m "$T/$s.gguf" -p "Once upon a time there was a little fox who lived in the woods" -n 8 --temp 0 --policy "$p" --budget 16 \
            --ignore-eos > /dev/null 2> "$T/$s.$p.err" || bad="$bad $p($(tail -n 1 "$T/$s.$p.err"))"
    done
    case_name=$(echo "$s" | tr '-' '_')
    if [ -z "$bad" ] && grep -q "^experts       8 per layer on [0-9]* layers, [23] used per token" "$T/$s.info"; then ok "${case_name}_every_policy_runs"
    else ko "${case_name}_every_policy_runs" "${bad:-$(grep '^experts' "$T/$s.info")}"; fi
done
# mem counts tiny-gemma3's 4 window layers at min(8 - 1, T) (what the cache keeps between steps) and its 2 global
# ones at T (f16: 768 bytes a token per layer): 2 x 100 x 768 + 4 x 7 x 768
"$K" mem -m "$T/tiny-gemma3.gguf" --ctx 100 --json > "$T/mem.json" 2> "$T/mem.err"
if grep -q '"window":8,"window_layers":4,' "$T/mem.json" && grep -q '"tokens":100,"batch":1,"bytes":175104,' "$T/mem.json"; then ok gemma_mem_window_layers
else ko gemma_mem_window_layers "$(cat "$T/mem.json" "$T/mem.err")"; fi
# Gemma 4 (tiny-gemma4moe: 6 layers, the last 3 KV-shared; of the 3 holding K/V, 2 window layers of 4 KV heads and one
# global of 2; heads held at 64 dims, the window ones' 32 padded): f16 pages of 16 tokens, 256 bytes a token and head:
# 1 x 2 x 112 x 256 + 2 x 4 x 16 x 256 = 90112 at 100 tokens, the bytes the cache holds (run's KV line, full, 100
# tokens: 0.09 MB); the shared layers count nothing. Gemma 4 31B's preset at 128K: 10 global layers x 4 heads x 131072 x
# 2048 + 50 window layers x 16 heads x 1023 x 2048 bytes; streaming 4096 keeps 4096 of the global layers' tokens
"$K" mkmodel --shape tiny-gemma4moe --type q8_0 -o "$T/g4moe.gguf" > /dev/null 2>&1
"$K" mem -m "$T/g4moe.gguf" --ctx 100 --block-size 16 --json > "$T/mem4.json" 2> "$T/mem4.err"
"$K" run -m "$T/g4moe.gguf" -p "a" -n 99 --temp 0 --ignore-eos --kv-dtype f16 2> "$T/mem4.run" > /dev/null
"$K" mem --preset gemma4-31b --ctx 131072 --policy streaming --budget 4096 --json > "$T/mem31.json" 2>&1
if grep -q '"window":8,"window_layers":2,"window_kv_heads":4,"window_head_dim":32,"shared_kv_layers":3,' "$T/mem4.json" &&
   grep -q '"tokens":100,"batch":1,"bytes":90112,' "$T/mem4.json" && grep -q 'KV 0.09 MB' "$T/mem4.run" && grep -q ' 1 global .*, 3 KV-shared' "$T/mem4.run" &&
   grep -q '"bytes":12413501440,.*"bounded_bytes":2011627520,' "$T/mem31.json"
then ok gemma4_mem_kinds_heads_and_shared_layers
else ko gemma4_mem_kinds_heads_and_shared_layers "$(cat "$T/mem4.json" "$T/mem4.err" "$T/mem31.json"; tail -n 2 "$T/mem4.run")"; fi
# GLM-4.5 (tiny-glm4moe: 3 layers that run, 2 KV heads of 32, and an MTP layer that never runs and holds nothing): f16,
# 3 x 2 x 100 x 128 bytes at 100 tokens; GLM-4.5-Air's preset at 128K: 46 layers x 8 heads x 131072 x 512 bytes, streaming
# 4096 keeps 46 x 8 x 4096 x 512
"$K" mkmodel --shape tiny-glm4moe --type q8_0 -o "$T/glm.gguf" > /dev/null 2>&1
"$K" mem -m "$T/glm.gguf" --ctx 100 --json > "$T/memg.json" 2> "$T/memg.err"
"$K" mem --preset glm-4.5-air --ctx 131072 --policy streaming --budget 4096 --json > "$T/memga.json" 2>&1
if grep -q '"layers":3,"kv_heads":2,"head_dim":32,' "$T/memg.json" && grep -q '"tokens":100,"batch":1,"bytes":76800,' "$T/memg.json" &&
   grep -q '"layers":46,"kv_heads":8,"head_dim":128,' "$T/memga.json" && grep -q '"bytes":24696061952,.*"bounded_bytes":771751936,' "$T/memga.json"
then ok glm4moe_mem_counts_layers_that_run_not_mtp
else ko glm4moe_mem_counts_layers_that_run_not_mtp "$(cat "$T/memg.json" "$T/memg.err" "$T/memga.json")"; fi
cli_summary
