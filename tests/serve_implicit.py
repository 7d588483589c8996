#!/usr/bin/env python3
"""serve_implicit.py CASE ARGS... — the clients of tests/test_serve_implicit_cli.sh (implicit sessions,
issue 49 part 1): a stateless chat (the whole history every turn, each answer appended exactly as the
server returned it, never a session_id) against the same chat sent with session_id. Each CASE prints
"ok" when every check holds, else one line per failed check (the shell script reports them under the
case's name).

Cases (URL is a server's base address):
  policies URL POLICY,...     a 10-turn chat with a system message and one tool, under each listed
                              policy (kv_policy, kv_budget 64 per request; "server" = the server's own,
                              e.g. full): stateless equals the session_id chat answer for answer, and
                              from turn 2 the stateless turn reads (prompt_tokens - cached_tokens) at
                              most the session turn's prompt_tokens + 2, kvbound.implicit.resumed set
  reasoning_edit URL          a dropped reasoning_content resumes from the latest checkpoint; an
                              edited last user message resumes from the one before, and the answer
                              equals a session that was sent the edited chat
  tenants URL KEY1 KEY2       tenant 2, or tenant 1 with another cache_salt, never resumes tenant 1's
  chat URL TURNS OUT [PREV]   a stateless chat of TURNS turns, its turns written to OUT as JSON (with
                              PREV, an earlier OUT, its turns are not sent again: their answers are
                              the history)
  compare A.json B.json FROM  B's answers equal A's and B's turns from FROM on resumed
  metrics URL                 kvbound_implicit_* and kvbound_checkpoint* move as the turns say
  checkpoints_off URL         (--checkpoints 0) no turn resumes
  checkpoint_max URL          (--checkpoint-max 2) after 3 other conversations the first is gone
  checkpoint_ttl URL          (--checkpoint-ttl 1) a checkpoint unused for 1 s leaves memory on an idle
                              server (no page of the pool in use) and is not resumed
  prefill URL                 a prefill after a served history is not resumed
  key_order URL               a call's arguments sent back in another key order still resume
  completions URL             a stateless /v1/completions continuation resumes and equals session_id's
"""
import json
import sys
import urllib.error
import urllib.request

SYSTEM = {"role": "system", "content": "You are a careful agent. Answer in one short sentence, and call get_time for any question about the time."}
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "The time now in a city",
                                           "parameters": {"type": "object", "properties": {}}}}]
# the turns of the chat: a user message, or "call" (the answer is a forced call of get_time; the next
# turn's new message is its result, a role "tool" message)
PLAN = ["What time is it in Paris?", "call", "And in Tokyo, which is later?", "Tell me a joke about clocks.", "Why is that funny?",
        "call", "Summarise what we said.", "What should I do next?", "Say it again, shorter.", "Thanks, bye."]
STREAM_TURNS = {3, 5, 8}  # 1-based turns sent with stream: true
BUDGET = 64
fails = []


def post(url, path, body, key=None):
    """POST body to url+path: (status, JSON or a list of SSE events)"""
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    req = urllib.request.Request(url + path, json.dumps(body).encode(), h)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            raw = r.read().decode()
            st = r.status
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read().decode()[:300]}
    if body.get("stream"):
        return st, [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: {")]
    return st, json.loads(raw)


def turn(url, messages, extra, key=None, path="/v1/chat/completions"):
    """one chat request; returns a dict: message (as the server returned it, assembled when streamed),
    usage, kvbound, finish, status"""
    body = dict(extra, messages=messages)
    st, d = post(url, path, body, key)
    if st != 200:
        return {"status": st, "error": d, "message": None, "usage": {}, "kvbound": {}}
    if not body.get("stream"):
        c = d["choices"][0]
        return {"status": st, "message": c["message"], "usage": d.get("usage", {}), "kvbound": d.get("kvbound", {}), "finish": c["finish_reason"]}
    content, reasoning, calls, usage, kvb, finish = "", "", [], {}, {}, None
    for e in d:
        for c in e.get("choices", []):
            dl = c.get("delta", {})
            content += dl.get("content") or ""
            reasoning += dl.get("reasoning_content") or ""
            for tc in dl.get("tool_calls", []):
                i = tc.get("index", 0)
                while len(calls) <= i:
                    calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    calls[i]["id"] = tc["id"]
                f = tc.get("function", {})
                calls[i]["function"]["name"] += f.get("name") or ""
                calls[i]["function"]["arguments"] += f.get("arguments") or ""
            finish = c.get("finish_reason") or finish
        if e.get("usage"):
            usage = e["usage"]
        if e.get("kvbound"):
            kvb = e["kvbound"]
    m = {"role": "assistant", "content": content or (None if calls else "")}
    if reasoning:
        m["reasoning_content"] = reasoning
    if calls:
        m["tool_calls"] = calls
    return {"status": st, "message": m, "usage": usage, "kvbound": kvb, "finish": finish}


def request_extra(t, policy, sid=None, salt=None):
    """the fields of turn t (1-based) besides messages"""
    e = {"tools": TOOLS, "temperature": 0, "frequency_penalty": 1.0}
    if PLAN[t - 1] == "call":
        e.update(max_tokens=40, tool_choice={"type": "function", "function": {"name": "get_time"}})
    else:
        e.update(max_tokens=12, ignore_eos=True)
    if t in STREAM_TURNS:
        e.update(stream=True, stream_options={"include_usage": True})
    if policy not in (None, "server"):
        e.update(kv_policy=policy, kv_budget=BUDGET)
    if sid:
        e["session_id"] = sid
    if salt:
        e["cache_salt"] = salt
    return e


def run_chat(url, turns, policy=None, sid=None, key=None, salt=None, prev=()):
    """the chat of PLAN's first TURNS turns, the whole history sent every turn (with session_id when sid);
    the turns of prev (an earlier run's results) are not sent again, their answers are the history"""
    msgs, out = [dict(SYSTEM)], []
    for t in range(1, turns + 1):
        p = PLAN[t - 1]
        last = out[-1]["message"] if out else None
        if last and last.get("tool_calls"):  # the previous turn was a call: its result is this turn's new message
            msgs.append({"role": "tool", "tool_call_id": last["tool_calls"][0]["id"], "content": "14:05"})
        else:
            msgs.append({"role": "user", "content": p if p != "call" else "What time is it there now?"})
        r = prev[t - 1] if t <= len(prev) else turn(url, list(msgs), request_extra(t, policy, sid, salt), key)
        r["turn"] = t
        out.append(r)
        if r["status"] != 200:
            break
        msgs.append(r["message"])
    return out, msgs


def answer(r):
    """what must be equal: the text and the calls (names and arguments; ids are random)"""
    m = r["message"] or {}
    return (m.get("content") or "", [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []])


def implicit(r):
    return (r.get("kvbound") or {}).get("implicit")


def read_tokens(r):
    u = r.get("usage") or {}
    return u.get("prompt_tokens", 0) - (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def cached(r):
    return ((r.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)


def compare(label, a, b, first_resumed=2, session=None):
    """b (stateless) against a (the reference): answers equal; from turn first_resumed b resumed; with
    session (a is the session_id chat) b reads at most a's prompt_tokens + 2"""
    bad = [r["turn"] for r in a + b if r["status"] != 200]
    if bad or len(a) != len(b):
        fails.append("%s: requests failed at turns %s: %s" % (label, sorted(set(bad)), [r.get("error") for r in a + b if r["status"] != 200][:1]))
        return
    diff = [r["turn"] for r, s in zip(a, b) if answer(r) != answer(s)]
    if diff:
        t = diff[0]
        fails.append("%s: answers differ at turns %s (turn %d: reference %r, stateless %r)" % (label, diff, t, answer(a[t - 1]), answer(b[t - 1])))
    notres = [s["turn"] for s in b if s["turn"] >= first_resumed and not (implicit(s) or {}).get("resumed")]
    if notres:
        fails.append("%s: kvbound.implicit.resumed null or absent at turns %s (turn %d's kvbound: %s; cached_tokens %s)" %
                     (label, notres, notres[0], json.dumps(b[notres[0] - 1]["kvbound"])[:300], [cached(s) for s in b]))
    wrong = [(s["turn"], (implicit(s) or {}).get("resumed"), (implicit(p) or {}).get("checkpoint")) for p, s in zip(b, b[1:])
             if s["turn"] >= first_resumed and (implicit(s) or {}).get("resumed") and (implicit(s) or {}).get("resumed") != (implicit(p) or {}).get("checkpoint")]
    if wrong:
        fails.append("%s: a turn resumed another checkpoint than the previous turn's (turn, resumed, previous turn's checkpoint): %s" % (label, wrong))
    if session:
        over = [(s["turn"], read_tokens(s), r["usage"].get("prompt_tokens")) for r, s in zip(a, b)
                if s["turn"] >= 2 and read_tokens(s) > r["usage"].get("prompt_tokens", 0) + 2]
        if over:
            fails.append("%s: stateless turns read more than the session's + 2 (turn, read, session's): %s" % (label, over))


def case_policies(url, policies):
    for pol in policies.split(","):
        st, _ = run_chat(url, len(PLAN), pol)
        se, _ = run_chat(url, len(PLAN), pol, sid="implicit-%s" % pol)
        compare(pol, se, st, session=True)


def case_reasoning_edit(url):
    think = {"grammar": 'root ::= "<think>\\nThe user wants the time.\\n</think>\\n\\n" [a-z]{3,6} " " [a-z]{3,6}'}
    users = ["What time is it in Paris?", "And in Tokyo?", "Which one is later?", "Tell me a joke about clocks."]

    def ex(t, sid=None):
        e = {"tools": TOOLS, "temperature": 0, "frequency_penalty": 1.0, "max_tokens": 40 if t == 2 else 12, "ignore_eos": t != 2,
             "kv_policy": "h2o", "kv_budget": BUDGET}
        if t == 2:
            e.update(think)
        if sid:
            e["session_id"] = sid
        return e
    # stateless: turns 1-2 (turn 2's answer has reasoning_content), turn 3 drops it (and makes one up for turn 1's answer)
    msgs, st = [dict(SYSTEM)], []
    for t in (1, 2):
        msgs.append({"role": "user", "content": users[t - 1]})
        st.append(turn(url, list(msgs), ex(t)))
        if st[-1]["status"] != 200:
            fails.append("turn %d: %s" % (t, st[-1].get("error")))
            return
        msgs.append(dict(st[-1]["message"]))
    if not msgs[-1].get("reasoning_content"):
        fails.append("the test's premise: turn 2's answer has no reasoning_content: %s" % msgs[-1])
        return
    sent = [dict(m) for m in msgs]
    del sent[-1]["reasoning_content"]
    sent[2]["reasoning_content"] = "I made this up."
    sent.append({"role": "user", "content": users[2]})
    r3 = turn(url, sent, ex(3))
    # the edit: turn 4 sends turn 3's request with its user message changed (the answer of turn 3 not sent)
    edited = sent[:-1] + [{"role": "user", "content": "Which one is earlier?"}]
    r4 = turn(url, edited, ex(3))
    # the references: sessions sent the same chats from the start
    def session(sid, last_user, hist_reasoning):
        out, m = [], [dict(SYSTEM)]
        for t, u in ((1, users[0]), (2, users[1]), (3, last_user)):
            m.append({"role": "user", "content": u})
            out.append(turn(url, list(m), ex(t, sid)))
            if out[-1]["status"] != 200:
                return out
            a = dict(out[-1]["message"])
            if not hist_reasoning:
                a.pop("reasoning_content", None)
            m.append(a)
        return out
    s3 = session("reason-ref", users[2], False)
    s4 = session("edit-ref", "Which one is earlier?", False)
    for name, r in (("turn 3", r3), ("the edited turn", r4), ("session reasoning-ref", s3[-1]), ("session edit-ref", s4[-1])):
        if r["status"] != 200:
            fails.append("%s: status %d %s" % (name, r["status"], r.get("error")))
            return
    cp1, cp2 = (implicit(st[0]) or {}).get("checkpoint"), (implicit(st[1]) or {}).get("checkpoint")
    i3, i4 = implicit(r3) or {}, implicit(r4) or {}
    if [answer(r) for r in st] != [answer(r) for r in s3[:2]] or [answer(r) for r in st] != [answer(r) for r in s4[:2]]:
        fails.append("turns 1-2 differ from the sessions': %s / %s" % ([answer(r) for r in st], [answer(r) for r in s3[:2]]))
    if not cp2 or i3.get("resumed") != cp2 or i3.get("messages") != 5 or cached(r3) <= 0:
        fails.append("reasoning_content dropped (and one made up): turn 3 did not resume turn 2's checkpoint %s with 5 messages: implicit %s, cached_tokens %d"
                     % (cp2, i3 or None, cached(r3)))
    if answer(r3) != answer(s3[-1]):
        fails.append("reasoning dropped: turn 3 %r, the session's %r" % (answer(r3), answer(s3[-1])))
    # the edit resumes the checkpoint of turn 2 (covering 5 messages: fewer than the 7 turn 3 stored)
    if not cp2 or i4.get("resumed") != cp2 or i4.get("messages") != 5 or cached(r4) <= 0 or not i3.get("checkpoint"):
        fails.append("edited user message: not resumed from turn 2's checkpoint %s (turn 3 stored %s): implicit %s, cached_tokens %d"
                     % (cp2, i3.get("checkpoint"), i4 or None, cached(r4)))
    if answer(r4) != answer(s4[-1]):
        fails.append("edited user message: %r, a session sent the edited chat %r" % (answer(r4), answer(s4[-1])))
    if cp1 and cp1 == cp2:
        fails.append("turns 1 and 2 stored the same checkpoint id %s" % cp1)


def case_tenants(url, k1, k2):
    out, msgs = run_chat(url, 3, "h2o", key=k1, salt="salt-1")
    if any(r["status"] != 200 for r in out):
        fails.append("tenant 1's chat: %s" % [r.get("error") for r in out])
        return
    nxt = msgs + [{"role": "user", "content": "One more thing."}]
    ex = request_extra(4, "h2o")
    for who, key, salt in (("tenant 2 (same salt)", k2, "salt-1"), ("tenant 2 (no salt)", k2, None), ("tenant 1, another cache_salt", k1, "salt-2"),
                           ("tenant 1, no cache_salt", k1, None)):
        e = dict(ex)
        if salt:
            e["cache_salt"] = salt
        r = turn(url, nxt, e, key)
        im = implicit(r)
        if r["status"] != 200 or cached(r) != 0 or im is None or im.get("resumed") is not None or im.get("tokens") not in (0, None):
            fails.append("%s: status %d, cached_tokens %d, implicit %s (want 0 and resumed null)" % (who, r["status"], cached(r), im))
    e = dict(ex, cache_salt="salt-1")
    r = turn(url, nxt, e, k1)
    last = (implicit(out[-1]) or {}).get("checkpoint")
    if r["status"] != 200 or not last or (implicit(r) or {}).get("resumed") != last or cached(r) <= 0:
        fails.append("tenant 1 with its own salt: status %d, cached_tokens %d, implicit %s (want resumed %s)" % (r["status"], cached(r), implicit(r), last))


def case_chat(url, turns, path, prev=None):
    out, _ = run_chat(url, int(turns), "h2o", prev=json.load(open(prev)) if prev else ())
    json.dump(out, open(path, "w"))
    bad = [r for r in out if r["status"] != 200]
    if bad:
        fails.append("turn %d: %s" % (bad[0]["turn"], bad[0].get("error")))


def case_compare(a, b, first):
    a, b = json.load(open(a)), json.load(open(b))
    compare("stateless", a[:len(b)], b, int(first))


def metrics(url):
    with urllib.request.urlopen(url + "/metrics") as r:
        m = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                m[k] = float(v)
        return m


def case_metrics(url):
    names = ["kvbound_implicit_hits_total", "kvbound_implicit_misses_total", "kvbound_implicit_tokens_reused_total",
             "kvbound_checkpoints_stored_total", "kvbound_checkpoints", "kvbound_checkpoint_bytes"]
    m0 = metrics(url)
    missing = [n for n in names if n not in m0]
    if missing:
        fails.append("/metrics lacks %s" % missing)
        return
    out, _ = run_chat(url, 3, "streaming")
    m1 = metrics(url)
    d = {n: m1[n] - m0[n] for n in names}
    if any(r["status"] != 200 for r in out):
        fails.append("the chat: %s" % [r.get("error") for r in out])
        return
    reused = sum((implicit(r) or {}).get("tokens", 0) for r in out)
    # (turn 1, with no answer in its history, may count as a miss or as no lookup)
    if d["kvbound_implicit_hits_total"] != 2 or d["kvbound_implicit_misses_total"] > 1 or reused <= 0 or d["kvbound_implicit_tokens_reused_total"] != reused:
        fails.append("three turns (a miss, two hits, %d tokens reused): %s" % (reused, d))
    if d["kvbound_checkpoints_stored_total"] != 3 or d["kvbound_checkpoints"] != 3 or m1["kvbound_checkpoint_bytes"] <= m0["kvbound_checkpoint_bytes"]:
        fails.append("three turns stored three checkpoints: %s" % d)
    # a history the server never served: a miss, no hit
    r = turn(url, [dict(SYSTEM), {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "I never said this."},
                   {"role": "user", "content": "Go on."}], request_extra(1, "streaming"))
    m2 = metrics(url)
    d = {n: m2[n] - m1[n] for n in names}
    if r["status"] != 200 or d["kvbound_implicit_misses_total"] != 1 or d["kvbound_implicit_hits_total"] != 0 or d["kvbound_implicit_tokens_reused_total"] != 0:
        fails.append("a history never served (a miss): status %d, %s" % (r["status"], d))


def case_checkpoints_off(url):
    out, _ = run_chat(url, 3, "streaming")
    for r in out:
        im = implicit(r)
        if r["status"] != 200 or (im is not None and im.get("resumed") is not None):
            fails.append("--checkpoints 0, turn %d: status %d, implicit %s" % (r["turn"], r["status"], im))
    if not fails and any(im is not None for im in map(implicit, out)):
        fails.append("--checkpoints 0: kvbound.implicit present: %s" % [implicit(r) for r in out])


def case_checkpoint_max(url):
    def first(u):
        m = [dict(SYSTEM), {"role": "user", "content": u}]
        r = turn(url, m, request_extra(1, "streaming"))
        return r, m + [r["message"]] if r["status"] == 200 else m
    ra, ma = first("Conversation A: what time is it?")
    for u in ("Conversation B", "Conversation C"):
        first(u)
    rd, md = first("Conversation D: and now?")
    e = request_extra(1, "streaming")
    a2 = turn(url, ma + [{"role": "user", "content": "Go on."}], e)
    d2 = turn(url, md + [{"role": "user", "content": "Go on."}], e)
    if (implicit(a2) or {}).get("resumed") is not None or a2["status"] != 200 or implicit(a2) is None:
        fails.append("--checkpoint-max 2: conversation A's checkpoint outlived three others: %s" % implicit(a2))
    if not (implicit(d2) or {}).get("resumed") or (implicit(d2) or {}).get("resumed") != (implicit(rd) or {}).get("checkpoint"):
        fails.append("--checkpoint-max 2: the latest conversation's checkpoint %s was not resumed: %s" % ((implicit(rd) or {}).get("checkpoint"), implicit(d2)))


def case_checkpoint_ttl(url):
    import time
    m = [dict(SYSTEM), {"role": "user", "content": "Conversation T: what time is it?"}]
    r1 = turn(url, m, request_extra(1, "streaming"))
    if r1["status"] != 200 or not (implicit(r1) or {}).get("checkpoint"):
        fails.append("--checkpoint-ttl 1, turn 1: status %d, implicit %s" % (r1["status"], implicit(r1)))
        return
    held = metrics(url).get("kvbound_pool_pages_used", -1)
    time.sleep(3)  # the TTL, and the server's once-a-second trim
    left = metrics(url).get("kvbound_pool_pages_used", -1)
    if held <= 0 or left != 0:
        fails.append("--checkpoint-ttl 1: pool pages used %s after the turn, %s 3 s later (want > 0, then 0)" % (held, left))
    r2 = turn(url, m + [r1["message"], {"role": "user", "content": "Go on."}], request_extra(1, "streaming"))
    if r2["status"] != 200 or (implicit(r2) or {}).get("resumed") is not None:
        fails.append("--checkpoint-ttl 1: an expired checkpoint was resumed: status %d, implicit %s" % (r2["status"], implicit(r2)))


def case_prefill(url):
    """a request ending with an assistant message (a prefill) after a served history is not resumed; the same
    history ending with a user message is (no tools: a prefill takes none)"""
    ex = {"temperature": 0, "max_tokens": 8, "ignore_eos": True, "kv_policy": "streaming", "kv_budget": BUDGET}
    m = [dict(SYSTEM), {"role": "user", "content": "What time is it in Paris?"}]
    r1 = turn(url, m, ex)
    if r1["status"] != 200:
        fails.append("turn 1: %s" % r1.get("error"))
        return
    hist = m + [r1["message"], {"role": "user", "content": "And in Tokyo?"}]
    pf = turn(url, hist + [{"role": "assistant", "content": "In Tokyo it is"}], ex)
    r2 = turn(url, hist, ex)
    cp = (implicit(r1) or {}).get("checkpoint")
    if pf["status"] != 200 or (implicit(pf) or {}).get("resumed") is not None:
        fails.append("a prefill after a served history: status %d, implicit %s (want resumed null or no implicit)" % (pf["status"], implicit(pf)))
    if r2["status"] != 200 or not cp or (implicit(r2) or {}).get("resumed") != cp or cached(r2) <= 0:
        fails.append("the same history without the prefill: implicit %s, cached_tokens %d (want resumed %s)" % (implicit(r2), cached(r2), cp))


def case_key_order(url):
    """a call's arguments sent back in another key order (and the content's ends trimmed) resume the
    latest checkpoint, and the next answer equals a session_id session's sent the same"""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}}]
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    grammar = "root ::= " + json.dumps(" Let me check. ") + " " + json.dumps(call)
    out = {}
    for mode in ("stateless", "session"):
        sid = {"session_id": "key-order"} if mode == "session" else {}
        ex = dict({"tools": tools, "temperature": 0, "kv_policy": "h2o", "kv_budget": BUDGET}, **sid)
        m = [dict(SYSTEM), {"role": "user", "content": "Weather in Paris?"}]
        r1 = turn(url, m, dict(ex, max_tokens=60, grammar=grammar))
        a = dict(r1["message"] or {})
        calls = a.get("tool_calls") or []
        if r1["status"] != 200 or len(calls) != 1 or json.loads(calls[0]["function"]["arguments"]) != {"city": "Paris", "unit": "c"}:
            fails.append("the test's premise: turn 1 is one call of get_weather(Paris, c): %s" % (r1.get("error") or a))
            return
        a["tool_calls"] = [dict(calls[0], function={"name": "get_weather", "arguments": json.dumps({"unit": "c", "city": "Paris"})})]
        if a.get("content"):
            a["content"] = a["content"].strip()
        m += [a, {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18 C"}]
        r2 = turn(url, m, dict(ex, max_tokens=12, ignore_eos=True, frequency_penalty=1.0))
        out[mode] = (r1, r2)
    (s1, s2), (e1, e2) = out["stateless"], out["session"]
    if s2["status"] != 200 or e2["status"] != 200:
        fails.append("turn 2: %s %s" % (s2.get("error"), e2.get("error")))
        return
    cp = (implicit(s1) or {}).get("checkpoint")
    if not cp or (implicit(s2) or {}).get("resumed") != cp or cached(s2) <= 0:
        fails.append("arguments in another key order, content trimmed: implicit %s, cached_tokens %d (want resumed %s)" % (implicit(s2), cached(s2), cp))
    if answer(s2) != answer(e2):
        fails.append("turn 2: stateless %r, session_id %r" % (answer(s2), answer(e2)))


def case_completions(url):
    p1, more = "Once upon a time there was a little", "\n\nAnd then"
    ex = {"max_tokens": 8, "temperature": 0, "ignore_eos": True, "frequency_penalty": 1.0}
    st, r1 = post(url, "/v1/completions", dict(ex, prompt=p1, logprobs=1))
    if st != 200 or r1["choices"][0]["finish_reason"] != "length":
        fails.append("turn 1: %d %s" % (st, r1))
        return
    text = r1["choices"][0]["text"]
    # the premise: the continued prompt tokenizes as the first prompt, the generated tokens, then the new text
    pieces = lambda s: [t["piece"] for t in post(url, "/tokenize", {"content": s, "with_pieces": True})[1]["tokens"]]
    if pieces(p1 + text + more) != pieces(p1) + r1["choices"][0]["logprobs"]["tokens"] + pieces(more):
        fails.append("the test's premise: %r + %r + %r does not tokenize as its parts and the generated tokens" % (p1, text, more))
        return
    st2, r2 = post(url, "/v1/completions", dict(ex, prompt=p1 + text + more))
    sid = "implicit-completion"
    st3, s1 = post(url, "/v1/completions", dict(ex, prompt=p1, session_id=sid))
    st4, s2 = post(url, "/v1/completions", dict(ex, prompt=more, session_id=sid))
    if 200 not in (st2,) or st3 != 200 or st4 != 200:
        fails.append("statuses %d %d %d" % (st2, st3, st4))
        return
    if s1["choices"][0]["text"] != text:
        fails.append("turn 1 differs from the session's: %r, %r" % (text, s1["choices"][0]["text"]))
    im = (r2.get("kvbound") or {}).get("implicit") or {}
    c = ((r2.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if not im.get("resumed") or im.get("resumed") != ((r1.get("kvbound") or {}).get("implicit") or {}).get("checkpoint") or c <= 0:
        fails.append("the continuation did not resume turn 1: implicit %s (turn 1's %s), cached_tokens %d" % (im or None, (r1.get("kvbound") or {}).get("implicit"), c))
    if r2["choices"][0]["text"] != s2["choices"][0]["text"]:
        fails.append("the continuation %r, session_id's %r" % (r2["choices"][0]["text"], s2["choices"][0]["text"]))
    if r2["usage"]["prompt_tokens"] - c > s2["usage"]["prompt_tokens"] + 2:
        fails.append("the continuation read %d tokens, session_id's %d" % (r2["usage"]["prompt_tokens"] - c, s2["usage"]["prompt_tokens"]))


if __name__ == "__main__":
    case, args = sys.argv[1], sys.argv[2:]
    try:
        globals()["case_" + case](*args)
    except Exception as e:  # a crash of the client is a failure with its reason, not a traceback alone
        import traceback
        fails.append("the client failed: %s: %s" % (type(e).__name__, traceback.format_exc().strip().splitlines()[-3:]))
    print("\n".join(fails) if fails else "ok")
