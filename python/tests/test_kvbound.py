"""Tests of the Python bindings against the library and the shared models.
Run by tests/test_python_cli.sh (make test) under Debian's python3; prints
"ok NAME" / "FAIL NAME" and "cases: P passed, F failed, S skipped"."""
import math
import os
import random
import sys
import traceback

import kvbound

D = os.environ.get("KVB_SHARED_DATA", "../shared/data")
G = os.path.join(D, "models/stories260K/stories260K.llamacpp.gguf")
TEXT = os.path.join(D, "text/tinystories_validation_head.txt")
REF = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, "
       "red ball. She wanted to play with it, but it was too high.\nLily")
cases = []


def case(f):
    cases.append(f)
    return f


@case
def version_and_abi():
    assert kvbound.__version__ == os.environ.get("KVB_EXPECT_VERSION", kvbound.__version__), kvbound.__version__
    assert "lminfinite" in kvbound.policies() and "snapkv" in kvbound.policies()


@case
def tokenize_and_detokenize():
    with kvbound.Model(G) as m:
        ids = m.tokenize("Once upon a time")
        assert ids == [1, 403, 407, 261, 378], ids
        assert m.detokenize(ids[1:]) == " Once upon a time", repr(m.detokenize(ids[1:]))


@case
def generate_greedy_bounded():
    m = kvbound.Model(G)
    text = "Once upon a time" + "".join(m.generate("Once upon a time", 60, policy="streaming", budget=64))
    assert text == REF, repr(text)
    with kvbound.Model(G, mmap=False) as mr:  # weights read into memory: the same text
        assert "Once upon a time" + "".join(mr.generate("Once upon a time", 60, policy="streaming", budget=64)) == REF
    # far past the trained length, memory stays at the budget
    n = sum(1 for _ in m.generate("Once upon a time", 400, policy="streaming", budget=32, stop_at_eos=False))
    st = m.last_context.cache_stats()
    assert n > 300 and st["slots_max"] == 32 and m.last_context.n_past > 400, (n, st)


@case
def perplexity_matches_published_figures():
    m = kvbound.Model(G)
    text = open(TEXT, encoding="utf-8").read()[:60000]
    r = kvbound.perplexity(m, text, policy="window", budget=64, max_tokens=500)
    assert abs(r["ppl"] - 4.0041) < 6e-4 and abs(r["baseline_ppl"] - 3.7659) < 2e-4 and r["tokens"] == 499, r
    r = kvbound.perplexity(m, text, policy="snapkv", budget=64, prompt=400, max_tokens=500)
    assert abs(r["ppl"] - 3.4729) < 6e-4 and abs(r["prompt_kept"] - 64) < 1e-9 and r["tokens"] == 100, r
    r = kvbound.perplexity(m, text, policy="tova", budget=64, max_tokens=500, tova_scope="head")
    assert abs(r["ppl"] - 4.5692) < 6e-4, r


@case
def kvzip_through_python():
    # policy="kvzip" (issue 52): the prompt scored by its reconstruction pass, kept at 64 a stream on average (non-uniform
    # budgets), its extra prefill reported; generation with it runs
    m = kvbound.Model(G)
    text = open(TEXT, encoding="utf-8").read()[:60000]
    r = kvbound.perplexity(m, text, policy="kvzip", budget=64, prompt=400, max_tokens=500)
    assert abs(r["prompt_kept"] - 64) < 1e-9 and r["prompt_kept_max"] > 64 and r["tokens"] == 100, r
    assert r["kvzip_context_tokens"] == 400 and 400 < r["kvzip_pass_tokens"] <= 464, r
    assert abs(r["kvzip_prefill_ratio"] - r["kvzip_pass_tokens"] / 400) < 1e-12, r
    assert len(list(m.generate("Once upon a time", 20, policy="kvzip", budget=32, stop_at_eos=False))) == 20


@case
def cache_with_own_scores_h2o_trace():
    c = kvbound.Cache(policy="h2o", budget=6, n_sink=2, head_dim=4, block_size=4)
    for s in [0.95, 0.85, 0.10, 0.90, 0.05, 0.20, 0.15, 0.75]:
        c.append(0)
        w = [0.0] * len(c.positions())
        w[-1] = s
        c.observe(0, 0, w)
        c.evict(0)
    assert c.positions() == [0, 1, 3, 5, 6, 7], c.positions()


@case
def cache_with_own_qkv_equals_reference_attention():
    """Full attention through the bindings equals a softmax written here (no RoPE);
    a window of 8 keeps the last 8 keys and attends to them alone."""
    rnd = random.Random(3)
    d, hq = 8, 2
    for policy, budget in (("full", 0), ("window", 8)):
        c = kvbound.Cache(policy=policy, budget=budget, head_dim=d)
        keys, vals = [], []
        worst = 0.0
        for t in range(20):
            q = [rnd.uniform(-1, 1) for _ in range(hq * d)]
            k = [rnd.uniform(-1, 1) for _ in range(d)]
            v = [rnd.uniform(-1, 1) for _ in range(d)]
            keys.append(k)
            vals.append(v)
            out = c.decode(0, q, k, v)
            ks, vs = (keys, vals) if policy == "full" else (keys[-(budget + 1):], vals[-(budget + 1):])
            for h in range(hq):
                qh = q[h * d:(h + 1) * d]
                s = [sum(a * b for a, b in zip(qh, kk)) / math.sqrt(d) for kk in ks]
                mx = max(s)
                e = [math.exp(x - mx) for x in s]
                z = sum(e)
                ref = [sum(e[j] / z * vs[j][i] for j in range(len(vs))) for i in range(d)]
                worst = max(worst, max(abs(a - b) for a, b in zip(out[h * d:(h + 1) * d], ref)))
        assert worst < 1e-5, (policy, worst)
        assert len(c.positions()) == (20 if policy == "full" else budget), c.positions()


@case
def recall_attends_hot_plus_recalled_tokens():
    """A window of 8 with 2 recalled pages of 4: each output is the softmax over the
    window (plus the new token) and the recalled positions, written here (no RoPE)."""
    rnd = random.Random(5)
    d, hq = 8, 2
    c = kvbound.Cache(policy="window", budget=8, head_dim=d, block_size=4, recall_pages=2)
    keys, vals, worst, recalled_any = [], [], 0.0, False
    for t in range(60):
        q = [rnd.uniform(-2, 2) for _ in range(hq * d)]
        k = [rnd.uniform(-1, 1) * (3 if t % 11 == 2 else 1) for _ in range(d)]
        v = [rnd.uniform(-1, 1) for _ in range(d)]
        keys.append(k)
        vals.append(v)
        hot = c.positions() + [t]
        out = c.decode(0, q, k, v)
        rec = c.recalled()
        assert not set(rec) & set(hot) and len(rec) <= 8, (rec, hot)
        recalled_any |= bool(rec)
        att = hot + rec
        for h in range(hq):
            qh = q[h * d:(h + 1) * d]
            s = [sum(a * b for a, b in zip(qh, keys[p])) / math.sqrt(d) for p in att]
            mx = max(s)
            e = [math.exp(x - mx) for x in s]
            z = sum(e)
            ref = [sum(e[j] / z * vals[att[j]][i] for j in range(len(att))) for i in range(d)]
            worst = max(worst, max(abs(a - b) for a, b in zip(out[h * d:(h + 1) * d], ref)))
    st = c.stats()
    assert worst < 1e-5 and recalled_any, worst
    assert st["cold_pages"] * 4 + st["cold_staged_tokens"] + st["slots"] == 60 and st["recall_bytes"] > 0, st


@case
def saved_recall_cache_continues_exactly():
    """A cache with recall saved mid-stream (bytes) and loaded continues with the
    very outputs of the one that went on; a damaged image raises."""
    rnd = random.Random(9)
    d, hq = 8, 2
    a = kvbound.Cache(policy="h2o", budget=8, head_dim=d, block_size=4, recall_pages=2)
    steps = [([rnd.uniform(-2, 2) for _ in range(hq * d)], [rnd.uniform(-1, 1) for _ in range(d)], [rnd.uniform(-1, 1) for _ in range(d)])
             for _ in range(70)]
    for q, k, v in steps[:40]:
        a.decode(0, q, k, v)
    image = a.save()
    b = kvbound.Cache.load(image)
    assert b.stats()["cold_pages"] == a.stats()["cold_pages"] > 0 and b.recalled() == a.recalled(), (b.stats(), a.stats())
    for q, k, v in steps[40:]:
        assert a.decode(0, q, k, v) == b.decode(0, q, k, v)
    assert b.positions() == a.positions() and b.save() == a.save()
    bad = bytearray(image)
    bad[len(bad) // 2] ^= 0x40
    try:
        kvbound.Cache.load(bytes(bad))
        raise AssertionError("a damaged image loaded")
    except kvbound.KvboundError as e:
        assert "checksum" in str(e), e


@case
def quantized_kv_rows_attend_close_to_f32():
    """q8_0 K and V rows (head_dim 64: whole blocks of 32) through the
    bindings: outputs within q8_0's rounding of the f32 cache's."""
    rnd = random.Random(5)
    d, hq = 64, 2
    c32 = kvbound.Cache(policy="full", budget=0, head_dim=d, dtype="f32")
    c8 = kvbound.Cache(policy="full", budget=0, head_dim=d, dtype="q8_0")
    worst = 0.0
    for t in range(40):
        q = [rnd.uniform(-1, 1) for _ in range(hq * d)]
        k = [rnd.uniform(-1, 1) for _ in range(d)]
        v = [rnd.uniform(-1, 1) for _ in range(d)]
        a, b = c32.decode(0, q, k, v), c8.decode(0, q, k, v)
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
    assert 0 < worst < 2e-2, worst
    try:
        kvbound.Cache(policy="full", budget=0, head_dim=40, dtype="q4_0")
        raise AssertionError("no exception")
    except kvbound.KvboundError as e:
        assert "head_dim 40" in str(e), str(e)


@case
def errors_raise_with_the_library_message():
    try:
        kvbound.Model("/nonexistent.gguf")
        raise AssertionError("no exception")
    except kvbound.KvboundError as e:
        assert "/nonexistent.gguf" in str(e) and "No such file" in str(e), str(e)
    try:
        kvbound.Cache(policy="nope")
        raise AssertionError("no exception")
    except kvbound.KvboundError as e:
        assert "unknown policy 'nope'" in str(e), str(e)
    try:
        kvbound.Cache(policy="h2o", budget=4, n_sink=8)
        raise AssertionError("no exception")
    except kvbound.KvboundError as e:
        assert "budget (4) must exceed n_sink (8)" in str(e), str(e)


def raises_value_error(f, *names):
    """f() raises ValueError whose message names every one of names."""
    try:
        f()
    except ValueError as e:
        for n in names:
            assert n in str(e), (n, str(e))
        return str(e)
    raise AssertionError("no ValueError naming %s" % (names,))


@case
def one_kv_config_drives_context_cache_and_perplexity():
    kv = kvbound.KVConfig("streaming", 64)
    m = kvbound.Model(G)
    text = "Once upon a time" + "".join(m.context(kv=kv).generate("Once upon a time", 60))
    assert text == REF, repr(text)  # the same text as the keywords give (generate_greedy_bounded)
    t = open(TEXT, encoding="utf-8").read()[:60000]
    r = kvbound.perplexity(m, t, kv=kvbound.KVConfig("window", 64, kv_dtype="f32"), max_tokens=500)
    assert abs(r["ppl"] - 4.0041) < 6e-4, r
    # the sizing rule, against the formula of include/kvbound.h written here: per stream,
    # ceil((budget + chunk) / 16) + 2 pages of 16 f16 K and V rows, over 5 layers x 4 KV heads of 8
    info = m.info
    L, H, Dh = info["n_layer"], info["n_head_kv"], info["head_dim"]
    page = 16 * 2 * 2 * Dh
    assert kv.seq_bytes(L, H, Dh, 512, 100, 32) == ((64 + 32 + 15) // 16 + 2) * L * H * page
    full = kvbound.KVConfig("full")
    assert full.seq_bytes(L, H, Dh, 512, 100, 32) == ((512 + 32 + 15) // 16 + 2) * L * H * page
    snap = kvbound.KVConfig("snapkv", 64)  # the prompt is read whole before it is compressed
    assert snap.seq_bytes(L, H, Dh, 512, 300, 32) == ((300 + 32 + 15) // 16 + 2) * L * H * page
    pinned = kvbound.KVConfig("h2o", 64, keep=40)  # the pinned span sits on top of the budget
    assert pinned.seq_bytes(L, H, Dh, 512, 100, 32) == ((64 + 40 + 32 + 15) // 16 + 2) * L * H * page
    raises_value_error(lambda: kvbound.KVConfig("h2o", 64, kv_dtype="f8"), "kv_dtype", "'f8'")
    raises_value_error(lambda: kvbound.KVConfig("h2o", 64, positions="sideways"), "positions")
    try:
        kvbound.KVConfig("h2o", 64, heavy=0.5)
        raise AssertionError("no exception")
    except TypeError as e:
        assert "heavy" in str(e), str(e)


@case
def bad_arguments_raise_value_error_naming_them():
    c = kvbound.Cache(n_layer=2, n_kv_head=2, head_dim=4, policy="full", budget=0)
    q, kv = [0.5] * 16, [1.0] * 8  # 4 query heads over 2 KV heads of 4
    assert len(c.decode(0, q, kv, kv)) == 16
    raises_value_error(lambda: c.decode(0, q, kv[:7], kv), "k:", "expected 8 floats", "got 7")
    raises_value_error(lambda: c.decode(0, q, kv, kv + [1.0]), "v:", "got 9")
    raises_value_error(lambda: c.decode(0, q[:14], kv, kv), "q:", "14 floats", "n_kv_head (2)")
    raises_value_error(lambda: c.decode(0, q[:4], kv, kv), "q:", "4 floats")  # one query head for two KV heads
    raises_value_error(lambda: c.decode(0, [], kv, kv), "q:")
    raises_value_error(lambda: c.decode(2, q, kv, kv), "layer", "0..1")
    assert len(c.prefill(1, 3, q * 3, kv * 3, kv * 3)) == 48
    raises_value_error(lambda: c.prefill(1, 3, q * 3, kv * 2, kv * 3), "k:", "expected 24 floats", "got 16")
    raises_value_error(lambda: c.prefill(1, 3, q * 3, kv * 3, kv * 4), "v:", "got 32")
    raises_value_error(lambda: c.prefill(1, 3, q * 2, kv * 3, kv * 3), "q:", "32 floats", "n_tok (3)")
    raises_value_error(lambda: c.prefill(1, 0, [], [], []), "n_tok")
    with kvbound.Model(G) as m:
        for bad in (-0.5, float("nan"), float("inf"), "warm"):
            raises_value_error(lambda: m.generate("Once", 5, temp=bad), "temp")
        ctx = m.context(policy="streaming", budget=32)
        raises_value_error(lambda: ctx.generate("Once", 5, temp=-1), "temp")
        raises_value_error(lambda: m.generate("Once", 5, top_p=0), "top_p")
        raises_value_error(lambda: m.generate("Once", 5, min_p=1.5), "min_p")
        raises_value_error(lambda: m.generate("Once", 5, top_k=-1), "top_k")
        raises_value_error(lambda: m.generate("Once", -1), "n_tokens")
        assert ctx.n_past == 0  # nothing ran
        assert "".join(m.generate("Once upon a time", 60, temp=0, stop_at_eos=False)) == REF[len("Once upon a time"):], "greedy text changed"


@case
def chat_apply_renders_jinja():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "héllo"}]
    t = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}{{ tools | tojson }}{{ x }}"
    assert kvbound.chat_apply(msgs, template=t, tools=[{"type": "function"}], x=5) == '<system>S<user>héllo<a>[{"type": "function"}]5'
    assert kvbound.chat_apply(msgs, template=t, add_generation_prompt=False) == "<system>S<user>héllonull"
    try:
        kvbound.chat_apply(msgs, template="\n{{ raise_exception('no') }}")
        raise AssertionError("no error")
    except kvbound.KvboundError as e:
        assert "template line 2: raise_exception: no" in str(e), e
    with kvbound.Model(G) as m:  # no template in this model
        try:
            kvbound.chat_apply(msgs, model=m)
            raise AssertionError("no error")
        except kvbound.KvboundError as e:
            assert "no template" in str(e), e


try:
    import numpy as np

    @case
    def numpy_arrays_in_and_out():
        c = kvbound.Cache(policy="full", budget=0, head_dim=4)
        out = c.decode(0, np.ones(8, dtype=np.float64), np.ones(4), np.arange(4.0))
        assert isinstance(out, np.ndarray) and out.shape == (8,) and np.allclose(out, [0, 1, 2, 3, 0, 1, 2, 3]), out
except ImportError:
    print("(NumPy not installed: the array case is not run)")

passed = failed = 0
for f in cases:
    try:
        f()
        print("ok   " + f.__name__)
        passed += 1
    except Exception:
        print("FAIL " + f.__name__)
        traceback.print_exc(limit=3, file=sys.stdout)
        failed += 1
print("cases: %d passed, %d failed, 0 skipped" % (passed, failed))
sys.exit(1 if failed else 0)
