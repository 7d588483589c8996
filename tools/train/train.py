#!/usr/bin/env python3
"""train.py: trains a small llama-shaped model (RMSNorm, RoPE, SwiGLU, GQA)
in which the phenomena kvbound's policies exist for can show: attention sinks,
retrieval of a fact far back, the StreamingLLM collapse past a window.

Design:
- Data. The texts of ../shared/data/text, each tokenized by kvbound itself as
  one string with BOS, as `kvbound ppl` reads a file (its Python bindings, the 512-token SentencePiece of stories260K), so the ids are
  those kvbound and llama.cpp read at evaluation. One book (--holdout) is left
  out whole for evaluation; the last --val-share of every other text is the
  validation slice. Text rows are random crops of the token stream.
- Retrieval mix. A --retrieval-share of rows are built as src/eval/needle.c
  builds its prompt, in token space: BOS, filler sentences (needle.c's own, or
  a crop of book text), facts at random depths (the passkey sentence of
  needle.c, or "The red box holds 31337."), then the questions of one or more
  of them, each followed by its value: the fact's own tokens, so what is
  learnt is a copy (those tokens weigh --answer-weight in the loss).
- Copy rows (--copy-share): a crop of text or of random tokens written twice,
  whose second half only looking back predicts; induction heads, which
  retrieval needs, form on it. The first --early-steps draw mostly copy and
  retrieval rows (a curriculum): recipes without copy rows, or with them at a
  quarter of the rows from the start, learnt no copy in 700 and 1,600 steps.
- The sink token (--sink-token). StreamingLLM's pre-training experiment: every
  text row starts with the same learnable token. It is BOS (id 1), which
  kvbound's prompts carry at position 0, so `--sinks 1` keeps it.
- Deterministic given --seed on one device: data order from numpy's PCG64,
  weights from torch's generator, deterministic algorithms.
- Out: DIR/loss.jsonl (train and validation loss, retrieval accuracy and the
  attention share on position 0 per layer, by step), DIR/ckpt.pt (resumable),
  DIR/model.bin (llama2.c checkpoint, fp32), DIR/model.gguf written by
  `kvbound convert`, and DIR/export.json (the commands, sha256, the logit check
  of the GGUF read by kvbound against this script's own forward).

It runs unchanged on CUDA (--device cuda) where torch has it.
"""
import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from texts import book_body  # noqa: E402
from gguf_read import GGUFError, read_gguf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

BOS, EOS = 1, 2

# needle.c's filler, needle and question: the retrieval rows and the evaluation share them
NEEDLE_FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
                 "The river runs past the old mill. A dog sleeps by the door. The wind moves the tall trees. "
                 "Bread is baked in the morning. The children walk to school. Rain falls on the quiet town. ")
COLOURS = ["red", "blue", "green", "yellow", "black", "white", "brown", "pink", "grey", "gold", "silver", "orange"]
THINGS = ["box", "door", "bag", "cup", "book", "coat", "ball", "hat", "car", "boat", "key", "bell"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- tokenizer and data

def load_tokenizer(args):
    sys.path.insert(0, os.path.join(REPO, "python"))
    if not os.environ.get("KVBOUND_LIBRARY"):
        lib = os.path.join(args.build, "libkvbound.so")
        if os.path.exists(lib):
            os.environ["KVBOUND_LIBRARY"] = lib
    import kvbound  # noqa: E402  (the bindings of this checkout)
    model_bin = os.path.join(args.data, "models", "stories260K", "stories260K.bin")
    for p in (model_bin, args.tokenizer):
        if not os.path.exists(p):
            raise SystemExit("train.py: %s is missing (../shared/data, see its README)" % p)
    return kvbound.Model(model_bin, tokenizer=args.tokenizer)


def tokenize_texts(tok, args):
    """{name: int16 array} of every text, cached in DIR/tokens.npz (keyed by the files' sizes)."""
    tdir = os.path.join(args.data, "text")
    names = sorted(f for f in os.listdir(tdir) if f.endswith(".txt"))
    if args.max_text_bytes:
        names = [n for n in names if n != args.holdout + ".txt"][:2] + [args.holdout + ".txt"]
    key = json.dumps([(n, os.path.getsize(os.path.join(tdir, n))) for n in names] + [args.max_text_bytes])
    cache = os.path.join(args.out, "tokens.npz")
    if os.path.exists(cache):
        z = np.load(cache)
        if str(z["key"]) == key:
            return {n: z[n] for n in names}
    out = {}
    for n in names:
        with open(os.path.join(tdir, n), encoding="utf-8") as f:
            text = book_body(f.read())
        if args.max_text_bytes:
            text = text[:args.max_text_bytes]
        t0 = time.time()
        # one string with BOS, as `kvbound ppl` tokenizes a file
        ids = tok.tokenize(text, bos=True)
        out[n] = np.array(ids, dtype=np.int16)
        log("tokenized %s: %d tokens (%.1f s)" % (n, len(ids), time.time() - t0))
    np.savez(cache, key=np.array(key), **out)
    return out


class Data:
    def __init__(self, tok, args):
        self.args = args
        texts = tokenize_texts(tok, args)
        hold = args.holdout + ".txt"
        if hold not in texts:
            raise SystemExit("train.py: --holdout %s: no such text in %s/text" % (args.holdout, args.data))
        train, val = [], []
        for n, ids in texts.items():
            if n == hold:
                continue
            cut = int(len(ids) * (1 - args.val_share))
            train.append(ids[:cut])
            val.append(ids[cut:])
        self.train = np.concatenate(train).astype(np.int64)
        self.val = np.concatenate(val).astype(np.int64)
        self.holdout_tokens = len(texts[hold])
        # needle.c's pieces, tokenized as it tokenizes them (no BOS, one call per piece)
        self.tok = tok
        self.filler = []
        at = 0
        while at < len(NEEDLE_FILLER):
            end = NEEDLE_FILLER.find(".", at)
            end = len(NEEDLE_FILLER) if end < 0 else end + 1
            self.filler.append(tok.tokenize(NEEDLE_FILLER[at:end], bos=False))
            at = end
        self.memo = {}
        log("data: %d training tokens, %d validation, %d held out (%s)" % (len(self.train), len(self.val), self.holdout_tokens, hold))

    def t(self, s):
        r = self.memo.get(s)
        if r is None:
            r = self.tok.tokenize(s, bos=False)
            if len(self.memo) < 200000:
                self.memo[s] = r
        return r

    def fact(self, rng):
        """(fact tokens, question tokens, answer tokens): the answer is the value's tokens in the fact, and the '.'."""
        key = int(rng.integers(10000, 100000))
        if rng.random() < 0.5:
            fact = " The pass key is %d. Remember it." % key
            question = " What is the pass key? The pass key is"
        else:
            c, t = COLOURS[rng.integers(len(COLOURS))], THINGS[rng.integers(len(THINGS))]
            fact = " The %s %s holds %d." % (c, t, key)
            question = " What does the %s %s hold? The %s %s holds" % (c, t, c, t)
        f, q, k = self.t(fact), self.t(question), self.t("%d" % key)
        at = next((i for i in range(len(f) - len(k) + 1) if f[i:i + len(k)] == k), -1)
        ans = f[at:at + len(k) + 1] if at >= 0 else self.t(" %d." % key)
        return f, q, ans

    def retrieval_row(self, rng, T):
        """needle.c's prompt shape at a random length <= T: tokens, loss weights (the values weigh more), the values' target indices."""
        facts = [self.fact(rng) for _ in range(int(rng.integers(1, 4)))]
        asked = list(rng.permutation(len(facts))[:int(rng.integers(1, len(facts) + 1))])
        length = int(rng.integers(min(64, T), T + 1))
        tail = sum(len(facts[k][1]) + len(facts[k][2]) for k in asked)
        fill = length - 1 - sum(len(f[0]) for f in facts) - tail
        if fill < 4:
            facts, asked = facts[asked[0]:asked[0] + 1], [0]
            tail = len(facts[0][1]) + len(facts[0][2])
            fill = length - 1 - len(facts[0][0]) - tail
        hay = []
        if rng.random() < 0.5:  # needle.c's filler, from a random sentence on
            s = int(rng.integers(len(self.filler)))
            while len(hay) < fill:
                hay += self.filler[s % len(self.filler)]
                s += 1
        else:  # a crop of book text
            at = int(rng.integers(0, len(self.train) - fill - 1))
            hay = list(self.train[at:at + fill])
        hay = hay[:max(fill, 0)]
        cuts = sorted(int(rng.integers(0, len(hay) + 1)) for _ in facts)
        row, prev = [BOS], 0
        for c, f in zip(cuts, facts):
            row += hay[prev:c] + f[0]
            prev = c
        row += hay[prev:]
        answers = []
        for k in asked:  # one question, or several in turn
            row += facts[k][1]
            answers.append((len(row), len(facts[k][2])))
            row += facts[k][2]
        w = np.ones(len(row) - 1, dtype=np.float32)
        targets = [i for a0, n in answers for i in range(a0 - 1, a0 - 1 + n) if i < T]  # the values' target indices
        w[targets] = self.args.answer_weight
        return row[:T + 1], w[:T], targets

    def passkeys_row(self, rng, T):
        """`kvbound needle --passkeys N --ask-after`'s session as one row (src/eval/needle.c, needle_multi): BOS,
        a haystack of needle.c's filler sentences (tokenized one by one, from the first, the last one cut to the
        fill) or of book text, N passkey sentences ("The pass key number I is K. Remember it.") at the
        sentence boundaries nearest depth + i/N (wrapped), then one question per passkey in turn, each
        answered by the key's tokens as the sentence holds them and its '.', after which the model ends
        its answer (EOS as the target, never as an input: needle stops at EOS and feeds the next question).
        N is 1..--passkeys-max; the prompt's length (needle's --lengths) leaves room for the questions in T.
        Returns the row, its loss weights (answers and their EOS weigh --answer-weight), the answers'
        target indices and {target index: EOS}."""
        n = int(rng.integers(1, self.args.passkeys_max + 1))
        keys = [int(k) for k in rng.choice(90000, n, replace=False) + 10000]
        nd = [self.t(" The pass key number %d is %d. Remember it." % (i + 1, keys[i])) for i in range(n)]
        q = [self.t(" What is the pass key number %d? The pass key number %d is" % (i + 1, i + 1)) for i in range(n)]
        ans = []
        for i in range(n):  # the key's tokens in its sentence and the '.' after them (needle's key_span)
            k = self.t("%d" % keys[i])
            at = next((j for j in range(len(nd[i]) - len(k) + 1) if nd[i][j:j + len(k)] == k), -1)
            ans.append(nd[i][at:at + len(k) + 1] if at >= 0 else self.t(" %d." % keys[i]))
        while True:  # fewer passkeys where T cannot hold them (needle: 8 filler tokens each besides the sentences)
            qmax = max(len(x) for x in q)
            after = sum(len(x) for x in q) - qmax + sum(len(a) for a in ans)  # past needle's length
            lo = 1 + sum(len(x) for x in nd) + qmax + 8 * n
            if lo <= T - after or n == 1:
                break
            n, keys, nd, q, ans = n - 1, keys[:-1], nd[:-1], q[:-1], ans[:-1]
        if lo > T - after:
            raise SystemExit("train.py: --ctx %d cannot hold a passkey row (%d tokens)" % (T, lo + after))
        length = int(rng.integers(min(lo + 16, T - after), T - after + 1))
        fill = length - 1 - sum(len(x) for x in nd) - qmax
        hay, bnd = [BOS], []
        if rng.random() < 0.5:  # needle.c's fill_haystack on its default filler
            s = 0
            while len(hay) - 1 < fill:
                bnd.append(len(hay))
                hay += self.filler[s % len(self.filler)][:fill - (len(hay) - 1)]
                s += 1
        else:  # a crop of book text (needle --filler); sentences end at a '.' token
            at = int(rng.integers(0, len(self.train) - fill - 1))
            crop = [int(x) for x in self.train[at:at + fill]]
            dot = self.t(".")[-1]
            bnd = [1] + [1 + j + 1 for j, x in enumerate(crop) if x == dot]
            hay += crop
        depth = float(rng.random())
        at_b = []
        for i in range(n):
            d = depth + i / n
            d = d - 1 if d > 1 else d
            target = int(d * fill + 0.5)
            at_b.append(next((b for b in bnd if b - 1 >= target), len(hay)))
        row, frm = [], 0
        for i in sorted(range(n), key=lambda i: (at_b[i], i)):
            row += hay[frm:at_b[i]] + nd[i]
            frm = at_b[i]
        row += hay[frm:]
        targets, eos = [], {}
        for i in range(n):  # needle's ask_after: every question in a turn of its own, in order
            row += q[i]
            targets += range(len(row) - 1, len(row) - 1 + len(ans[i]))
            row += ans[i]
            if i < n - 1:
                eos[len(row) - 1] = EOS
        ends = list(eos) + [len(row) - 1]
        row.append(EOS)  # the last answer's end: a target only
        w = np.ones(len(row) - 1, dtype=np.float32)
        hit = [i for i in targets + ends if i < T]
        w[hit] = self.args.answer_weight
        eos = {i: v for i, v in eos.items() if i < T}
        return row[:T + 1], w[:T], [i for i in targets if i < T], eos

    def copy_row(self, rng, T):
        """A crop of text, or of random tokens, then the same again: the second half is predictable only by
        looking back (the induction heads retrieval needs form fast on it)."""
        half = int(rng.integers(T // 16, T // 2))
        if rng.random() < 0.5:
            crop = [int(t) for t in rng.integers(3, self.args.vocab, half)]
        else:
            at = int(rng.integers(0, len(self.train) - half - 1))
            crop = list(self.train[at:at + half])
        row = crop + crop  # never the sink token: with it, BOS came to announce a copy (recipe E)
        return row, np.ones(len(row) - 1, dtype=np.float32)

    def text_row(self, src, rng, T, sink):
        n = T - 1 if sink else T
        at = int(rng.integers(0, len(src) - n - 1))
        row = ([BOS] if sink else []) + list(src[at:at + n + 1])
        return row, np.ones(len(row) - 1, dtype=np.float32)

    def batch(self, rng, B, T, sink, val=False, step=None):
        x = np.full((B, T), EOS, dtype=np.int64)
        y = np.full((B, T), -100, dtype=np.int64)
        w = np.zeros((B, T), dtype=np.float32)
        for b in range(B):
            u = 1.0 if val else rng.random()
            early = step is not None and step < self.args.early_steps
            rs = self.args.early_retrieval_share if early else self.args.retrieval_share
            cs = self.args.early_copy_share if early else self.args.copy_share
            ps = 0.0 if early or val else self.args.passkey_share  # the shares add up: text takes the rest
            eos = {}
            if u < ps:
                row, wr, _, eos = self.passkeys_row(rng, T)
            elif u - ps < rs:
                row, wr, _ = self.retrieval_row(rng, T)
            elif u - ps < rs + cs:
                row, wr = self.copy_row(rng, T)
            else:
                row, wr = self.text_row(self.val if val else self.train, rng, T, sink)
            n = len(row) - 1
            x[b, :n] = row[:n]
            y[b, :n] = row[1:]
            for i, v in eos.items():
                y[b, i] = v
            w[b, :n] = wr
        return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(w)


# ---------------------------------------------------------------- the model

class Model(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        hd = a.dim // a.heads
        self.hd = hd
        self.emb = torch.nn.Embedding(a.vocab, a.dim)
        L = a.layers
        P = torch.nn.Parameter
        self.att_norm = P(torch.ones(L, a.dim))
        self.ffn_norm = P(torch.ones(L, a.dim))
        self.wq = P(torch.empty(L, a.dim, a.dim))
        self.wk = P(torch.empty(L, a.kv_heads * hd, a.dim))
        self.wv = P(torch.empty(L, a.kv_heads * hd, a.dim))
        self.wo = P(torch.empty(L, a.dim, a.dim))
        self.w1 = P(torch.empty(L, a.hidden, a.dim))
        self.w2 = P(torch.empty(L, a.dim, a.hidden))
        self.w3 = P(torch.empty(L, a.hidden, a.dim))
        self.out_norm = P(torch.ones(a.dim))
        std = 0.02
        for p in (self.wq, self.wk, self.wv, self.w1, self.w3):
            torch.nn.init.normal_(p, 0, std)
        for p in (self.wo, self.w2):  # GPT-2's scaled init of the residual projections
            torch.nn.init.normal_(p, 0, std / math.sqrt(2 * L))
        torch.nn.init.normal_(self.emb.weight, 0, std)
        # RoPE on pairs (2i, 2i+1), base 10000: llama2.c's convention, which kvbound reads
        inv = 1.0 / (a.rope_base ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(a.ctx * 16).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    @staticmethod
    def rms(x, w, eps=1e-5):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def rope(self, x):  # x [B, T, H, hd]
        T = x.shape[1]
        c, s = self.cos[:T].view(1, T, 1, -1), self.sin[:T].view(1, T, 1, -1)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    def forward(self, idx, want_mass=False):
        a, hd = self.a, self.hd
        B, T = idx.shape
        h = self.emb(idx)
        mask = torch.full((T, T), float("-inf"), device=idx.device).triu(1)
        rep = a.heads // a.kv_heads
        masses = []
        for l in range(a.layers):
            x = self.rms(h, self.att_norm[l])
            q = (x @ self.wq[l].t()).view(B, T, a.heads, hd)
            k = (x @ self.wk[l].t()).view(B, T, a.kv_heads, hd)
            v = (x @ self.wv[l].t()).view(B, T, a.kv_heads, hd)
            q, k = self.rope(q), self.rope(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
            att = att.softmax(-1)
            if want_mass:  # share of attention on position 0, over heads and the queries past the first 4
                masses.append(att[:, :, 4:, 0].mean().item())
            o = (att @ v).transpose(1, 2).reshape(B, T, a.dim)
            h = h + o @ self.wo[l].t()
            x = self.rms(h, self.ffn_norm[l])
            h = h + (F.silu(x @ self.w1[l].t()) * (x @ self.w3[l].t())) @ self.w2[l].t()
        logits = self.rms(h, self.out_norm) @ self.emb.weight.t()
        return (logits, masses) if want_mass else logits


# ---------------------------------------------------------------- export

def write_llama2c(model, path):
    """llama2.c's version-0 checkpoint (shared classifier), the layout of ../shared/data's models."""
    a = model.a
    hd = model.hd
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", a.dim, a.hidden, a.layers, a.heads, a.kv_heads, a.vocab, a.ctx))
        for t in (model.emb.weight, model.att_norm, model.wq, model.wk, model.wv, model.wo, model.ffn_norm,
                  model.w1, model.w2, model.w3, model.out_norm):
            f.write(t.detach().float().cpu().contiguous().numpy().astype("<f4").tobytes())
        inv = 1.0 / (a.rope_base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        ang = np.outer(np.arange(a.ctx), inv)
        f.write(np.cos(ang).astype("<f4").tobytes())
        f.write(np.sin(ang).astype("<f4").tobytes())


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def export(model, data, args, info):
    kv = os.path.join(args.build, "kvbound")
    binp, gguf = os.path.join(args.out, "model.bin"), os.path.join(args.out, "model.gguf")
    write_llama2c(model, binp)
    cmd = [kv, "convert", "-m", binp, "-z", args.tokenizer, "-o", gguf, "--type", args.gguf_type]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("train.py: %s failed: %s" % (" ".join(cmd), r.stderr.strip()))
    # kvbound reads the GGUF: its logits on validation ids against this script's forward
    ids = [BOS] + [int(t) for t in data.val[:min(args.check_tokens, args.ctx) - 1]]
    lb = os.path.join(args.out, "check_logits.bin")
    r = subprocess.run([kv, "logits", "-m", gguf, "--tokens", ",".join(map(str, ids)), "-o", lb], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("train.py: kvbound logits on %s failed: %s" % (gguf, r.stderr.strip()))
    theirs = np.fromfile(lb, dtype="<f4").reshape(len(ids), args.vocab)
    os.unlink(lb)
    with torch.no_grad():
        ours = model(torch.tensor([ids], device=args.device))[0].double().cpu().numpy()
    nmse = float(((theirs - ours) ** 2).sum() / (ours ** 2).sum())
    top1 = float((theirs.argmax(-1) == ours.argmax(-1)).mean())
    info.update({"gguf": gguf, "gguf_sha256": sha256(gguf), "gguf_bytes": os.path.getsize(gguf),
                 "convert_command": " ".join(cmd), "check": {"tokens": len(ids), "nmse": nmse, "top1_agreement": top1}})
    with open(os.path.join(args.out, "export.json"), "w") as f:
        json.dump(info, f, indent=1)
    log("export: %s (%d bytes, sha256 %s); kvbound's logits against ours: NMSE %.3g, top-1 %.3f"
        % (gguf, info["gguf_bytes"], info["gguf_sha256"][:16], nmse, top1))
    if args.gguf_type == "f32" and not (nmse < 1e-6 and top1 >= 0.99):
        raise SystemExit("train.py: the exported model does not read back (NMSE %.3g, top-1 %.3f)" % (nmse, top1))
    return info


def init_from_gguf(model, data, args):
    """Loads an f32 GGUF of the model's shape (llama names, as `kvbound convert` writes llama2.c's layout:
    Q and K unpermuted, output tied), then checks the load: kvbound's logits of that GGUF on validation
    ids against this script's forward (the export's check, the other way). Returns the file's sha256."""
    a = model.a
    try:
        meta, t = read_gguf(args.init_gguf)
    except (OSError, GGUFError) as e:
        raise SystemExit("train.py: --init-gguf: %s" % e)
    want = {"llama.embedding_length": a.dim, "llama.block_count": a.layers, "llama.attention.head_count": a.heads,
            "llama.attention.head_count_kv": a.kv_heads, "llama.feed_forward_length": a.hidden}
    for k, v in want.items():
        if meta.get(k) != v:
            raise SystemExit("train.py: --init-gguf %s: %s is %s, the model's is %s" % (args.init_gguf, k, meta.get(k), v))
    if meta.get("general.architecture") != "llama" or "output.weight" in t:
        raise SystemExit("train.py: --init-gguf %s: not a llama model with its output tied to the embeddings" % args.init_gguf)
    per_layer = {"att_norm": "attn_norm", "ffn_norm": "ffn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
                 "wo": "attn_output", "w1": "ffn_gate", "w2": "ffn_down", "w3": "ffn_up"}
    with torch.no_grad():
        def put(p, arr, name):
            if tuple(arr.shape) != tuple(p.shape):
                raise SystemExit("train.py: --init-gguf: %s has shape %s, the model's %s" % (name, arr.shape, tuple(p.shape)))
            p.copy_(torch.from_numpy(arr))
        put(model.emb.weight, t["token_embd.weight"], "token_embd.weight")
        put(model.out_norm, t["output_norm.weight"], "output_norm.weight")
        for ours, theirs in per_layer.items():
            names = ["blk.%d.%s.weight" % (l, theirs) for l in range(a.layers)]
            missing = [n for n in names if n not in t]
            if missing:
                raise SystemExit("train.py: --init-gguf: no tensor %s" % missing[0])
            put(getattr(model, ours), np.stack([t[n] for n in names]), names[0])
    kv = os.path.join(args.build, "kvbound")
    ids = [BOS] + [int(x) for x in data.val[:min(args.check_tokens, args.ctx) - 1]]
    lb = os.path.join(args.out, "init_logits.bin")
    r = subprocess.run([kv, "logits", "-m", args.init_gguf, "--tokens", ",".join(map(str, ids)), "-o", lb], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("train.py: kvbound logits on %s failed: %s" % (args.init_gguf, r.stderr.strip()))
    theirs = np.fromfile(lb, dtype="<f4").reshape(len(ids), args.vocab)
    os.unlink(lb)
    with torch.no_grad():
        ours = model(torch.tensor([ids], device=args.device))[0].double().cpu().numpy()
    nmse = float(((theirs - ours) ** 2).sum() / (ours ** 2).sum())
    log("init: %s; kvbound's logits against ours: NMSE %.3g" % (args.init_gguf, nmse))
    if not nmse < 1e-6:
        raise SystemExit("train.py: --init-gguf %s did not load as kvbound reads it (NMSE %.3g)" % (args.init_gguf, nmse))
    return sha256(args.init_gguf)


# ---------------------------------------------------------------- training

def evaluate(model, data, args, rng_seed):
    model.eval()
    rng = np.random.default_rng(rng_seed)
    with torch.no_grad(), autocast(args):
        x, y, _ = data.batch(rng, args.eval_rows, args.ctx, args.sink_token, val=True)
        logits, masses = model(x.to(args.device), want_mass=True)
        val = F.cross_entropy(logits.flatten(0, 1), y.to(args.device).flatten(), ignore_index=-100).item()
        ok = 0
        for _ in range(args.eval_rows):
            row, _, targets = data.retrieval_row(rng, args.ctx)
            ids = torch.tensor([row[:-1]], device=args.device)
            pred = model(ids)[0].argmax(-1).cpu().numpy()
            ok += int(all(pred[i] == row[i + 1] for i in targets))
        pk = None
        if args.passkey_share > 0:  # every answer of a passkeys row right, and each ended (EOS)
            pk = 0
            for _ in range(args.eval_rows):
                row, _, targets, eos = data.passkeys_row(rng, args.ctx)
                pred = model(torch.tensor([row[:-1]], device=args.device))[0].argmax(-1).cpu().numpy()
                pk += int(all(pred[i] == row[i + 1] for i in targets) and all(pred[i] == v for i, v in eos.items())
                          and (len(row) - 2 >= len(pred) or pred[len(row) - 2] == EOS))
            pk /= args.eval_rows
    model.train()
    return val, ok / args.eval_rows, masses, pk


def autocast(args):
    """bf16 matmuls under autocast, or nothing with --precision fp32."""
    return torch.autocast(device_type=args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.precision == "bf16")


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr_min + 0.5 * (args.lr - args.lr_min) * (1 + math.cos(math.pi * min(p, 1.0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (checkpoint, loss curve, model.gguf)")
    ap.add_argument("--data", default=os.path.join(REPO, "..", "shared", "data"), help="../shared/data")
    ap.add_argument("--tokenizer", default=None, help="llama2.c tokenizer (default DATA/models/stories260K/tok512.bin)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"), help="kvbound's build folder (kvbound, libkvbound.so)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--sink-token", action="store_true", help="prepend the learnable sink token (BOS) to every text row")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=688)
    ap.add_argument("--ctx", type=int, default=512, help="trained context T")
    ap.add_argument("--rope-base", type=float, default=10000.0)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--micro", type=int, default=4, help="rows per forward pass (gradients accumulate over the batch)")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp32"),
                    help="matmuls in bf16 under autocast (weights, optimizer and softmax in fp32), or all fp32")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-min", type=float, default=1e-4)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--retrieval-share", type=float, default=0.3, help="share of rows built as needle prompts")
    ap.add_argument("--copy-share", type=float, default=0.25, help="share of rows that are a crop (text or random tokens) written twice")
    ap.add_argument("--early-steps", type=int, default=400, help="the first steps draw rows with the --early-* shares")
    ap.add_argument("--early-ctx", type=int, default=0,
                    help="rows of this many tokens in the early steps (a divisor of --ctx; 0: --ctx), --batch x ctx / this of them")
    ap.add_argument("--early-retrieval-share", type=float, default=0.4)
    ap.add_argument("--early-copy-share", type=float, default=0.5)
    ap.add_argument("--passkey-share", type=float, default=0.0,
                    help="share of rows built as `kvbound needle --passkeys N --ask-after` sessions (after the early steps)")
    ap.add_argument("--passkeys-max", type=int, default=4, help="those rows hold 1..this many passkeys")
    ap.add_argument("--init-gguf", default=None,
                    help="start from this f32 GGUF of the same shape (kvb-vanilla-1m.gguf): its weights, checked against kvbound's logits")
    ap.add_argument("--answer-weight", type=float, default=4.0, help="loss weight of a retrieval row's answer tokens")
    ap.add_argument("--holdout", default="pg345_dracula", help="text left out whole, for evaluation")
    ap.add_argument("--val-share", type=float, default=0.05)
    ap.add_argument("--max-text-bytes", type=int, default=0, help="smoke tests: two texts, cut to this many bytes")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-rows", type=int, default=16)
    ap.add_argument("--ckpt-every", type=int, default=200)
    ap.add_argument("--minutes", type=float, default=0, help="stop (checkpoint and export) after this long")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: all cores)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--gguf-type", default="f32", help="kvbound convert --type")
    ap.add_argument("--check-tokens", type=int, default=256, help="ids of the export's logit check")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--export-only", action="store_true", help="export DIR/ckpt.pt as it is (no training)")
    args = ap.parse_args()
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        # glibc maps (and zeroes) every allocation over its threshold afresh: attention's tensors each step
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432", MALLOC_TRIM_THRESHOLD_="4294967296")
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    args.tokenizer = args.tokenizer or os.path.join(args.data, "models", "stories260K", "tok512.bin")
    args.vocab = 512
    if args.early_ctx and (args.early_ctx < 64 or args.ctx % args.early_ctx):
        raise SystemExit("train.py: --early-ctx must be at least 64 and divide --ctx")
    if not 1 <= args.passkeys_max <= 64 or args.passkey_share < 0 or args.passkey_share + args.retrieval_share + args.copy_share > 1:
        raise SystemExit("train.py: --passkeys-max must be in 1..64 and --passkey-share + --retrieval-share + --copy-share at most 1")
    if args.dim % args.heads or args.heads % args.kv_heads:
        raise SystemExit("train.py: --dim must divide by --heads, --heads by --kv-heads")
    os.makedirs(args.out, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    tok = load_tokenizer(args)
    data = Data(tok, args)
    model = Model(args).to(args.device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    keep = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": keep, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    init_sha = init_from_gguf(model, data, args) if args.init_gguf else None
    rng = np.random.default_rng(args.seed)
    step, first_loss = 0, None
    nparam = sum(p.numel() for p in model.parameters())
    recipe = {k: getattr(args, k) for k in ("seed", "sink_token", "dim", "layers", "heads", "kv_heads", "hidden", "ctx", "rope_base",
                                            "steps", "batch", "lr", "lr_min", "warmup", "weight_decay", "retrieval_share", "copy_share", "early_steps", "early_ctx", "early_retrieval_share", "early_copy_share",
                                            "answer_weight", "holdout", "val_share", "max_text_bytes", "precision",
                                            "passkey_share", "passkeys_max")}
    if args.init_gguf:
        recipe["init_gguf_sha256"] = init_sha
    ckpt = os.path.join(args.out, "ckpt.pt")
    if os.path.exists(ckpt):
        st = torch.load(ckpt, map_location=args.device)
        if st["config"] != recipe:
            raise SystemExit("train.py: %s was trained with another configuration; use another --out" % ckpt)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        rng.bit_generator.state = st["rng"]
        torch.set_rng_state(st["torch_rng"])
        step = st["step"]
        first_loss = st.get("first_loss")
        log("resumed at step %d" % step)
    log("model: %d parameters; %d steps of %d x %d tokens on %s (%d threads)" % (nparam, args.steps, args.batch, args.ctx, args.device, torch.get_num_threads()))
    curve = open(os.path.join(args.out, "loss.jsonl"), "a")
    t0, tok_done = time.time(), 0

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(), "step": step, "config": recipe, "first_loss": first_loss}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    ema = None
    while step < args.steps and not args.export_only:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        # the early steps may use shorter rows, as many tokens a step (a cheap start for induction heads)
        tn = args.early_ctx if args.early_ctx and step < args.early_steps else args.ctx
        rows, micro = args.batch * args.ctx // tn, args.micro * args.ctx // tn
        x, y, w = data.batch(rng, rows, tn, args.sink_token, step=step)
        x, y, w = x.to(args.device), y.to(args.device), w.to(args.device)
        opt.zero_grad(set_to_none=True)
        wsum, lv = w.sum(), 0.0
        for r in range(0, rows, micro):  # micro-batches: the same sum, smaller attention tensors
            with autocast(args):
                logits = model(x[r:r + micro])
            per = F.cross_entropy(logits.flatten(0, 1), y[r:r + micro].flatten(), ignore_index=-100, reduction="none")
            loss = (per * w[r:r + micro].flatten()).sum() / wsum
            loss.backward()
            lv += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tok_done += int((y >= 0).sum())
        first_loss = lv if first_loss is None else first_loss
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        done = step == args.steps or (args.minutes and time.time() - t0 > args.minutes * 60)
        if step % args.eval_every == 0 or done or step == 1:
            val, acc, masses, pk = evaluate(model, data, args, args.seed + 7)
            el = time.time() - t0
            rec = {"step": step, "train_loss": round(lv, 4), "train_loss_ema": round(ema, 4), "val_loss": round(val, 4),
                   "retrieval_acc": acc, "sink_mass": [round(m, 3) for m in masses], "lr": lr_at(step - 1, args),
                   "tokens": tok_done, "elapsed_s": round(el, 1), "tok_per_s": round(tok_done / max(el, 1e-9))}
            if pk is not None:
                rec["passkeys_acc"] = pk
            curve.write(json.dumps(rec) + "\n")
            curve.flush()
            log("step %d/%d  loss %.3f  val %.3f  retrieval %.2f%s  sink mass %s  %.0f tok/s  %.1f min"
                % (step, args.steps, ema, val, acc, "" if pk is None else "  passkeys %.2f" % pk,
                   " ".join("%.2f" % m for m in masses), rec["tok_per_s"], el / 60))
        if step % args.ckpt_every == 0 or done:
            save()
        if done:
            break
    curve.close()
    info = {"recipe": recipe, "parameters": nparam, "steps_done": step, "first_loss": first_loss, "last_loss_ema": ema,
            "train_command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), "torch": torch.__version__}
    if not args.no_export:
        export(model, data, args, info)
    print(json.dumps({"steps": step, "first_loss": first_loss, "last_loss": ema, "out": args.out}))


if __name__ == "__main__":
    main()
