#!/bin/sh
# test_serve_prefix_cli.sh BUILD_DIR — shared prefixes in `kvbound serve`
# (--prefix-cache, tools/serve/prefix.c), on the trained models/kvb-vanilla-1m
# (greedy text that follows its prompt), streaming with budget 1024:
#   - eight sessions with one system prompt (about 290 tokens), four at a
#     time, two turns each (tests/serve_prefix_load.py): every turn's text
#     equals, byte for byte, that of a server with --prefix-cache 0;
#   - every first turn but the one that had the prefix read reports
#     usage.prompt_tokens_details.cached_tokens = the prefix's tokens: the
#     system message's, counted independently (`kvbound template` of it
#     alone, then /tokenize; not a multiple of --chunk 64, so chunks after
#     the cut are not where a prompt read whole from 0 would cut them); later
#     turns and the server without sharing report 0;
#   - right after the first turns the pool holds the prefix's whole pages
#     once: pages shared = whole pages of the prefix x 12 streams, and the
#     pool holds under half the pages the server without sharing holds;
#     /metrics counts 7 hits and 7 prefixes' tokens;
#   - with --prefix-cache 1 and two system prompts in turn, texts still equal
#     the unshared server's and at most one prefix is kept;
#   - under h2o with a budget (96) below the prefix, with --keep 0 evicting
#     while the prefix is read, and by default pinning it (the system
#     prompt), texts still equal the unshared server's; snapkv is not
#     shared (it compresses a prompt where it ends) and equal too;
#   - 32 sessions with one system prompt (about 414 tokens, pinned) talk past a
#     streaming budget of 128 over three turns: at the end the pool still
#     holds the span's whole pages once (pages shared = 25 x 12, every
#     stream's), pages used 3768 against 13056 without sharing (< 0.4 asserted),
#     texts equal; the same pages are shared right after the first turns, whose
#     prompts (446 tokens) are past the budget already (issue 49 part 3);
#   - a session with --recall is not shared (its cold tier is its own) and
#     still answers.
#   - a prefix read under h2o at budget 96 is not forked by turns at budget
#     512 or under tova (texts equal the unshared server's), and is by a
#     later turn at h2o 96 (issue 48 survivor 19);
#   - with --prefix-cache 2, prompts A, B, A, C: B goes, and A is forked
#     again (issue 48 survivor 20).
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
M="$HERE/../models/kvb-vanilla-1m.gguf"
serve_ready serve_prefix "$M" "the load client is Python" || exit $SERVE_RC
python3 - > "$T/sys.txt" <<'EOF'
import random
random.seed(1)
w = "the little girl saw a big dog in the park and they played with a red ball all day until the sun went down and mom called her home for dinner".split()
print("Once upon a time, " + " ".join(random.choice(w) for _ in range(160)) + ".")
EOF
python3 - > "$T/sys2.txt" <<'EOF'
import random
random.seed(2)
w = "a small boy named tim had a blue boat and he sailed it on the pond every morning with his friend sam who liked to sing".split()
print("One day, " + " ".join(random.choice(w) for _ in range(120)) + ".")
EOF
CHUNK=64
ARGS="-m $M --budget 1024 -t 1 --chunk $CHUNK"
load() { # load NAME SYSTEM_FILE N TURNS CONCURRENCY: the client's JSON in $T/NAME.json (sessions NAME-s0 ...)
    python3 "$HERE/serve_prefix_load.py" "$URL" "$2" "$3" "$4" "$5" 32 "$1-" > "$T/$1.json" 2> "$T/$1.err"
}
pyq() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

start off $ARGS --sessions "$T/s-off" --prefix-cache 0
[ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/off.log")"; cli_summary; exit; }
load off "$T/sys.txt" 8 2 4
kill $PID
start on $ARGS --sessions "$T/s-on"
[ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/on.log")"; cli_summary; exit; }
load on "$T/sys.txt" 8 2 4
# the prefix's tokens, counted apart from the server's cut: the system message alone through the template, BOS first
python3 -c 'import json,sys; print(json.dumps([{"role": "system", "content": open(sys.argv[1]).read()}]))' "$T/sys.txt" > "$T/sysmsg.json"
"$K" template -m "$M" --messages "$T/sysmsg.json" --no-generation-prompt > "$T/sys.rendered" 2> "$T/template.err"
W=$(python3 -c 'import json,sys; print(json.dumps({"content": open(sys.argv[1]).read()}))' "$T/sys.rendered" |
    curl -s -H 'Content-Type: application/json' -d @- "$URL/tokenize" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["tokens"]) + 1)')
P=$W
metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
hits=$(metric kvbound_prefix_hits_total); reused=$(metric kvbound_prefix_tokens_reused_total)

errs=$(pyq "$T/on.json" 'len(d["errors"]) + 0'); errs_off=$(pyq "$T/off.json" 'len(d["errors"]) + 0')
same=$(python3 -c 'import json,sys
a = json.load(open(sys.argv[1]))["turns"]; b = json.load(open(sys.argv[2]))["turns"]
print(len(a) == len(b) == 16 and all(x["content"] == y["content"] and x["prompt_tokens"] == y["prompt_tokens"] for x, y in zip(a, b)))' "$T/on.json" "$T/off.json" 2>/dev/null)
varied=$(pyq "$T/on.json" 'len(set(t["content"] for t in d["turns"]))')
if [ "$errs" = 0 ] && [ "$errs_off" = 0 ] && [ "$same" = True ] && [ "${varied:-0}" -ge 4 ]; then ok serve_prefix_text_equals_unshared
else ko serve_prefix_text_equals_unshared "errors $errs/$errs_off, equal $same, $varied distinct texts: $(head -c 400 "$T/on.json") $(cat "$T/on.err")"; fi

# first turns: one 0 (it had the prefix read), seven P; later turns 0; the unshared server all 0
firsts=$(pyq "$T/on.json" '" ".join(sorted(str(t["cached_tokens"]) for t in d["turns"] if t["turn"] == 0))')
laters=$(pyq "$T/on.json" 'sum(t["cached_tokens"] for t in d["turns"] if t["turn"] > 0)')
offc=$(pyq "$T/off.json" 'sum(t["cached_tokens"] for t in d["turns"])')
want="0 $(printf '%s ' $P $P $P $P $P $P $P | sed 's/ $//')"
if [ -n "$P" ] && [ "$P" -ge 200 ] && [ $((P % CHUNK)) != 0 ] && [ "$firsts" = "$want" ] && [ "$laters" = 0 ] && [ "$offc" = 0 ] && [ "$hits" = 7 ] && [ "$reused" = $((7 * P)) ]; then
    ok serve_prefix_cached_tokens
else ko serve_prefix_cached_tokens "prefix $P tokens (the system message $W); first turns cached: $firsts (want $want); later $laters; unshared $offc; hits $hits, reused $reused"; fi

# pages: the prefix's whole pages (16 tokens each) held once by 8 sessions and the prefix, in 6 layers x 2 KV heads
shared=$(pyq "$T/on.json" 'd["shared_after_first_turns"]'); pon=$(pyq "$T/on.json" 'd["pages_after_first_turns"]')
poff=$(pyq "$T/off.json" 'd["pages_after_first_turns"]')
if [ -n "$P" ] && [ "$shared" = $((P / 16 * 12)) ] && [ -n "$pon" ] && [ -n "$poff" ] && [ $((2 * pon)) -lt "$poff" ]; then ok serve_prefix_pages_shared
else ko serve_prefix_pages_shared "shared $shared (want $((P / 16 * 12))), pool pages $pon with sharing, $poff without"; fi
kill $PID

# one place for two system prompts used in turn: prefixes come and go, texts stay those of the unshared server
start one $ARGS --sessions "$T/s-one" --prefix-cache 1
[ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/one.log")"; cli_summary; exit; }
for k in 1 2 3; do
    load one-a$k "$T/sys.txt" 2 1 2; load one-b$k "$T/sys2.txt" 2 1 2
done
np=$(metric kvbound_prefixes)
kill $PID
start two $ARGS --sessions "$T/s-two" --prefix-cache 0
[ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/two.log")"; cli_summary; exit; }
load two-a "$T/sys.txt" 2 1 2; load two-b "$T/sys2.txt" 2 1 2
kill $PID
bad=""
for k in 1 2 3; do
    for s in a b; do
        eq=$(python3 -c 'import json,sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
print(not a["errors"] and not b["errors"] and [t["content"] for t in a["turns"]] == [t["content"] for t in b["turns"]])' "$T/one-$s$k.json" "$T/two-$s.json" 2>/dev/null)
        [ "$eq" = True ] || bad="$bad $s$k"
    done
done
hit1=$(pyq "$T/one-a3.json" 'max(t["cached_tokens"] for t in d["turns"])')
if [ -z "$bad" ] && [ "$np" = 1 ] && [ "${hit1:-0}" -gt 0 ]; then ok serve_prefix_one_place_two_prompts
else ko serve_prefix_one_place_two_prompts "differ:$bad; prefixes kept $np; a3's cached $hit1"; fi

# past the budget: the prefix itself is evicted from while it is read (h2o0: h2o with --keep 0, budget 96 < the
# prefix), and the texts still equal the unshared server's (both read no chunk across the cut); h2o pins the system
# prompt (the default) and its forks evict only what follows it, equal too; snapkv is not shared
for cfg in h2o h2o0 snapkv; do
    pol=${cfg%0}; k=""; [ $cfg = h2o0 ] && k="--keep 0"
    for mode in on off; do
        a=""; [ $mode = off ] && a="--prefix-cache 0"
        start "$cfg-$mode" -m "$M" -t 1 --chunk $CHUNK --policy $pol --budget 96 --sessions "$T/s-$cfg-$mode" $a $k
        [ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/$cfg-$mode.log")"; cli_summary; exit; }
        load "$cfg-$mode" "$T/sys.txt" 4 1 2
        kill $PID
    done
done
eq=$(python3 -c 'import json,sys
r = []
for pol in ("h2o", "h2o0", "snapkv"):
    a = json.load(open(sys.argv[1] + "/" + pol + "-on.json")); b = json.load(open(sys.argv[1] + "/" + pol + "-off.json"))
    r.append(not a["errors"] and not b["errors"] and len(a["turns"]) == 4 and [t["content"] for t in a["turns"]] == [t["content"] for t in b["turns"]])
    r.append(sum(t["cached_tokens"] > 0 for t in a["turns"]))
print(r)' "$T" 2>/dev/null)
if [ "$eq" = "[True, 3, True, 3, True, 0]" ]; then ok serve_prefix_exact_past_budget
else ko serve_prefix_exact_past_budget "h2o, h2o --keep 0, snapkv: equal, turns cached = $eq (want [True, 3, True, 3, True, 0])"; fi

# issue 49 part 3: shared instructions stay shared for a session's whole life. 32 sessions open with one system
# prompt (about 414 tokens, pinned by default), then talk past a streaming budget of 128 over three turns of their own;
# at the end every session's pinned span still holds the prefix's whole pages (the library's forks never copy a page of
# the span: src/cache/cache.c), so the pool holds them once, and the texts are the unshared server's
python3 - > "$T/sys4.txt" <<'EOF'
import random
random.seed(4)
w = "the little girl saw a big dog in the park and they played with a red ball all day until the sun went down and mom called her home for dinner".split()
print("Once upon a time, " + " ".join(random.choice(w) for _ in range(230)) + ".")
EOF
for mode in on off; do
    a=""; [ $mode = off ] && a="--prefix-cache 0"
    start "life-$mode" -m "$M" -t 1 --chunk $CHUNK --policy streaming --budget 128 --sessions "$T/s-life-$mode" $a
    [ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/life-$mode.log")"; cli_summary; exit; }
    python3 "$HERE/serve_prefix_load.py" "$URL" "$T/sys4.txt" 32 3 8 48 life- > "$T/life-$mode.json" 2> "$T/life-$mode.err"
    curl -s "$URL/v1/sessions/life-s5" > "$T/life-$mode.sess"
    kill $PID
done
life=$(python3 -c 'import json,sys
a = json.load(open(sys.argv[1] + "/life-on.json")); b = json.load(open(sys.argv[1] + "/life-off.json"))
x = json.load(open(sys.argv[1] + "/life-on.sess"))
same = not a["errors"] and not b["errors"] and len(a["turns"]) == 96 and [t["content"] for t in a["turns"]] == [t["content"] for t in b["turns"]]
past = x["position"] > x["pinned"] + x["kv_budget"] and x["cache_tokens"] <= x["pinned"] + x["kv_budget"]
past = past and a["shared_after_first_turns"] == a["shared_end"] # each first prompt (446 tokens) is past the budget already
print(same, past, x["pinned"], a["shared_end"], b["shared_end"], a["pages_end"], b["pages_end"], sum(t["cached_tokens"] > 0 for t in a["turns"]))' "$T" 2>/dev/null)
set -- $life
if [ "$1 $2" = "True True" ] && [ "$3" -ge 400 ] && [ "$4" = $(($3 / 16 * 12)) ] && [ "$5" = 0 ] && [ $((10 * $6)) -lt $((4 * $7)) ] && [ "$8" = 31 ]; then
    ok serve_prefix_32_sessions_share_their_instructions_past_their_budget # issue 49 part 3
else ko serve_prefix_32_sessions_share_their_instructions_past_their_budget "texts equal, past the budget, pinned, pages shared (want pinned/16*12) with and without sharing, pages used with and without, turns cached (want 31): $life; $(head -c 300 "$T/life-on.json") $(cat "$T/life-on.err" "$T/life-on.sess")"; fi
set --

# recall: no sharing, still answers
start rec $ARGS --sessions "$T/s-rec" --recall-pages 2
[ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/rec.log")"; cli_summary; exit; }
load rec "$T/sys.txt" 2 1 2
rc=$(pyq "$T/rec.json" 'str(not d["errors"] and all(t["cached_tokens"] == 0 and t["content"] for t in d["turns"]))')
if [ "$rc" = True ] && [ "$(metric kvbound_prefixes)" = 0 ]; then ok serve_prefix_not_with_recall
else ko serve_prefix_not_with_recall "$(head -c 300 "$T/rec.json") $(cat "$T/rec.err")"; fi
kill $PID
# issue 48 survivors 19 and 20: a prefix is forked only by a turn with its cache configuration, and the least
# recently used one goes first. ask NAME SYSTEM_FILE USER [FIELDS]: one greedy chat turn without a session
# (FIELDS: more JSON members; $ASK_KEY: the API key it sends), its text and usage.prompt_tokens_details.cached_tokens in $T/NAME.ask
ask() {
    python3 - "$URL" "$2" "$3" "${4:-}" > "$T/$1.ask" 2>&1 <<'EOF'
import json, os, sys, urllib.request
url, system, user, extra = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3], sys.argv[4]
body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}], "max_tokens": 24, "temperature": 0, "ignore_eos": True}
body.update(json.loads("{" + extra + "}"))
headers = {"Content-Type": "application/json"}
if os.environ.get("ASK_KEY"): headers["Authorization"] = "Bearer " + os.environ["ASK_KEY"]
req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers)
d = json.load(urllib.request.urlopen(req, timeout=120))
print(json.dumps([d["choices"][0]["message"]["content"], d["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)]))
EOF
}
cached() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[1])' "$T/$1.ask" 2> /dev/null; }
# 19: read under h2o at budget 96, then turns at budget 512 and under tova at 96 (each a text of its own without
# sharing): each reads its own prefix, so the text is the unshared server's; a later turn at h2o 96 forks the first's.
# --keep 0: the policies govern the system prompt too (pinned, it would never be evicted, and the three texts be one)
for mode in on off; do
    a=""; [ $mode = off ] && a="--prefix-cache 0"
    start "cfg-$mode" -m "$M" -t 1 --chunk $CHUNK --policy h2o --budget 96 --max-budget 1024 --keep 0 --sessions "$T/s-cfg-$mode" $a
    [ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/cfg-$mode.log")"; cli_summary; exit; }
    ask "cfg-$mode-1" "$T/sys.txt" "Who was in the garden?" '"kv_policy":"h2o","kv_budget":96'
    ask "cfg-$mode-2" "$T/sys.txt" "Who was in the garden?" '"kv_policy":"h2o","kv_budget":512'
    ask "cfg-$mode-3" "$T/sys.txt" "Who was in the garden?" '"kv_policy":"tova","kv_budget":96'
    ask "cfg-$mode-4" "$T/sys.txt" "Why was the cat sad?" '"kv_policy":"h2o","kv_budget":96'
    kill $PID
done
bad=""
text() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0])' "$T/$1.ask" 2> /dev/null; }
for k in 1 2 3 4; do [ -n "$(text cfg-on-$k)" ] && [ "$(text cfg-on-$k)" = "$(text cfg-off-$k)" ] || bad="$bad turn$k"; done
# the three configurations give three texts, so a fork of the wrong prefix shows
[ "$(text cfg-off-1)" != "$(text cfg-off-2)" ] && [ "$(text cfg-off-1)" != "$(text cfg-off-3)" ] || bad="$bad (the configurations' texts are alike)"
cc="$(cached cfg-on-1) $(cached cfg-on-2) $(cached cfg-on-3) $(cached cfg-on-4)"
if [ -z "$bad" ] && [ "$cc" = "0 0 0 $(cached cfg-on-4)" ] && [ "$(cached cfg-on-4)" -gt 0 ] && [ "$(cached cfg-off-4)" = 0 ]; then
    ok serve_prefix_other_policy_or_budget_not_forked # issue 48 survivor 19
else ko serve_prefix_other_policy_or_budget_not_forked "differ from --prefix-cache 0:$bad; cached $cc (want 0 0 0 P); $(cat "$T/cfg-on-2.ask" "$T/cfg-off-2.ask" "$T/cfg-on-3.ask" "$T/cfg-off-3.ask")"; fi
# 20: two places; A and B read, A used again, then C: B (least recently used) goes, A is still forked
python3 - > "$T/sys3.txt" <<'EOF'
import random
random.seed(3)
w = "the old man had a garden with tall trees and red flowers and every day a bird came to sing on his window".split()
print("Long ago, " + " ".join(random.choice(w) for _ in range(120)) + ".")
EOF
start lru $ARGS --sessions "$T/s-lru" --prefix-cache 2
[ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/lru.log")"; cli_summary; exit; }
ask lru-a1 "$T/sys.txt" "Who was in the garden?"; ask lru-b1 "$T/sys2.txt" "Who was in the garden?"
ask lru-a2 "$T/sys.txt" "Why was the cat sad?"; ask lru-c1 "$T/sys3.txt" "Who was in the garden?"
ask lru-a3 "$T/sys.txt" "What did the dog find?"; ask lru-b2 "$T/sys2.txt" "Why was the cat sad?"
lc="$(cached lru-a1) $(cached lru-b1) $(cached lru-a2) $(cached lru-c1) $(cached lru-a3) $(cached lru-b2)"
la=$(cached lru-a2)
if [ "${la:-0}" -gt 0 ] && [ "$lc" = "0 0 $la 0 $la 0" ] && [ "$(metric kvbound_prefixes)" = 2 ] && [ "$(metric kvbound_prefix_hits_total)" = 2 ]; then
    ok serve_prefix_least_recently_used_dropped # issue 48 survivor 20
else ko serve_prefix_least_recently_used_dropped "cached per turn (A B A C A B): $lc (want 0 0 P 0 P 0); prefixes $(metric kvbound_prefixes), hits $(metric kvbound_prefix_hits_total)"; fi
kill $PID

# issue 49 part 4: reuse never crosses tenants. Two keys in one file (a comment, a blank line, spaces around a key),
# each its own tenant; cache_salt splits a tenant further. The same six turns on a server with --prefix-cache 0 give
# the texts each must equal, whatever was shared.
printf '# the operator first\nkey-one\n\n  key-two  \n' > "$T/keys"
for mode in on off; do
    a=""; [ $mode = off ] && a="--prefix-cache 0"
    start "ten-$mode" $ARGS --sessions "$T/s-ten-$mode" --api-key-file "$T/keys" $a
    [ -n "$URL" ] || { ko serve_prefix_starts "$(tail -n 3 "$T/ten-$mode.log")"; cli_summary; exit; }
    ASK_KEY=key-one ask "ten-$mode-1" "$T/sys.txt" "Who was in the garden?"                       # reads the prefix
    ASK_KEY=key-one ask "ten-$mode-2" "$T/sys.txt" "Why was the cat sad?"                         # same key: forks it
    ASK_KEY=key-two ask "ten-$mode-3" "$T/sys.txt" "Why was the cat sad?"                         # another key: its own
    ASK_KEY=key-one ask "ten-$mode-4" "$T/sys.txt" "Why was the cat sad?" '"cache_salt":"team-a"' # another salt: its own
    ASK_KEY=key-one ask "ten-$mode-5" "$T/sys.txt" "What did the dog find?" '"cache_salt":"team-a"' # same key and salt: forks
    ASK_KEY=key-two ask "ten-$mode-6" "$T/sys.txt" "What did the dog find?" '"cache_salt":"team-a"' # the salt, another key
    if [ $mode = on ]; then
        m2=$(curl -s -o "$T/m2.json" -w '%{http_code}' -H 'Authorization: Bearer key-two' "$URL/metrics")
        m1=$(curl -s -H 'Authorization: Bearer key-one' "$URL/metrics" | awk '$1 == "kvbound_prefix_hits_total" { print $2 }')
        for bad in 5 '""' "\"$(printf '%0257d' 0)\"" '["a"]'; do
            curl -s -o "$T/salt.json" -w '%{http_code}\n' -H 'Authorization: Bearer key-one' \
                -d "{\"prompt\":\"Once\",\"max_tokens\":1,\"cache_salt\":$bad}" "$URL/v1/completions" >> "$T/salt.codes"
            grep -q "'cache_salt' must be a string of 1 to 256 bytes" "$T/salt.json" || echo "no name for $bad" >> "$T/salt.codes"
        done
        for route in /v1/completions /completion; do
            curl -s -o /dev/null -w '%{http_code}\n' -H 'Authorization: Bearer key-one' \
                -d "{\"prompt\":\"Once\",\"max_tokens\":1,\"cache_salt\":\"$(printf '%0256d' 0)\"}" "$URL$route" >> "$T/salt.codes"
        done
    fi
    kill $PID
done
bad=""
for k in 1 2 3 4 5 6; do [ -n "$(text ten-on-$k)" ] && [ "$(text ten-on-$k)" = "$(text ten-off-$k)" ] || bad="$bad turn$k"; done
tc="$(cached ten-on-1) $(cached ten-on-2) $(cached ten-on-3) $(cached ten-on-4) $(cached ten-on-5) $(cached ten-on-6)"
tp=$(cached ten-on-2)
if [ -z "$bad" ] && [ "${tp:-0}" -gt 0 ] && [ "$tc" = "0 $tp 0 0 $tp 0" ] && [ "$m1" = 2 ]; then
    ok serve_prefix_tenants_and_cache_salt_never_reuse_across # issue 49 part 4
else ko serve_prefix_tenants_and_cache_salt_never_reuse_across "differ from --prefix-cache 0:$bad; cached per turn $tc (want 0 P 0 0 P 0); hits seen by the operator $m1"; fi
if [ "$m2" = 403 ] && grep -q 'first key of --api-key-file' "$T/m2.json" && [ "$(tr '\n' ' ' < "$T/salt.codes")" = "400 400 400 400 200 200 " ]; then
    ok serve_tenant_metrics_operator_only_and_cache_salt_checked
else ko serve_tenant_metrics_operator_only_and_cache_salt_checked "/metrics for the second key: $m2 $(cat "$T/m2.json"); cache_salt 5, \"\", 257 bytes, an array, 256 bytes twice: $(cat "$T/salt.codes")"; fi
# the key file's faults are refused at start, by line, the key never said (a server that starts is cut at 30 s)
printf 'alpha-key\n# two\nbeta-key\n alpha-key\n' > "$T/keys-dup"; printf '# only a comment\n\n   \n' > "$T/keys-none"
printf 'good-key\nbad key\n' > "$T/keys-space"
timeout 30 "$K" serve -m "$M" --port 0 --sessions "$T/s-kd" --api-key-file "$T/keys-dup" > /dev/null 2> "$T/kd.err"; r1=$?
timeout 30 "$K" serve -m "$M" --port 0 --sessions "$T/s-kn" --api-key-file "$T/keys-none" > /dev/null 2> "$T/kn.err"; r2=$?
timeout 30 "$K" serve -m "$M" --port 0 --sessions "$T/s-ks" --api-key-file "$T/keys-space" > /dev/null 2> "$T/ks.err"; r3=$?
if [ $r1 = 2 ] && grep -q 'keys-dup: line 4 repeats the key of line 1' "$T/kd.err" && ! grep -q alpha "$T/kd.err" && [ $r2 = 2 ] &&
   grep -q 'keys-none: holds no key' "$T/kn.err" && [ $r3 = 2 ] && grep -q 'keys-space: line 2: a key is visible characters' "$T/ks.err" && ! grep -q 'bad key' "$T/ks.err"
then ok serve_tenant_key_file_faults_by_line
else ko serve_tenant_key_file_faults_by_line "rc $r1 $r2 $r3: $(cat "$T/kd.err" "$T/kn.err" "$T/ks.err")"; fi
cli_summary
