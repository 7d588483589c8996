"""kvbound — Python bindings for libkvbound, the bounded-memory KV cache.

Standard library only (ctypes over the shared library); NumPy is optional
(arrays are accepted and returned when it is installed). The library is found
through the KVBOUND_LIBRARY path if set, else the system's library path
(``libkvbound.so.0.2``, then ``libkvbound.so``). Every struct layout is checked
against the library's own sizes at import (``kvb_abi_sizeof``), so a
mismatched library fails loudly instead of corrupting memory.

    import kvbound
    model = kvbound.Model("stories260K.gguf")
    for piece in model.generate("Once upon a time", 100, policy="streaming", budget=64):
        print(piece, end="")
    print(kvbound.perplexity(model, open("book.txt").read(), policy="h2o", budget=128, max_tokens=500))

    cache = kvbound.Cache(n_layer=1, n_kv_head=1, head_dim=8, policy="h2o", budget=32)
    out = cache.decode(0, q, k, v)        # your own q/k/v: lists or NumPy arrays
"""
import ctypes
import ctypes.util
import json
import math
import operator
import os

try:  # optional
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None

__all__ = ["KvboundError", "KVConfig", "Model", "Context", "Cache", "perplexity", "policies", "chat_apply", "library_version", "__version__"]


class KvboundError(Exception):
    """A libkvbound call failed; the message is the library's (kvb_last_error)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _load_library():
    path = os.environ.get("KVBOUND_LIBRARY")
    candidates = [path] if path else ["libkvbound.so.0.2", ctypes.util.find_library("kvbound"), "libkvbound.so"]
    errors = []
    for c in candidates:
        if not c:
            continue
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            errors.append("%s: %s" % (c, e))
    raise ImportError("kvbound: cannot load libkvbound (set KVBOUND_LIBRARY to its path): " + "; ".join(errors))


_lib = _load_library()
_c = ctypes
_i32, _i64, _u32, _u64, _f32, _f64, _sz = _c.c_int32, _c.c_int64, _c.c_uint32, _c.c_uint64, _c.c_float, _c.c_double, _c.c_size_t
_enum = _c.c_int
_fp = _c.POINTER(_c.c_float)
_ip = _c.POINTER(_c.c_int32)


class _Rope(_c.Structure):
    _fields_ = [("type", _enum), ("n_dims", _i32), ("base", _f32), ("freq_scale", _f32), ("freq_factors", _fp)]


class _PolicyParams(_c.Structure):
    _fields_ = [("id", _enum), ("budget", _i32), ("budget_frac", _f32), ("n_sink", _i32), ("n_recent", _i32),
                ("heavy_ratio", _f32), ("obs_window", _i32), ("pool_kernel", _i32), ("pyramid_beta", _f32),
                ("ada_floor", _f32), ("history", _i32), ("threshold", _i32), ("pool_mode", _enum),
                ("decode_budget", _i32), ("prefill_budget", _i32), ("tova_scope", _enum),
                ("compress_prompt", _i32)]


class _RecallParams(_c.Structure):
    _fields_ = [("pages", _i32), ("every", _i32), ("cold_mem_bytes", _sz), ("cold_dir", _c.c_char_p), ("summary", _enum)]


_SUMMARY = {"bounds": 0, "centroid": 1, "exact": 2}


def _recall_params(rp, recall_pages, recall_every=1, cold_mb=1024, cold_dir=None, recall_summary="bounds"):
    """Fills a _RecallParams (recall off when recall_pages is 0); returns the bytes that must outlive it."""
    rp.pages = int(recall_pages)
    rp.every = int(recall_every)
    rp.cold_mem_bytes = int(cold_mb) << 20
    keep = cold_dir.encode() if isinstance(cold_dir, str) else cold_dir
    rp.cold_dir = keep
    rp.summary = _SUMMARY[recall_summary]
    return keep


class _KvParams(_c.Structure):
    """struct kvb_kv_params: the one KV configuration every params struct that makes a cache embeds."""
    _fields_ = [("policy", _PolicyParams), ("pos_mode", _enum), ("max_distance", _i32), ("kv_dtype", _enum), ("kv_dtype_v", _enum),
                ("block_size", _i32), ("recall", _RecallParams), ("layers", _c.c_void_p), ("n_layers", _i32),
                ("keep", _i32)]


class _CacheParams(_c.Structure):
    _fields_ = [("n_layer", _i32), ("n_kv_head", _i32), ("head_dim", _i32), ("rope", _Rope), ("no_rope", _c.c_void_p), ("pool_bytes", _sz),
                ("kv", _KvParams), ("rope_swa", _Rope), ("attn_softcap", _f32), ("sinks", _fp), ("n_sink_heads", _i32),
                ("recurrent", _c.c_void_p), ("state_rows", _i32), ("state_row_floats", _i32), ("kv_source", _c.c_void_p),
                ("kv_heads", _c.c_void_p), ("head_dim_v", _i32)]


class _CacheStats(_c.Structure):
    _fields_ = [("bytes_used", _sz), ("bytes_reserved", _sz), ("bytes_peak", _sz), ("pages_in_use", _i64),
                ("pages_free", _i64), ("slots", _i64), ("slots_max", _i32), ("slots_min", _i32),
                ("recall_bytes", _sz), ("cold_pages", _i64), ("cold_mem_bytes", _sz), ("cold_file_bytes", _sz),
                ("cold_staged_tokens", _i64), ("cold_dropped_pages", _i64), ("recall_scorings", _i64), ("recall_loads", _i64),
                ("recall_score_s", _f64), ("recall_load_s", _f64), ("window_layers", _i32), ("window_slots", _i64),
                ("window_pages", _i64), ("state_layers", _i32), ("state_pages", _i64), ("state_bytes", _sz),
                ("query_stats_bytes", _sz)]


class _SlotInfo(_c.Structure):
    _fields_ = [("pos_original", _i64), ("pos_cache", _i64), ("score", _f32), ("page", _i32)]


class _ModelParams(_c.Structure):
    _fields_ = [("tokenizer_path", _c.c_char_p), ("no_mmap", _c.c_bool)]


class _ModelInfo(_c.Structure):
    _fields_ = [("arch", _c.c_char * 16), ("source", _c.c_char * 16), ("n_vocab", _i32), ("n_embd", _i32), ("n_layer", _i32),
                ("n_head", _i32), ("n_head_kv", _i32), ("head_dim", _i32), ("n_ff", _i32), ("n_ctx_train", _i32),
                ("rms_eps", _f32), ("rope_base", _f32), ("rope_freq_scale", _f32), ("rope_dims", _i32), ("rope_type", _enum),
                ("tied_output", _c.c_bool), ("has_qkv_bias", _c.c_bool), ("weight_type", _u32), ("weight_bytes", _sz),
                ("kv_bytes_per_token_f16", _sz), ("features", _c.c_char * 512), ("sliding_window", _i32), ("n_swa_layers", _i32),
                ("n_expert", _i32), ("n_expert_used", _i32), ("n_ff_exp", _i32), ("n_moe_layers", _i32), ("expert_bytes_per_token", _sz),
                ("n_ff_shexp", _i32), ("n_rec_layers", _i32), ("ssm_conv", _i32), ("ssm_state", _i32), ("ssm_groups", _i32),
                ("ssm_heads", _i32), ("n_nextn_layers", _i32), ("shortconv", _c.c_bool), ("mamba2", _c.c_bool), ("state_bytes", _sz), ("attn_gated", _c.c_bool), ("head_dim_swa", _i32),
                ("n_kv_shared", _i32), ("n_embd_per_layer", _i32), ("n_head_kv_swa", _i32), ("n_head_kv_global", _i32),
                ("n_kv_shared_swa", _i32), ("kv_lora_rank", _i32), ("q_lora_rank", _i32), ("head_dim_k_mla", _i32),
                ("head_dim_v_mla", _i32), ("n_expert_groups", _i32), ("n_expert_groups_used", _i32), ("ssm_inner", _i32)]


class _ContextParams(_c.Structure):
    _fields_ = [("kv", _KvParams), ("kv_pool_bytes", _sz), ("n_threads", _i32), ("n_ctx", _i32), ("chunk", _i32)]


class _SamplerParams(_c.Structure):
    _fields_ = [("temp", _f32), ("top_k", _i32), ("top_p", _f32), ("min_p", _f32), ("repeat_penalty", _f32),
                ("repeat_last_n", _i32), ("seed", _u64), ("presence_penalty", _f32), ("frequency_penalty", _f32),
                ("logit_bias", _c.c_void_p), ("n_logit_bias", _i32)]


_PROGRESS = _c.CFUNCTYPE(None, _i64, _i64, _c.c_void_p)


class _PplParams(_c.Structure):
    _fields_ = [("kv", _KvParams), ("chunk", _i32), ("baseline", _enum), ("mass", _c.c_bool),
                ("n_threads", _i32), ("segment", _i32), ("prompt", _i32),
                ("progress", _c.c_void_p), ("user", _c.c_void_p)]


_dp = _c.POINTER(_c.c_double)


class _PplResult(_c.Structure):
    _fields_ = [("tokens", _i64), ("nll", _f64), ("ppl", _f64), ("has_baseline", _c.c_bool), ("base_nll", _f64),
                ("base_ppl", _f64), ("has_kl", _c.c_bool), ("kl", _f64), ("top1", _f64), ("has_mass", _c.c_bool),
                ("mass", _f64), ("mass_layer", _dp), ("n_layer", _i32), ("sink_mass", _f64), ("sink_mass_layer", _dp),
                ("kv_bytes_peak", _sz), ("recall_bytes", _sz), ("cold_pages", _i64), ("recall_score_s", _f64),
                ("recall_load_s", _f64), ("prompt_kept", _f64), ("prompt_kept_min", _i32), ("prompt_kept_max", _i32),
                ("tok_per_s", _f64), ("nll_tok", _dp), ("base_nll_tok", _dp), ("n_seg", _i32), ("seg_ppl", _dp),
                ("kvzip_pass_tokens", _i64), ("kvzip_context_tokens", _i64)]


class _Detok(_c.Structure):
    _fields_ = [("held", _c.c_char * 4), ("n_held", _c.c_int)]


class _ChatApplyParams(_c.Structure):
    _fields_ = [("template_text", _c.c_char_p), ("vocab", _c.c_void_p), ("messages_json", _c.c_char_p), ("tools_json", _c.c_char_p),
                ("vars_json", _c.c_char_p), ("add_generation_prompt", _c.c_bool), ("fallback", _c.c_bool), ("max_output", _c.c_size_t),
                ("deadline_ms", _c.c_int32), ("strip_bos", _c.c_bool), ("why", _c.c_char_p), ("why_cap", _c.c_size_t)]


def _fn(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_vp = _c.c_void_p
_version = _fn("kvb_version", _c.c_char_p)
_abi_sizeof = _fn("kvb_abi_sizeof", _sz, _c.c_char_p)
_last_error = _fn("kvb_last_error", _c.c_char_p)
_buffer_free = _fn("kvb_buffer_free", None, _vp)
_policy_from_name = _fn("kvb_policy_from_name", _enum, _c.c_char_p, _c.POINTER(_enum))
_policy_name = _fn("kvb_policy_name", _c.c_char_p, _enum)
_policy_describe = _fn("kvb_policy_describe", _c.c_char_p, _enum)
_policy_default = _fn("kvb_policy_default_params", _PolicyParams, _enum)
_cache_default = _fn("kvb_cache_default_params", _CacheParams)
_kv_default = _fn("kvb_kv_default_params", _KvParams)
_kv_seq_bytes = _fn("kvb_kv_seq_bytes", _sz, _c.POINTER(_KvParams), _i32, _i32, _i32, _i64, _i64, _i32)
_model_kv_seq_bytes = _fn("kvb_model_kv_seq_bytes", _sz, _vp, _c.POINTER(_KvParams), _i64, _i64, _i32)
_cache_init = _fn("kvb_cache_init", _enum, _vp, _c.POINTER(_CacheParams), _c.POINTER(_vp))
_cache_free = _fn("kvb_cache_free", None, _vp)
_cache_decode = _fn("kvb_cache_decode", _enum, _vp, _i32, _fp, _i32, _fp, _fp, _fp, _vp)
_cache_prefill = _fn("kvb_cache_prefill", _enum, _vp, _i32, _i32, _fp, _i32, _fp, _fp, _fp, _vp)
_cache_compress = _fn("kvb_cache_compress", None, _vp, _vp)
_cache_append = _fn("kvb_cache_append", _enum, _vp, _i32, _fp, _fp)
_cache_observe = _fn("kvb_cache_observe", _enum, _vp, _i32, _i32, _fp, _i32)
_cache_evict = _fn("kvb_cache_evict", None, _vp, _i32)
_cache_n_slots = _fn("kvb_cache_n_slots", _i32, _vp, _i32, _i32)
_cache_budget = _fn("kvb_cache_budget", _i32, _vp, _i32, _i32)
_cache_slot_info = _fn("kvb_cache_slot_info", _enum, _vp, _i32, _i32, _i32, _c.POINTER(_SlotInfo))
_cache_stats = _fn("kvb_cache_get_stats", None, _vp, _c.POINTER(_CacheStats))
_cache_recalled = _fn("kvb_cache_recalled", _i32, _vp, _i32, _i32, _ip, _i32)
_cache_save = _fn("kvb_cache_save", _enum, _vp, _c.POINTER(_vp), _c.POINTER(_c.c_size_t))
_cache_load = _fn("kvb_cache_load", _enum, _vp, _c.c_char_p, _c.c_size_t, _c.c_size_t, _c.POINTER(_vp))
_cache_get_params = _fn("kvb_cache_get_params", None, _vp, _c.POINTER(_CacheParams))
_cache_set_cold_dir = _fn("kvb_cache_set_cold_dir", _enum, _vp, _c.c_char_p)
_buffer_free = _fn("kvb_buffer_free", None, _vp)
_model_default = _fn("kvb_model_default_params", _ModelParams)
_model_load = _fn("kvb_model_load", _enum, _c.c_char_p, _c.POINTER(_ModelParams), _c.POINTER(_vp))
_model_free = _fn("kvb_model_free", None, _vp)
_model_info = _fn("kvb_model_get_info", None, _vp, _c.POINTER(_ModelInfo))
_model_vocab = _fn("kvb_model_vocab", _vp, _vp)
_tokenize = _fn("kvb_vocab_tokenize", _enum, _vp, _c.c_char_p, _sz, _c.c_bool, _c.c_bool, _c.POINTER(_ip), _c.POINTER(_i32))
_vocab_special = _fn("kvb_vocab_special", _i32, _vp, _c.c_int)
_detok_push = _fn("kvb_detok_push", _sz, _vp, _c.POINTER(_Detok), _i32, _c.c_bool, _c.c_char_p, _sz)
_detok_flush = _fn("kvb_detok_flush", _sz, _c.POINTER(_Detok), _c.c_char_p, _sz)
_ctx_default = _fn("kvb_context_default_params", _ContextParams)
_ctx_init = _fn("kvb_context_init", _enum, _vp, _c.POINTER(_ContextParams), _c.POINTER(_vp))
_ctx_free = _fn("kvb_context_free", None, _vp)
_ctx_eval = _fn("kvb_context_eval", _enum, _vp, _ip, _i32, _fp, _c.c_bool)
_ctx_prompt = _fn("kvb_context_prompt", _enum, _vp, _ip, _i32, _fp, _c.c_bool)
_ctx_cache = _fn("kvb_context_cache", _vp, _vp)
_ctx_n_past = _fn("kvb_context_n_past", _i64, _vp)
_ctx_save = _fn("kvb_context_save", _enum, _vp, _c.c_char_p)
_ctx_load = _fn("kvb_context_load", _enum, _vp, _c.c_char_p)
_sampler_default = _fn("kvb_sampler_default_params", _SamplerParams)
_sampler_init = _fn("kvb_sampler_init", _enum, _c.POINTER(_SamplerParams), _i32, _c.POINTER(_vp))
_sampler_free = _fn("kvb_sampler_free", None, _vp)
_sampler_sample = _fn("kvb_sampler_sample", _i32, _vp, _fp, _ip, _i32)
_ppl_default = _fn("kvb_ppl_default_params", _PplParams)
_eval_ppl = _fn("kvb_eval_ppl", _enum, _vp, _ip, _i64, _c.POINTER(_PplParams), _c.POINTER(_PplResult))
_ppl_free = _fn("kvb_ppl_result_free", None, _c.POINTER(_PplResult))
_chat_apply_default = _fn("kvb_chat_apply_default_params", _ChatApplyParams)
_chat_apply = _fn("kvb_chat_apply", _enum, _c.POINTER(_ChatApplyParams), _c.POINTER(_vp), _c.POINTER(_c.c_size_t))

for _name, _cls in [("kvb_rope", _Rope), ("kvb_policy_params", _PolicyParams), ("kvb_kv_params", _KvParams), ("kvb_cache_params", _CacheParams),
                    ("kvb_cache_stats", _CacheStats), ("kvb_slot_info", _SlotInfo), ("kvb_model_params", _ModelParams),
                    ("kvb_model_info", _ModelInfo), ("kvb_context_params", _ContextParams), ("kvb_sampler_params", _SamplerParams),
                    ("kvb_ppl_params", _PplParams), ("kvb_ppl_result", _PplResult), ("kvb_detok", _Detok),
                    ("kvb_chat_apply_params", _ChatApplyParams)]:
    if _abi_sizeof(_name.encode()) != _c.sizeof(_cls):
        raise ImportError("kvbound: struct %s is %d bytes in the library, %d in these bindings: the library is not the version "
                          "these bindings were written for" % (_name, _abi_sizeof(_name.encode()), _c.sizeof(_cls)))

__version__ = _version().decode()
library_version = __version__


def _check(status):
    if status != 0:
        raise KvboundError(status, _last_error().decode(errors="replace"))


_POS = {None: 0, "original": 1, "contiguous": 2, "capped": 3}
_DTYPE = {"f32": 0, "f16": 1, "q8_0": 2, "q4_0": 3, "bf16": 4}  # KV rows (q8_0/q4_0: head_dim a multiple of 32)
_POOL = {"max": 0, "avg": 1}
_TOVA = {"layer": 0, "head": 1}


def _policy_id(name):
    pid = _enum()
    _check(_policy_from_name(str(name).encode(), _c.byref(pid)))
    return pid.value


def _policy_params(policy, budget, **knobs):
    """Policy defaults with the knobs applied (names as kvb_policy_params, or
    pool='max'|'avg', tova_scope='layer'|'head')."""
    pid = _policy_id(policy)
    p = _policy_default(pid)
    if budget is not None and _policy_name(pid) != b"full":
        p.budget = int(budget)
    for k, v in knobs.items():
        if v is None:
            continue
        if k == "pool":
            p.pool_mode = _POOL[v]
        elif k == "tova_scope":
            p.tova_scope = _TOVA[v]
        elif k in dict(_PolicyParams._fields_) and k != "id":
            setattr(p, k, v)
        else:
            raise TypeError("unknown policy option %r" % k)
    return p


class KVConfig:
    """One KV configuration (struct kvb_kv_params): the policy and its knobs
    (names as kvb_policy_params, or pool='max'|'avg', tova_scope='layer'|
    'head'), positions, the K and V row types, the page size, recall and
    keep (the pinned span: the first keep positions are never evicted and
    sit on top of the budget).
    Context, Cache and perplexity take one as kv=, or build it from the same
    keywords."""

    def __init__(self, policy="full", budget=256, positions=None, max_distance=0, kv_dtype="f16", kv_dtype_v=None, block_size=16,
                 recall_pages=0, recall_every=1, cold_mb=1024, cold_dir=None, recall_summary="bounds", keep=0, **knobs):
        self.policy, self.budget, self.knobs = policy, budget, dict(knobs)
        self.keep = int(keep)
        self.positions, self.max_distance = positions, int(max_distance)
        self.kv_dtype, self.kv_dtype_v, self.block_size = kv_dtype, kv_dtype_v, int(block_size)
        self.recall = dict(recall_pages=recall_pages, recall_every=recall_every, cold_mb=cold_mb, cold_dir=cold_dir,
                           recall_summary=recall_summary)
        for name, table, v in (("positions", _POS, positions), ("kv_dtype", _DTYPE, kv_dtype), ("recall_summary", _SUMMARY, recall_summary)):
            if v not in table:
                raise ValueError("%s %r is not one of %s" % (name, v, ", ".join(repr(k) for k in table)))
        if kv_dtype_v is not None and kv_dtype_v not in _DTYPE:
            raise ValueError("kv_dtype_v %r is not one of %s" % (kv_dtype_v, ", ".join(_DTYPE)))
        _policy_params(policy, budget, **knobs)  # unknown policies and knobs fail here, by name

    def _fill(self, kv):
        """Fills a _KvParams; returns what must outlive it (the cold directory's bytes)."""
        kv.policy = _policy_params(self.policy, self.budget, **self.knobs)
        kv.pos_mode = _POS[self.positions]
        kv.max_distance = self.max_distance
        kv.kv_dtype = _DTYPE[self.kv_dtype]
        kv.kv_dtype_v = -1 if self.kv_dtype_v is None else _DTYPE[self.kv_dtype_v]
        kv.block_size = self.block_size
        kv.keep = self.keep
        return _recall_params(kv.recall, **self.recall)

    def seq_bytes(self, n_layer, n_kv_head, head_dim, n_ctx, n_prompt, chunk=256):
        """Pool bytes one sequence needs at its peak (kvb_kv_seq_bytes, the library's one sizing rule)."""
        kv = _kv_default()
        keep = self._fill(kv)  # noqa: F841 (alive through the call)
        n = _kv_seq_bytes(_c.byref(kv), int(n_layer), int(n_kv_head), int(head_dim), int(n_ctx), int(n_prompt), int(chunk))
        if not n:
            raise KvboundError("kvb_kv_seq_bytes: this configuration does not fit head_dim %d" % int(head_dim))
        return n


def policies():
    """{name: one-line description} of every policy the library has."""
    out, i = {}, 0
    while True:
        name = _policy_name(i)
        if name == b"?":
            return out
        out[name.decode()] = _policy_describe(i).decode()
        i += 1


def _floats(x, n=None, name="array", shape=""):
    """A ctypes float array (and the object keeping it alive) from a list or
    NumPy array; with n, exactly n floats (ValueError naming the argument)."""
    if _np is not None and isinstance(x, _np.ndarray):
        a = _np.ascontiguousarray(x, dtype=_np.float32).ravel()
        if n is not None and a.size != n:
            raise ValueError("%s: expected %d floats%s, got %d" % (name, n, shape, a.size))
        return a.ctypes.data_as(_fp), a
    flat = list(_flatten(x))
    if n is not None and len(flat) != n:
        raise ValueError("%s: expected %d floats%s, got %d" % (name, n, shape, len(flat)))
    arr = (_c.c_float * len(flat))(*flat)
    return _c.cast(arr, _fp), arr


def _int(name, x, lo, hi=None):
    """x as an int in [lo, hi] (Python or NumPy integer), else ValueError naming it."""
    try:
        if isinstance(x, bool):
            raise TypeError
        i = operator.index(x)
    except TypeError:
        raise ValueError("%s must be an integer, got %r" % (name, x)) from None
    if i < lo or (hi is not None and i > hi):
        raise ValueError("%s must be in %d..%s, got %d" % (name, lo, hi if hi is not None else "", i))
    return i


def _sampler_args(n_tokens, temp, top_k, top_p, min_p, seed):
    """The sampling arguments of generate(), checked (ValueError naming the
    one out of range) before anything runs."""
    def num(name, x):
        try:
            f = float(x)
        except (TypeError, ValueError):
            raise ValueError("%s must be a number, got %r" % (name, x)) from None
        if not math.isfinite(f):
            raise ValueError("%s must be finite, got %r" % (name, x))
        return f

    n_tokens = _int("n_tokens", n_tokens, 0)
    temp = num("temp", temp)
    if temp < 0:
        raise ValueError("temp must be >= 0 (0 = greedy), got %r" % temp)
    top_k = _int("top_k", top_k, 0)
    top_p = num("top_p", top_p)
    if not 0 < top_p <= 1:
        raise ValueError("top_p must be in (0, 1] (1 = off), got %r" % top_p)
    min_p = num("min_p", min_p)
    if not 0 <= min_p <= 1:
        raise ValueError("min_p must be in [0, 1] (0 = off), got %r" % min_p)
    seed = _int("seed", seed, 0)
    return n_tokens, temp, top_k, top_p, min_p, seed


def _flatten(x):
    for e in x:
        if isinstance(e, (list, tuple)) or (_np is not None and isinstance(e, _np.ndarray)):
            yield from _flatten(e)
        else:
            yield float(e)


def _out(buf, n, like):
    if _np is not None and isinstance(like, _np.ndarray):
        return _np.ctypeslib.as_array(buf, shape=(n,)).copy()
    return list(buf[:n])


def chat_apply(messages, template=None, model=None, tools=None, add_generation_prompt=True, strip_bos=False, **variables):
    """A conversation rendered through a Jinja chat template as transformers'
    apply_chat_template renders it: messages (a list of dicts, or JSON text),
    the template text or a Model's own (with its bos_token / eos_token),
    tools (a list, or JSON text), and extra variables (enable_thinking=False).
    Raises KvboundError naming what failed (bad JSON, the template line)."""
    def js(x):
        return (x if isinstance(x, str) else json.dumps(x)).encode()
    if template is None and model is None:
        raise ValueError("chat_apply: give template= or model=")
    p = _chat_apply_default()
    p.template_text = template.encode() if template is not None else None
    p.vocab = _model_vocab(model._h) if model is not None else None
    msgs, tls, var = js(messages), (js(tools) if tools is not None else None), (js(variables) if variables else None)
    p.messages_json, p.tools_json, p.vars_json = msgs, tls, var
    p.add_generation_prompt = bool(add_generation_prompt)
    p.strip_bos = bool(strip_bos)
    out, n = _vp(), _c.c_size_t()
    _check(_chat_apply(_c.byref(p), _c.byref(out), _c.byref(n)))
    try:
        return _c.string_at(out, n.value).decode(errors="replace")
    finally:
        _buffer_free(out)


class Model:
    """A GGUF (llama, qwen2) or llama2.c model, memory-mapped; with
    mmap=False its weights are read into memory (transparent huge pages)."""

    def __init__(self, path, tokenizer=None, mmap=True):
        mp = _model_default()
        self._tok = tokenizer.encode() if tokenizer else None
        mp.tokenizer_path = self._tok
        mp.no_mmap = not mmap
        h = _vp()
        _check(_model_load(str(path).encode(), _c.byref(mp), _c.byref(h)))
        self._h = h
        info = _ModelInfo()
        _model_info(self._h, _c.byref(info))
        self.info = {f: (getattr(info, f).decode() if isinstance(getattr(info, f), bytes) else getattr(info, f)) for f, _ in _ModelInfo._fields_}
        self.n_vocab = info.n_vocab

    def close(self):
        if getattr(self, "_h", None):
            _model_free(self._h)
            self._h = None

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def tokenize(self, text, bos=True, special=False):
        """Token ids of text (ids identical to llama.cpp's)."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        ids, n = _ip(), _i32()
        _check(_tokenize(_model_vocab(self._h), data, len(data), bool(bos), bool(special), _c.byref(ids), _c.byref(n)))
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _buffer_free(ids)

    def detokenize(self, ids):
        """The text of token ids (special tokens not rendered)."""
        d = _Detok()
        buf = _c.create_string_buffer(1024)
        out = bytearray()
        vocab = _model_vocab(self._h)
        for t in ids:
            n = _detok_push(vocab, _c.byref(d), int(t), False, buf, len(buf))
            if n <= len(buf):
                out += buf.raw[:n]
        out += buf.raw[:_detok_flush(_c.byref(d), buf, len(buf))]
        return out.decode(errors="replace")

    def context(self, policy="full", budget=256, threads=1, kv_dtype="f16", positions=None, pool_mb=256, n_ctx=0, kv_dtype_v=None, **knobs):
        return Context(self, policy, budget, threads, kv_dtype, positions, pool_mb, n_ctx, kv_dtype_v, **knobs)

    def generate(self, prompt, n_tokens, policy="streaming", budget=256, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=0,
                 threads=1, stop_at_eos=True, **knobs):
        """Yields the generated text piece by piece (whole UTF-8 characters),
        with a cache of `policy` and `budget`; memory stays bounded however
        many tokens are asked for. The context is reachable afterwards as
        model.last_context (cache statistics)."""
        _sampler_args(n_tokens, temp, top_k, top_p, min_p, seed)  # bad arguments raise here, not at the first piece
        ctx = self.context(policy, budget, threads, **knobs)
        self.last_context = ctx
        return ctx.generate(prompt, n_tokens, temp=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
                            stop_at_eos=stop_at_eos)


class Context:
    """A model with a KV cache of any policy (kvb_context)."""

    def __init__(self, model, policy="full", budget=256, threads=1, kv_dtype="f16", positions=None, pool_mb=256, n_ctx=0, kv_dtype_v=None,
                 recall_pages=0, recall_every=1, cold_mb=1024, cold_dir=None, recall_summary="bounds", kv=None, **knobs):
        """kv: a KVConfig, or one is built from policy, budget, positions, kv_dtype(_v),
        recall_* and the knobs. recall_pages > 0: reversible eviction (docs/RECALL.md):
        evicted pages go to a cold tier (cold_mb of memory, then a file in cold_dir) and
        the best recall_pages come back per step; their areas are added to pool_mb."""
        self.model = model
        if kv is None:
            kv = KVConfig(policy, budget, positions, kv_dtype=kv_dtype, kv_dtype_v=kv_dtype_v, recall_pages=recall_pages,
                          recall_every=recall_every, cold_mb=cold_mb, cold_dir=cold_dir, recall_summary=recall_summary, **knobs)
        cp = _ctx_default()
        self._cold_dir = kv._fill(cp.kv)
        cp.n_threads = int(threads)
        area = 0
        if cp.kv.recall.pages > 0:  # the recall areas come from the pool too: what the model's sizing rule adds for them
            pages = cp.kv.recall.pages
            cp.kv.recall.pages = 0
            base = _model_kv_seq_bytes(model._h, _c.byref(cp.kv), 1, 1, 1)
            cp.kv.recall.pages = pages
            area = _model_kv_seq_bytes(model._h, _c.byref(cp.kv), 1, 1, 1) - base
        cp.kv_pool_bytes = (int(pool_mb) << 20) + area
        cp.n_ctx = int(n_ctx)
        h = _vp()
        _check(_ctx_init(model._h, _c.byref(cp), _c.byref(h)))
        self._h = h
        self._logits = (_c.c_float * model.n_vocab)()

    def close(self):
        if getattr(self, "_h", None):
            _ctx_free(self._h)
            self._h = None

    __del__ = close

    def prompt(self, ids):
        """Reads a prompt (the snapkv family compresses it at its end); returns the last logits."""
        arr = (_c.c_int32 * len(ids))(*ids)
        _check(_ctx_prompt(self._h, arr, len(ids), self._logits, False))
        return list(self._logits)

    def eval(self, ids):
        arr = (_c.c_int32 * len(ids))(*ids)
        _check(_ctx_eval(self._h, arr, len(ids), self._logits, False))
        return list(self._logits)

    @property
    def n_past(self):
        return _ctx_n_past(self._h)

    def save(self, path):
        """Saves the cache to a file (with recall: its cold tier too)."""
        _check(_ctx_save(self._h, str(path).encode()))

    def load(self, path):
        """Replaces the cache with a saved one (it must fit the model); unchanged on error."""
        _check(_ctx_load(self._h, str(path).encode()))

    def cache_stats(self):
        """The cache's memory and retained tokens (kvb_cache_stats) as a dict."""
        s = _CacheStats()
        _cache_stats(_ctx_cache(self._h), _c.byref(s))
        return {f: getattr(s, f) for f, _ in _CacheStats._fields_}

    def generate(self, prompt, n_tokens, temp=0.0, top_k=40, top_p=0.95, min_p=0.05, seed=0, stop_at_eos=True):
        """Yields the text generated after `prompt` (a string or token ids),
        piece by piece. The arguments are checked now (ValueError naming the
        one out of range), not when the first piece is asked for."""
        args = _sampler_args(n_tokens, temp, top_k, top_p, min_p, seed)
        return self._generate(prompt, stop_at_eos, *args)

    def _generate(self, prompt, stop_at_eos, n_tokens, temp, top_k, top_p, min_p, seed):
        ids = self.model.tokenize(prompt, bos=self.n_past == 0) if isinstance(prompt, str) else list(prompt)
        sp = _sampler_default()
        sp.temp, sp.top_k, sp.top_p, sp.min_p, sp.seed = temp, top_k, top_p, min_p, seed
        smp = _vp()
        _check(_sampler_init(_c.byref(sp), self.model.n_vocab, _c.byref(smp)))
        try:
            arr = (_c.c_int32 * len(ids))(*ids)
            _check(_ctx_prompt(self._h, arr, len(ids), self._logits, False))
            eos = _vocab_special(_model_vocab(self.model._h), 1)  # KVB_SPECIAL_EOS
            vocab = _model_vocab(self.model._h)
            d = _Detok()
            buf = _c.create_string_buffer(1024)
            one = (_c.c_int32 * 1)()
            for _ in range(n_tokens):
                tok = _sampler_sample(smp, self._logits, None, 0)
                if stop_at_eos and tok == eos:
                    break
                n = _detok_push(vocab, _c.byref(d), tok, False, buf, len(buf))
                if 0 < n <= len(buf):
                    yield buf.raw[:n].decode(errors="replace")
                one[0] = tok
                _check(_ctx_eval(self._h, one, 1, self._logits, False))
            n = _detok_flush(_c.byref(d), buf, len(buf))
            if n:
                yield buf.raw[:n].decode(errors="replace")
        finally:
            _sampler_free(smp)


def perplexity(model, text, policy="streaming", budget=256, max_tokens=0, prompt=0, baseline="full", chunk=1, threads=1,
               positions=None, kv=None, **knobs):
    """kvbound ppl on a text (tokenized with BOS), as a dict with the fields
    of `kvbound ppl --json`: ppl, nll, tokens, baseline_ppl, kl, top1,
    prompt_kept (with prompt; kvzip: kvzip_pass_tokens, kvzip_context_tokens,
    kvzip_prefill_ratio), kv_bytes_peak, segments."""
    ids = model.tokenize(text, bos=True) if isinstance(text, str) else list(text)
    if max_tokens:
        ids = ids[:int(max_tokens)]
    if kv is None:  # f32 rows: the policy, not KV rounding (kvbound ppl's default)
        kv = KVConfig(policy, budget, positions, kv_dtype="f32", **knobs)
    pp = _ppl_default()
    keep = kv._fill(pp.kv)  # noqa: F841 (alive through the call)
    pp.chunk = int(chunk)
    pp.baseline = {"none": 0, "full": 1, "recompute": 2}[baseline]
    pp.n_threads = int(threads)
    pp.prompt = int(prompt)
    arr = (_c.c_int32 * len(ids))(*ids)
    r = _PplResult()
    _check(_eval_ppl(model._h, arr, len(ids), _c.byref(pp), _c.byref(r)))
    try:
        out = {"policy": kv.policy, "budget": pp.kv.policy.budget, "tokens": r.tokens, "nll": r.nll, "ppl": r.ppl,
               "kv_bytes_peak": r.kv_bytes_peak, "tok_per_s": r.tok_per_s, "segments": [r.seg_ppl[i] for i in range(r.n_seg)]}
        if r.has_baseline:
            out["baseline"], out["baseline_ppl"] = baseline, r.base_ppl
        if r.has_kl:
            out["kl"], out["top1"] = r.kl, r.top1
        if prompt:
            out.update(prompt=int(prompt), prompt_kept=r.prompt_kept, prompt_kept_min=r.prompt_kept_min, prompt_kept_max=r.prompt_kept_max)
            if kv.policy == "kvzip":  # its reconstruction's extra prefill, as kvbound ppl --json
                out.update(kvzip_pass_tokens=r.kvzip_pass_tokens, kvzip_context_tokens=r.kvzip_context_tokens,
                           kvzip_prefill_ratio=r.kvzip_pass_tokens / r.kvzip_context_tokens if r.kvzip_context_tokens else 0.0)
        return out
    finally:
        _ppl_free(_c.byref(r))


class Cache:
    """A bare KV cache and policy, driven with your own q/k/v (before RoPE)
    or your own attention scores — to compare a policy on your tensors.
    Arrays are lists or NumPy arrays; outputs follow the input's kind."""

    def __init__(self, n_layer=1, n_kv_head=1, head_dim=64, policy="h2o", budget=256, dtype="f32", block_size=16,
                 rope=None, positions=None, pool_mb=64, max_distance=0, recall_pages=0, recall_every=1, cold_mb=1024, cold_dir=None,
                 recall_summary="bounds", kv=None, **knobs):
        if kv is None:
            kv = KVConfig(policy, budget, positions, max_distance, kv_dtype=dtype, block_size=block_size, recall_pages=recall_pages,
                          recall_every=recall_every, cold_mb=cold_mb, cold_dir=cold_dir, recall_summary=recall_summary, **knobs)
        cp = _cache_default()
        self._cold_dir = kv._fill(cp.kv)
        cp.n_layer, cp.n_kv_head, cp.head_dim = int(n_layer), int(n_kv_head), int(head_dim)
        if rope:  # {"type": "interleaved"|"neox", "base": 10000.0}
            cp.rope.type = {"interleaved": 1, "neox": 2}[rope.get("type", "interleaved")]
            cp.rope.n_dims = int(rope.get("n_dims", head_dim))
            cp.rope.base = float(rope.get("base", 10000.0))
            cp.rope.freq_scale = float(rope.get("freq_scale", 1.0))
        cp.pool_bytes = int(pool_mb) << 20
        h = _vp()
        _check(_cache_init(None, _c.byref(cp), _c.byref(h)))
        self._h = h
        self.n_layer, self.n_kv_head, self.head_dim = cp.n_layer, cp.n_kv_head, cp.head_dim

    def close(self):
        if getattr(self, "_h", None):
            _cache_free(self._h)
            self._h = None

    __del__ = close

    def _qkv(self, n_tok, q, k, v):
        """q, k, v as float arrays, their lengths checked (ValueError naming
        the argument): k and v n_tok x n_kv_head x head_dim floats, q n_tok x
        n_head x head_dim with n_head a multiple of n_kv_head. -> (q, k, v, n_head)."""
        kv = n_tok * self.n_kv_head * self.head_dim
        shape = " (%s%d x %d: n_kv_head x head_dim)" % ("%d x " % n_tok if n_tok > 1 else "", self.n_kv_head, self.head_dim)
        kp, ka = _floats(k, kv, "k", shape)
        vp, va = _floats(v, kv, "v", shape)
        qp, qa = _floats(q, None, "q")
        if len(qa) == 0 or len(qa) % kv:
            raise ValueError("q: %d floats is not %sn_head x head_dim (%d) with n_head a multiple of n_kv_head (%d)"
                             % (len(qa), "n_tok (%d) x " % n_tok if n_tok > 1 else "", self.head_dim, self.n_kv_head))
        return (qp, qa), (kp, ka), (vp, va), len(qa) // (n_tok * self.head_dim)

    def _layer(self, layer):
        return _int("layer", layer, 0, self.n_layer - 1)

    def decode(self, layer, q, k, v):
        """One token in `layer`: q [n_head*head_dim], k/v [n_kv_head*head_dim]; returns the attention output."""
        layer = self._layer(layer)
        (qp, qa), (kp, ka), (vp, va), n_head = self._qkv(1, q, k, v)
        out = (_c.c_float * len(qa))()
        _check(_cache_decode(self._h, layer, qp, n_head, kp, vp, out, None))
        return _out(out, len(qa), q)

    def prefill(self, layer, n_tok, q, k, v):
        """n_tok tokens in `layer`: q [n_tok][n_head][head_dim], k/v [n_tok][n_kv_head][head_dim] (flattened)."""
        layer = self._layer(layer)
        n_tok = _int("n_tok", n_tok, 1)
        (qp, qa), (kp, ka), (vp, va), n_head = self._qkv(n_tok, q, k, v)
        out = (_c.c_float * len(qa))()
        _check(_cache_prefill(self._h, layer, n_tok, qp, n_head, kp, vp, out, None))
        return _out(out, len(qa), q)

    def compress(self):
        """End of a prompt: the snapkv family votes and selects; a no-op for the others."""
        _cache_compress(self._h, None)

    def append(self, layer, k=None, v=None):
        """A token without attention (k, v None: bookkeeping only)."""
        kp = _floats(k, self.n_kv_head * self.head_dim, "k") if k is not None else (None, None)
        vp = _floats(v, self.n_kv_head * self.head_dim, "v") if v is not None else (None, None)
        _check(_cache_append(self._h, int(layer), kp[0], vp[0]))

    def observe(self, layer, head, weights):
        """Your attention row over the retained slots (oldest first) for the policy."""
        wp, wa = _floats(weights)
        _check(_cache_observe(self._h, int(layer), int(head), wp, len(wa)))

    def evict(self, layer):
        _cache_evict(self._h, int(layer))

    def recalled(self, layer=0, head=0):
        """Original positions in the stream's recall area (attended besides its slots), increasing."""
        buf = (_c.c_int32 * (64 * 4096))()
        n = _cache_recalled(self._h, int(layer), int(head), buf, len(buf))
        if n < 0:
            raise KvboundError(1, "recalled: bad layer or head")
        return list(buf[:min(n, len(buf))])

    def positions(self, layer=0, head=0):
        """Original positions of the retained tokens of one stream, oldest first."""
        si = _SlotInfo()
        out = []
        for j in range(_cache_n_slots(self._h, int(layer), int(head))):
            _check(_cache_slot_info(self._h, int(layer), int(head), j, _c.byref(si)))
            out.append(si.pos_original)
        return out

    def budget(self, layer=0, head=0):
        return _cache_budget(self._h, int(layer), int(head))

    def save(self):
        """The cache as an image (bytes): its exact state, with recall its cold
        tier and recall areas too; Cache.load continues it bit for bit."""
        buf, n = _vp(), _c.c_size_t()
        _check(_cache_save(self._h, _c.byref(buf), _c.byref(n)))
        try:
            return _c.string_at(buf, n.value)
        finally:
            _buffer_free(buf)

    @classmethod
    def load(cls, image, pool_mb=64, cold_dir=None):
        """A cache from an image (Cache.save, kvb_cache_save). A restored cold tier
        is in memory; cold_dir gives it a file beyond that."""
        data = bytes(image)
        h = _vp()
        _check(_cache_load(None, data, len(data), int(pool_mb) << 20, _c.byref(h)))
        c = cls.__new__(cls)
        c._h = h
        c._cold_dir = None
        if cold_dir is not None:
            try:
                _check(_cache_set_cold_dir(h, str(cold_dir).encode()))
            except KvboundError:
                c.close()
                raise
        cp = _CacheParams()
        _cache_get_params(h, _c.byref(cp))
        c.n_layer, c.n_kv_head, c.head_dim = cp.n_layer, cp.n_kv_head, cp.head_dim
        return c

    def stats(self):
        s = _CacheStats()
        _cache_stats(self._h, _c.byref(s))
        return {f: getattr(s, f) for f, _ in _CacheStats._fields_}
