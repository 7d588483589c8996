#!/bin/sh
# test_jinja_cli.sh — `kvbound template` against Python's jinja2 (the
# environment of transformers' apply_chat_template, tests/jinja/render_ref.py),
# byte for byte, over the conversations in tests/jinja/conv (with and without
# the generation prompt, with and without enable_thinking=false; the tools_*
# conversations with tests/jinja/tools.json):
#   - the templates in tests/jinja/templates (written for these tests; they
#     exercise the interpreter's constructs), also against the outputs
#     recorded in tests/jinja/expected (so a machine without jinja2 checks them);
#   - with KVB_LLAMA_TEMPLATES=DIR (llama.cpp's models/templates), the official
#     templates of kvbound's families, one case each (skipped by name without it).
# When both renderers fail (a template's raise_exception, "System role not
# supported"), both must fail, and a raise_exception message must be the same.
# Python's jinja2 missing: those cases skip (fail under KVB_REQUIRE_PYTHON=1).
# KVB_JINJA_RECORD=1 rewrites tests/jinja/expected from jinja2's outputs.
# Also: -m on a model with a template and chat --jinja over it (and its --keep -1 span), -m on a model without a template, tokenize --chat --jinja, --help, usage errors, bad JSON named with line and column, an
# unsupported construct named with its line.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(dirname "$0")
J="$HERE/jinja"

have_j2=0
if command -v python3 > /dev/null 2>&1 && python3 -c 'import jinja2' > /dev/null 2>&1; then have_j2=1; fi
need_j2() {
    [ "$have_j2" = 1 ] && return 0
    if [ "${KVB_REQUIRE_PYTHON:-0}" = 1 ]; then ko "$1" "python3 with jinja2 is not installed (Debian python3-jinja2; KVB_REQUIRE_PYTHON=1)"
    else sk "$1" "python3 with jinja2 is not installed (Debian python3-jinja2)"; fi
    return 1
}

# render_all RENDERER TEMPLATE OUT: every conversation x options, one block each
render_all() {
    : > "$3"
    for conv in "$J"/conv/*.json; do
        cn=$(basename "$conv" .json)
        tools=""
        case $cn in tools_*) tools="$J/tools.json" ;; esac
        for opt in gen nogen nothink; do
            set -- "$1" "$2" "$3" --template-file "$2" --messages "$conv" --var 'bos_token="<s>"' --var 'eos_token="</s>"'
            [ -n "$tools" ] && set -- "$@" --tools "$tools"
            [ "$opt" = nogen ] && set -- "$@" --no-generation-prompt
            [ "$opt" = nothink ] && set -- "$@" --var enable_thinking=false
            r=$1 tf=$2 o=$3
            shift 3
            echo "=== $cn $opt" >> "$o"
            if [ "$r" = py ]; then python3 "$J/render_ref.py" "$@" > "$T/one" 2> "$T/err"
            else "$K" template "$@" > "$T/one" 2> "$T/err"; fi
            if [ $? -eq 0 ]; then cat "$T/one" >> "$o"; echo >> "$o"
            else
                # the error: its raise_exception text when it is one, else only that it failed
                m=$(sed -n -e 's/.*raise_exception: //p' -e 's/^render_ref: TemplateError: //p' "$T/err" | head -n 1)
                echo "ERROR ${m}" >> "$o"
            fi
            set -- "$r" "$tf" "$o"
        done
    done
}

# 1. the interpreter's own test templates: recorded outputs, and jinja2 itself
for tf in "$J"/templates/*.jinja; do
    name=$(basename "$tf" .jinja)
    if [ "${KVB_JINJA_RECORD:-0}" = 1 ] && [ "$have_j2" = 1 ]; then render_all py "$tf" "$J/expected/$name.txt"; fi
    render_all c "$tf" "$T/$name.c"
    if cmp -s "$T/$name.c" "$J/expected/$name.txt"; then ok "template_${name}_recorded"
    else ko "template_${name}_recorded" "differs from tests/jinja/expected/$name.txt: $(diff "$J/expected/$name.txt" "$T/$name.c" | head -n 6 | tr '\n' ' ')"; fi
    if need_j2 "template_${name}_jinja2"; then
        render_all py "$tf" "$T/$name.py"
        if cmp -s "$T/$name.c" "$T/$name.py"; then ok "template_${name}_jinja2"
        else ko "template_${name}_jinja2" "differs from jinja2: $(diff "$T/$name.py" "$T/$name.c" | head -n 6 | tr '\n' ' ')"; fi
    fi
done

# 2. the official templates of kvbound's families (llama.cpp's models/templates)
OFFICIAL="Qwen-Qwen2.5-7B-Instruct Qwen-Qwen3-0.6B Qwen-QwQ-32B meta-llama-Llama-3.1-8B-Instruct meta-llama-Llama-3.2-3B-Instruct
meta-llama-Llama-3.3-70B-Instruct deepseek-ai-DeepSeek-R1-Distill-Llama-8B deepseek-ai-DeepSeek-R1-Distill-Qwen-32B google-gemma-2-2b-it
ibm-granite-granite-3.3-2B-Instruct ibm-granite-granite-4.0 microsoft-Phi-3.5-mini-instruct mistralai-Mistral-Nemo-Instruct-2407
mistralai-Ministral-3-14B-Reasoning-2512 unsloth-mistral-Devstral-Small-2507 HuggingFaceTB-SmolLM3-3B openai-gpt-oss-120b
NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use NousResearch-Hermes-3-Llama-3.1-8B-tool_use GLM-4.6"
for name in $OFFICIAL; do
    case_name="official_$name"
    if [ -z "${KVB_LLAMA_TEMPLATES:-}" ]; then sk "$case_name" "KVB_LLAMA_TEMPLATES=DIR (llama.cpp's models/templates) is not set"; continue; fi
    tf="$KVB_LLAMA_TEMPLATES/$name.jinja"
    if [ ! -f "$tf" ]; then ko "$case_name" "$tf is missing"; continue; fi
    need_j2 "$case_name" || continue
    render_all c "$tf" "$T/o.c"
    render_all py "$tf" "$T/o.py"
    n=$(grep -c '^=== ' "$T/o.py")
    e=$(grep -c '^ERROR' "$T/o.py")
    if cmp -s "$T/o.c" "$T/o.py"; then ok "$case_name ($n renders, $e of them errors in both)"
    else ko "$case_name" "differs from jinja2: $(diff "$T/o.py" "$T/o.c" | head -n 8 | tr '\n' ' ')"; fi
done

# 3. the command line
if "$K" template --help > "$T/help" 2>&1 && grep -q -- '--messages' "$T/help" && grep -q -- '--no-generation-prompt' "$T/help"; then ok template_help
else ko template_help "no usage text on --help"; fi
"$K" template --messages "$J/conv/single_user.json" > /dev/null 2> "$T/e1"; rc=$?
if [ $rc -eq 2 ] && grep -q 'template-file' "$T/e1"; then ok template_usage_error; else ko template_usage_error "rc $rc: $(cat "$T/e1")"; fi
printf '[{"role": "user", "content": "x"},\n {"role": }]' > "$T/bad.json"
"$K" template --template-file "$J/templates/chatml_tools.jinja" --messages "$T/bad.json" > /dev/null 2> "$T/e2"; rc=$?
if [ $rc -eq 1 ] && grep -q 'line 2, column 11' "$T/e2"; then ok template_bad_json_named; else ko template_bad_json_named "rc $rc: $(cat "$T/e2")"; fi
printf 'a\n{%% for x in xs %%}\n{%% include "x.jinja" %%}{%% endfor %%}' > "$T/unsup.jinja"
"$K" template --template-file "$T/unsup.jinja" --messages "$J/conv/single_user.json" > /dev/null 2> "$T/e3"; rc=$?
if [ $rc -eq 1 ] && grep -q "line 3: unsupported statement 'include'" "$T/e3"; then ok template_unsupported_named
else ko template_unsupported_named "rc $rc: $(cat "$T/e3")"; fi
printf '{{ "a" }}{{ x.y }}' > "$T/undef.jinja"
"$K" template --template-file "$T/undef.jinja" --messages "$J/conv/single_user.json" > /dev/null 2> "$T/e4"; rc=$?
if [ $rc -eq 1 ] && grep -q "'x' is undefined" "$T/e4"; then ok template_undefined_attribute; else ko template_undefined_attribute "rc $rc: $(cat "$T/e4")"; fi
printf 'no newline added' > "$T/plain.jinja"
"$K" template --template-file "$T/plain.jinja" --messages "$J/conv/single_user.json" > "$T/plain.out" 2>&1
if [ "$(od -c < "$T/plain.out" | tail -n 2 | head -n 1 | awk '{print $NF}')" = d ]; then ok template_exact_output; else ko template_exact_output "$(od -c < "$T/plain.out" | tail -n 3)"; fi
# -m: a vocab-only GGUF without tokenizer.chat_template falls back to the signature families (plain), said on stderr;
# tokenize --chat --jinja gives the same ids as the plain format then
V="$D/tokenizers/qwen2.5/qwen2.5-0.5b-instruct.vocab.gguf"
if [ -f "$V" ]; then
    "$K" template -m "$V" --messages "$J/conv/single_user.json" > "$T/m.out" 2> "$T/m.err"; rc=$?
    if [ $rc -eq 0 ] && grep -q 'no chat template' "$T/m.err" && grep -q '^User:   Tell me a joke' "$T/m.out"; then ok template_model_fallback
    else ko template_model_fallback "rc $rc: $(cat "$T/m.err") $(head -c 200 "$T/m.out")"; fi
    "$K" tokenize -m "$V" --chat user:Hi --chat assistant:Yo --jinja --ids > "$T/j.ids" 2> /dev/null
    "$K" tokenize -m "$V" --chat user:Hi --chat assistant:Yo --template plain --ids > "$T/p.ids" 2> /dev/null
    if [ -s "$T/j.ids" ] && cmp -s "$T/j.ids" "$T/p.ids"; then ok tokenize_chat_jinja_fallback
    else ko tokenize_chat_jinja_fallback "$(cat "$T/j.ids") vs $(cat "$T/p.ids")"; fi
else
    skip_case template_model_fallback "missing $V"
fi
# a model with a Jinja template (stories260K with chatml_tools.jinja set, by tests/jinja/gguf_set_template.py):
# template -m renders it with the vocabulary's bos/eos; chat --jinja feeds each turn's difference
G="$D/models/stories260K/stories260K.llamacpp.gguf"
if [ ! -f "$G" ]; then
    skip_case template_model_jinja "missing $G"
elif need_tool template_model_jinja python3 KVB_REQUIRE_PYTHON "Debian python3"; then
    python3 "$J/gguf_set_template.py" "$G" "$J/templates/chatml_tools.jinja" "$T/st.gguf"
    "$K" template -m "$T/st.gguf" --messages "$J/conv/tools_calls.json" --tools "$J/tools.json" > "$T/tm.out" 2> "$T/tm.err"
    "$K" template --template-file "$J/templates/chatml_tools.jinja" --messages "$J/conv/tools_calls.json" --tools "$J/tools.json" \
        --var 'bos_token="<s>"' --var 'eos_token="</s>"' > "$T/tf.out"
    if [ -s "$T/tm.out" ] && [ ! -s "$T/tm.err" ] && cmp -s "$T/tm.out" "$T/tf.out"; then ok template_model_jinja
    else ko template_model_jinja "$(cat "$T/tm.err") $(diff "$T/tf.out" "$T/tm.out" | head -n 4 | tr '\n' ' ')"; fi
    printf 'Hello\nAgain\n' | "$K" chat -m "$T/st.gguf" --jinja -n 4 --temp 0 --show-prompt > /dev/null 2> "$T/chat.err"; rc=$?
    printf '[{"role": "user", "content": "Hello"}]' > "$T/hello.json"
    want1=$("$K" template --template-file "$J/templates/chatml_tools.jinja" --messages "$T/hello.json")
    if [ $rc -eq 0 ] && grep -q 'template jinja' "$T/chat.err" && grep -qF "[prompt: $(printf '%s' "$want1" | head -n 1)" "$T/chat.err" &&
       grep -qF "$(printf '%s' "$want1" | sed -n 2p)" "$T/chat.err" &&
       grep -q '^\[prompt: <|im_end|><|im_start|>user$' "$T/chat.err" && grep -q '^Again<|im_end|><|im_start|>assistant$' "$T/chat.err"; then
        ok chat_jinja_turns
    else ko chat_jinja_turns "rc $rc: $(head -c 600 "$T/chat.err" | tr '\n' '|')"; fi
    # --keep -1 under --jinja: the rendered system message and the user header (47 tokens) stay pinned on top of --budget 16
    printf 'Hello\nAgain\n/stats\n' | "$K" chat -m "$T/st.gguf" --jinja -n 4 --temp 0 -sys "You are brief." --keep -1 --budget 16 > "$T/ck.out" 2>&1
    if grep -q '^\[keep 47: positions 0..46 pinned in every stream\]' "$T/ck.out" && grep -q 'longest 63)' "$T/ck.out"; then ok chat_jinja_keep_minus_one_pins_the_system_message
    else ko chat_jinja_keep_minus_one_pins_the_system_message "$(tail -n 3 "$T/ck.out" | tr '\n' '|')"; fi
fi
cli_summary
