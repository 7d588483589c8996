#!/bin/sh
# tools/train/train.py's smoke test: a few steps of a tiny configuration on
# two texts cut short (never the real training), checking that
# - the validation loss falls by at least 0.5 nats;
# - the export reads back: train.py compares kvbound's logits of model.gguf
#   with its own forward (NMSE < 1e-6, top-1 >= 0.99) and fails otherwise;
#   here export.json is read again, and kvbound info / run load the file;
# - the same seed gives the same file (sha256), another seed another;
# - a second run into the same folder with another configuration is refused
#   by name instead of resuming from the wrong checkpoint;
# - the passkeys rows (--passkey-share) are needle --passkeys N --ask-after's
#   session, and --init-gguf starts from a GGUF's weights (or refuses it).
# Needs python3 with torch (Debian python3-torch; CI installs it and sets
# KVB_REQUIRE_TORCH=1, which turns the skip into a failure) and ../shared/data.
. "$(dirname "$0")/cli_lib.sh"
HERE=$(dirname "$0")
TRAIN="$HERE/../tools/train/train.py"

if ! need_tool train_smoke python3 KVB_REQUIRE_PYTHON "Debian python3; .ci/run installs it"; then
    cli_summary
    exit
fi
PY=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" > /dev/null 2>&1 && "$p" -c 'import torch, numpy' > /dev/null 2>&1; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
    if [ "${KVB_REQUIRE_TORCH:-0}" = 1 ]; then ko train_smoke "python3 with torch is not installed (Debian python3-torch; KVB_REQUIRE_TORCH=1)"
    else sk train_smoke "python3 with torch is not installed (Debian python3-torch)"; fi
    cli_summary
    exit
fi
if [ ! -f "$D/models/stories260K/tok512.bin" ] || [ ! -f "$D/text/pg345_dracula.txt" ]; then
    skip_case train_smoke "missing $D/models/stories260K or $D/text"
    cli_summary
    exit
fi
if [ -n "${KVB_TEST_QUICK:-}" ]; then
    echo "quick mode (KVB_TEST_QUICK): the training script is checked by make test"
    cli_summary
    exit
fi

BA=$(cd "$B" && pwd)
tiny() { # OUT SEED [extra]
    out=$1 seed=$2
    shift 2
    "$PY" "$TRAIN" --out "$out" --seed "$seed" --build "$BA" --data "$D" --dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 \
        --ctx 64 --steps 60 --batch 8 --micro 4 --warmup 5 --lr 3e-3 --eval-every 30 --eval-rows 4 --max-text-bytes 200000 \
        --precision fp32 --threads 1 "$@"
}
field() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))' "$1" "$2"; }

if tiny "$T/a" 7 > "$T/a.out" 2> "$T/a.err"; then
    first=$(head -n 1 "$T/a/loss.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
    last=$(tail -n 1 "$T/a/loss.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
    if "$PY" -c "import sys; sys.exit(0 if $last < $first - 0.5 else 1)"; then ok train_loss_falls
    else ko train_loss_falls "validation loss $first -> $last (want a fall of 0.5)"; fi
    nmse=$(field "$T/a/export.json" 'check["nmse"]')
    top1=$(field "$T/a/export.json" 'check["top1_agreement"]')
    if "$PY" -c "import sys; sys.exit(0 if $nmse < 1e-6 and $top1 >= 0.99 else 1)"; then ok train_export_reads_back
    else ko train_export_reads_back "kvbound's logits against train.py's: NMSE $nmse, top-1 $top1"; fi
    sha=$(field "$T/a/export.json" 'gguf_sha256')
    if [ "$(sha256sum "$T/a/model.gguf" | cut -d' ' -f1)" = "$sha" ]; then ok train_export_sha256
    else ko train_export_sha256 "export.json's sha256 is not model.gguf's"; fi
    if "$K" info -m "$T/a/model.gguf" > "$T/info.txt" 2>&1 && grep -q "^context *64 (trained)" "$T/info.txt" \
       && "$K" run -m "$T/a/model.gguf" -p "Once upon a time" -n 16 --temp 0 > "$T/run.txt" 2>&1; then ok train_gguf_loads
    else ko train_gguf_loads "$(tail -n 2 "$T/info.txt" "$T/run.txt" 2>/dev/null | tr '\n' ' ')"; fi
    tiny "$T/b" 7 --no-export > /dev/null 2>&1
    tiny "$T/c" 8 --no-export > /dev/null 2>&1
    la=$(sed -n 3p "$T/a/loss.jsonl" | cut -d, -f2-4) lb=$(sed -n 3p "$T/b/loss.jsonl" | cut -d, -f2-4) lc=$(sed -n 3p "$T/c/loss.jsonl" | cut -d, -f2-4)
    if [ -n "$la" ] && [ "$la" = "$lb" ] && [ "$la" != "$lc" ]; then ok train_deterministic
    else ko train_deterministic "seed 7 twice: '$la' / '$lb'; seed 8: '$lc'"; fi
    if tiny "$T/a" 7 --dim 48 --heads 4 > "$T/d.out" 2> "$T/d.err"; then ko train_refuses_other_config "a run with --dim 48 resumed a --dim 32 checkpoint"
    elif grep -q "ckpt.pt was trained with another configuration" "$T/d.err"; then ok train_refuses_other_config
    else ko train_refuses_other_config "$(tail -n 1 "$T/d.err")"; fi
else
    ko train_smoke "train.py failed: $(tail -n 3 "$T/a.err" | tr '\n' ' ')"
fi
# The passkeys rows (--passkey-share): built as `kvbound needle --passkeys N --ask-after` builds its session.
# Each row: BOS; N sentences " The pass key number I is K. Remember it." in the haystack, in the order of
# their depths (depth + i/N, wrapped: a rotation of 1..N); then the questions 1..N in order, each followed by its key's tokens
# and '.', whose next target is EOS (needle stops there) though the next input is the next question; the
# answers and their ends weigh --answer-weight; the row fits T.
if "$PY" - "$HERE/../tools/train" "$BA" "$D" "$T" > "$T/rows.txt" 2>&1 <<'PYEOF'
import sys, types
import numpy as np
sys.path.insert(0, sys.argv[1])
import train
a = types.SimpleNamespace(build=sys.argv[2], data=sys.argv[3], tokenizer=sys.argv[3] + "/models/stories260K/tok512.bin",
                          max_text_bytes=100000, out=sys.argv[4], holdout="pg345_dracula", val_share=0.05,
                          passkeys_max=4, answer_weight=4.0, vocab=512)
tok = train.load_tokenizer(a)
d = train.Data(tok, a)
rng = np.random.default_rng(5)
bad, seen, unrotated = [], set(), 0
for r in range(60):
    T = 512 if r % 3 else 96
    row, w, targets, eos = d.passkeys_row(rng, T)
    text = tok.detokenize(row[1:-1])
    n = text.count("What is the pass key number")
    seen.add(n)
    keys = [int(text.split(" The pass key number %d is " % (i + 1))[1][:5]) for i in range(n)]
    qs = [text.index("What is the pass key number %d? The pass key number %d is %d." % (i + 1, i + 1, keys[i])) for i in range(n)]
    last = max(text.index(" The pass key number %d is %d. Remember it." % (i + 1, keys[i])) for i in range(n))
    ends = sorted(list(eos) + [len(row) - 2])
    order = sorted(range(n), key=lambda i: text.index(" The pass key number %d is " % (i + 1)))
    rotated = order == [(order[0] + i) % n for i in range(n)]  # depth + i/N wraps: a rotation of 1..N
    if order[0] and rotated:
        seen.add("wrapped")
    unrotated += not rotated  # (or ties at one sentence boundary, in passkey order, as needle.c breaks them)
    ok = (row[0] == train.BOS and row[-1] == train.EOS and len(row) <= T + 1 and len(w) == len(row) - 1
          and qs == sorted(qs) and last < qs[0] and len(set(keys)) == n and len(eos) == n - 1
          and all(eos[i] == train.EOS and row[i + 1] != train.EOS for i in eos)
          and sorted(np.nonzero(w > 1)[0].tolist()) == sorted(targets + ends)
          and tok.detokenize([row[i + 1] for i in targets]).replace(" ", "") == "".join("%d." % k for k in keys))
    if not ok:
        bad.append((r, n, text[-200:]))
print("passkeys", sorted(seen, key=str), "not a rotation", unrotated, "bad", len(bad), bad[:1])
sys.exit(0 if not bad and seen == {1, 2, 3, 4, "wrapped"} and unrotated <= 6 else 1)
PYEOF
then ok train_passkeys_rows_as_needle_ask_after
else ko train_passkeys_rows_as_needle_ask_after "$(tail -n 2 "$T/rows.txt" | tr '\n' ' ')"; fi

# --init-gguf: a run starts from run a's export (its weights, checked against kvbound's logits of that
# file), so its first validation loss is run a's trained one, not an untrained model's; a GGUF of
# another shape is refused by name. Passkeys rows train (T = 128 holds one) and loss.jsonl gains
# passkeys_acc.
if [ -f "$T/a/model.gguf" ] && tiny "$T/e" 7 --init-gguf "$T/a/model.gguf" --steps 2 --eval-every 1 --lr 1e-5 --warmup 1 --no-export > "$T/e.out" 2> "$T/e.err"; then
    a0=$(head -n 1 "$T/a/loss.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
    an=$(tail -n 1 "$T/a/loss.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
    e0=$(head -n 1 "$T/e/loss.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["val_loss"])')
    if grep -q "init: .*NMSE" "$T/e.err" && "$PY" -c "import sys; sys.exit(0 if abs($e0 - $an) < 0.05 and $e0 < $a0 - 0.5 else 1)"; then ok train_init_gguf
    else ko train_init_gguf "first validation loss $e0 from $T/a/model.gguf (its own last $an, untrained $a0)"; fi
else
    ko train_init_gguf "train.py --init-gguf failed: $(tail -n 2 "$T/e.err" 2>/dev/null | tr '\n' ' ')"
fi
if tiny "$T/g" 7 --ctx 128 --steps 2 --eval-every 1 --passkey-share 0.4 --no-export > "$T/g.out" 2> "$T/g.err" \
   && head -n 1 "$T/g/loss.jsonl" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); sys.exit(0 if 0 <= r["passkeys_acc"] <= 1 else 1)'; then
    ok train_passkeys_rows_train
else ko train_passkeys_rows_train "$(tail -n 2 "$T/g.err" 2>/dev/null | tr '\n' ' ')"; fi
if tiny "$T/f" 7 --init-gguf "$T/a/model.gguf" --dim 48 --no-export > "$T/f.out" 2> "$T/f.err"; then ko train_init_gguf_refuses_shape "a 32-wide GGUF loaded into a 48-wide model"
elif grep -q "llama.embedding_length is 32, the model's is 48" "$T/f.err"; then ok train_init_gguf_refuses_shape
else ko train_init_gguf_refuses_shape "$(tail -n 1 "$T/f.err")"; fi

if "$PY" "$TRAIN" --help > "$T/help.txt" 2>&1 && grep -q -- "--sink-token" "$T/help.txt"; then ok train_help
else ko train_help "train.py --help: $(head -n 2 "$T/help.txt")"; fi
cli_summary
