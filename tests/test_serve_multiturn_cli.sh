#!/bin/sh
# test_serve_multiturn_cli.sh BUILD_DIR — the multi-turn shared-context test
# (issue 52 item 3, tests/serve_multiturn.py): one context, then questions in
# later turns of one `kvbound serve` session (/v1/completions with
# session_id), per policy, with and without recall, on models/kvb-vanilla-1m:
#   - serve_multiturn_one_passkey_full_streaming_recall: one passkey in the
#     middle of 256 tokens, 2 trials: full answers both (accuracy 1, every
#     stream holds the key), streaming at budget 64 answers none and holds it
#     nowhere, and with --recall-pages 4 it answers both again (its hot cache
#     still holds no key: the recalled pages bring it back);
#   - serve_multiturn_three_passkeys_retention_per_turn: three passkeys in 384
#     tokens, the first at the end (--depth 1): full holds each when it is
#     asked (retention 1), streaming 64 holds only the first, asked first
#     (turns' retention 1, 0, 0: mean 1/3), and the JSON has its fields;
#   - serve_multiturn_serve_args_reach_every_server: --serve-args are the
#     servers' flags (q8_0 rows answer as f16's here; an unknown flag stops
#     the run, exit 1, naming it).
. "$(dirname "$0")/cli_lib.sh"
. "$(dirname "$0")/serve_lib.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
MV="$HERE/../models/kvb-vanilla-1m.gguf"
serve_ready serve_multiturn "$MV" "the driver is Python" || exit $SERVE_RC
MT="python3 $HERE/serve_multiturn.py --kvbound $K -m $MV"
# field FILE POLICY RECALL FIELD: a run's FIELD (accuracy, retention) or its turns' retentions joined by commas (turns)
field() {
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
r = [r for r in d["runs"] if r["policy"] == sys.argv[2] and r["recall_pages"] == int(sys.argv[3])][0]
print(",".join("%g" % t["retention"] for t in r["turns"]) if sys.argv[4] == "turns" else "%g" % r[sys.argv[4]])' "$@" 2>/dev/null
}

$MT --policies full,streaming --budget 64 --passkeys 1 --length 256 --depth 0.5 --trials 2 --recall-pages 0,4 --out "$T/one.json" > "$T/one.md" 2> "$T/one.err"
got="$(field "$T/one.json" full 0 accuracy) $(field "$T/one.json" full 0 retention) $(field "$T/one.json" streaming 0 accuracy) \
$(field "$T/one.json" streaming 0 retention) $(field "$T/one.json" streaming 4 accuracy) $(field "$T/one.json" streaming 4 retention)"
if [ "$got" = "1 1 0 0 1 0" ] && grep -q '^| streaming | 4 | 1.000 | 0.000 |$' "$T/one.md"
then ok serve_multiturn_one_passkey_full_streaming_recall
else ko serve_multiturn_one_passkey_full_streaming_recall "got '$got': $(tail -c 300 "$T/one.err")"; fi

$MT --policies full,streaming --budget 64 --passkeys 3 --length 384 --depth 1 --trials 1 --out "$T/three.json" > /dev/null 2> "$T/three.err"
got="$(field "$T/three.json" full 0 turns) $(field "$T/three.json" streaming 0 turns) $(field "$T/three.json" streaming 0 retention)"
if [ "$got" = "1,1,1 1,0,0 0.333333" ] &&
   python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["passkeys"] == 3 and d["budget"] == 64 and d["serve_args"] == "" and d["runs"][0]["prompt_tokens"] <= 384 and {"trial","passkey","key","answer","correct","retention"} <= set(d["runs"][1]["turns"][0])' "$T/three.json"
then ok serve_multiturn_three_passkeys_retention_per_turn
else ko serve_multiturn_three_passkeys_retention_per_turn "got '$got': $(tail -c 300 "$T/three.err")"; fi

$MT --policies streaming --budget 64 --passkeys 1 --length 256 --trials 1 --recall-pages 4 --serve-args "--kv-dtype q8_0" --out "$T/q8.json" > /dev/null 2> "$T/q8.err"; r1=$?
$MT --policies streaming --budget 64 --passkeys 1 --length 256 --trials 1 --serve-args "--no-such-flag 1" > /dev/null 2> "$T/bad.err"; r2=$?
if [ $r1 -eq 0 ] && [ "$(field "$T/q8.json" streaming 4 accuracy)" = 1 ] && grep -q '"serve_args": "--kv-dtype q8_0"' "$T/q8.json" &&
   [ $r2 -eq 1 ] && grep -q 'no-such-flag' "$T/bad.err"
then ok serve_multiturn_serve_args_reach_every_server
else ko serve_multiturn_serve_args_reach_every_server "exit $r1/$r2: $(tail -c 300 "$T/q8.err" "$T/bad.err")"; fi
cli_summary
