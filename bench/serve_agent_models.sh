#!/bin/sh
# serve_agent_models.sh OUTDIR — the two models of bench/serve_agent.sh:
# random-weight GGUF files (q8_0, seed 1) of two real shapes, written by
# `kvbound mkmodel`:
#   OUTDIR/tinyllama-1.1b.gguf  dense: TinyLlama 1.1B (22 layers, dim 2048, GQA 32:4)
#   OUTDIR/gemma3-1b.gguf       sliding window: Gemma 3 1B (26 layers, dim 1152,
#                               window 512 on 5 of every 6 layers)
# both with the Llama 2 / TinyLlama SentencePiece vocabulary (32,000 tokens:
# ../shared/data/tokenizers/llama2/ggml-vocab-llama-spm.gguf, TinyLlama's own)
# and the chat template bench/templates/chatml_agent.jinja (ChatML with
# Hermes-style tools; its markers are plain text in this vocabulary) set in
# the file, and context_length raised to 32768 (TinyLlama's is 2048, and
# llama-server caps a slot at the trained length: a 40-turn history is
# about 7,600 tokens). Both servers read the same files.
# Why this vocabulary: llama-server's chat parser answers 500 to an answer
# that is not valid UTF-8, so bench/agent_load.py bans (logit_bias) the
# vocabulary's partial-UTF-8 and control tokens, and kvbound takes at most
# 1,024 biased tokens: 131 here (Qwen2.5's needs 1,741, Llama 3's 1,608).
# SmolLM2's (330) is not used: its BOS is <|im_start|> and kvbound drops a
# prompt's leading BOS text even where the vocabulary adds no BOS, so its
# prompts would be one token shorter than llama-server's.
# VOCAB=path overrides the vocabulary; SHAPES="a b" the shapes (e.g.
# SHAPES="tiny tiny-gemma3" for a smoke run); TYPE the tensor type.
set -eu
OUT=$1
K=${K:-build/kvbound}
HERE=$(dirname "$0")
VOCAB=${VOCAB:-../shared/data/tokenizers/llama2/ggml-vocab-llama-spm.gguf}
[ -f "$VOCAB" ] || { echo "no vocabulary $VOCAB (run from the repository root, or set VOCAB)" >&2; exit 1; }
SHAPES=${SHAPES:-tinyllama-1.1b gemma3-1b}
TYPE=${TYPE:-q8_0}
mkdir -p "$OUT"
for s in $SHAPES; do
    "$K" mkmodel --shape "$s" --type "$TYPE" --seed 1 --vocab "$VOCAB" -o "$OUT/$s.raw.gguf" > /dev/null 2>&1 ||
        { echo "mkmodel --shape $s failed" >&2; exit 1; }
    python3 "$HERE/../tests/jinja/gguf_set_template.py" "$OUT/$s.raw.gguf" "$HERE/templates/chatml_agent.jinja" "$OUT/$s.gguf" > /dev/null
    rm -f "$OUT/$s.raw.gguf"
    arch=$("$K" info -m "$OUT/$s.gguf" 2>/dev/null | awk '$1 == "architecture" {print $2; exit}')
    [ -n "$arch" ] || { echo "kvbound info: no arch for $OUT/$s.gguf" >&2; exit 1; }
    python3 "$HERE/gguf_set_u32.py" "$OUT/$s.gguf" "$arch.context_length" 32768
    echo "$OUT/$s.gguf"
done
