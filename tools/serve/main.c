/*
 * main.c — `kvbound serve`: flags, the model, the store, the scheduler and
 * the HTTP daemon, then a wait for SIGINT/SIGTERM. The signals are blocked
 * in every thread and taken here with sigwait, so shutdown runs in order:
 * stop listening, let running turns finish (5 s at most), stop the
 * connections, close the store. Sessions are in the store after every
 * completed turn, so nothing else needs saving.
 */
#include "serve.h"

#include "../kvbound/cli.h"

#include <errno.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Library messages: warnings only. Its errors are statuses the server
 * answers with (a bad request's 400 names the cause), not log lines. */
static void log_warnings(enum kvb_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == KVB_LOG_WARN) fprintf(stderr, "kvbound serve: warning: %s\n", msg);
}

/* Whether --host is a loopback address (or name). */
static bool host_is_loopback(const char *host) {
    if (!strcmp(host, "localhost") || !strcmp(host, "::1") || !strcmp(host, "[::1]")) return true;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

#define SERVE_COLD_MB 64 /* --cold-mb per session: a server holds many */

static int usage(FILE *f) {
    fprintf(f,
            "usage: kvbound serve -m MODEL [options]\n"
            "An OpenAI-compatible server (POST /v1/chat/completions, /v1/completions, both also without /v1,\n"
            "and llama-server's /completion; GET /v1/models, /v1/sessions/ID, /metrics, /health, and a page\n"
            "at /) for many long sessions on one page pool.\n"
            "\n"
            "  -m, --model PATH      GGUF model (a family kvbound loads: see `kvbound info`, the README)\n"
            "  --host ADDR           address to listen on (default 127.0.0.1: loopback only)\n"
            "  --port N              port (default 8080; 0 picks a free one, printed at start)\n"
            "  --parallel N          requests generating at once, batched in every step (default 4)\n"
            "  --pool-mb M           the KV page pool every session draws from, MiB (default 1024)\n"
            "  --policy NAME         cache policy of every session (default streaming; full is allowed)\n"
            "  --sessions DIR|URL    session store: a directory (SQLite file DIR/sessions.sqlite) or\n"
            "                        redis://HOST:PORT (default ./kvbound-sessions)\n"
            "  --api-key KEY         require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' (also KVB_API_KEY);\n"
            "                        /, /health open\n"
            "  --api-key-file FILE   keys from FILE, one a line, each its own tenant: no request reuses\n"
            "                        another tenant's state; # starts a comment line; the first key's\n"
            "                        alone reads /metrics when there are several (llama-server's flag)\n"
            "  -t, --threads N       threads of each step (default: the cores)\n"
            CLI_NO_MMAP_HELP
            "  --step-tokens N       rows of one step: decode tokens + prompt chunks (default 512; smaller\n"
            "                        bounds the pause a long prompt puts on everyone's next token)\n"
            "  --chunk N             prompts join steps in chunks of N tokens (default 256, <= --step-tokens)\n");
    fprintf(f,
            "  --step-target-ms N|Kx stall-free steps: a step that carries decoders takes prompt rows only\n"
            "                        while its predicted time (fitted to the measured steps) stays under\n"
            "                        N ms, or K times the decode-only step (Kx); 0: off, prompts fill\n"
            "                        --step-tokens (default 1.5x: gaps within about 1.5 decode steps;\n"
            "                        docs/SERVING.md)\n"
            "  --prompt-min-rows N   with a step target: the oldest waiting prompt still reads N rows a step\n"
            "                        however small the budget (1..--chunk; default 4, or --chunk if smaller:\n"
            "                        larger reads prompts sooner, but every such step pauses the streams\n"
            "                        for N rows)\n"
            "  --prompt-step-share S with a step target: at most this share of the decoders' gaps (over\n"
            "                        recent steps) may come from steps that carry prompt rows; the other\n"
            "                        steps carry decoders alone (above 0, at most 1; default 1: every step\n"
            "                        may; lower trades throughput and first tokens for a lower median gap)\n"
            "  --queue N             requests waiting for room at most; beyond, 503 (default 64)\n"
            "  --queue-timeout S     seconds a request may wait for room; then 503 (default 30)\n"
            "  --max-tokens N        largest max_tokens a request may ask (default 16384)\n"
            "  --default-max-tokens N  max_tokens when a request gives none (default 512)\n"
            "  --max-prompt-tokens N the most tokens a turn's prompt may have; beyond, 400 (default 8 x the\n"
            "                        larger of --budget and the trained length). A prompt past the budget\n"
            "                        or the trained length is answered with kvbound.warnings (and logged)\n"
            "  --template-deadline-ms MS  wall-clock limit of one chat-template render (1-600000, default\n"
            "                        2000); past it the request is 400 naming it (renders also have a step budget)\n"
            "  --max-compiles N      requests compiling a grammar or schema at once (1-64, default 4); one\n"
            "                        past it waits --compile-wait-ms (0-60000, default 2000), then 503\n"
            "  --max-budget N        largest kv_budget a request may ask (default 8 x --budget)\n"
            "  --max-sessions N      idle sessions kept in memory; more are in the store only (default 256)\n"
            "  --prefix-cache N      shared prefixes kept (default 8; 0: none): a chat's first turn is cut\n"
            "                        after the messages before its last user message (a system prompt,\n"
            "                        few-shot examples); turns with the same ones read them once and hold\n"
            "                        their pages once, copy on write (usage.prompt_tokens_details.cached_tokens)\n"
            "  --prefix-min N        the fewest tokens a shared prefix may have (default 32)\n"
            "  --keep N              what a session pins (a request's n_keep when it gives none): -1 its\n"
            "                        instructions, the leading system/developer messages and the tools\n"
            "                        (default); 0 nothing (the policy's sinks only); N the first N tokens.\n"
            "                        Pinned tokens are never evicted by any policy and sit on top of the\n"
            "                        budget; a session keeps its first turn's span\n"
            "  --keep-max N          the most tokens pinned (default 4096); past it the policy governs the\n"
            "                        rest of the span (kvbound.keep.capped, and a line in the log)\n"
            "  --park-compress kvzip --park-ratio R   compress-on-park: when a session's turn ends and it\n"
            "                        is stored, its cache is compressed without a question (kvzip: the\n"
            "                        model reconstructs its history, each token scored by the attention it\n"
            "                        gets) to 1 - R of its tokens (R: the fraction removed, 0 < R < 1); the\n"
            "                        next turn starts from that. Costs about a prefill of the session's\n"
            "                        history a turn, which every other stream waits for (off by default)\n");
    fprintf(f,
            "  --checkpoints N       implicit sessions: a chat without session_id (an OpenAI client resending\n"
            "                        its whole history) resumes the state of the turn its history ends\n"
            "                        with and reads only the rest, exactly as with session_id; each turn's\n"
            "                        end is a checkpoint in the --sessions store, the last N of each\n"
            "                        conversation kept, so a client that rewrote its last turns resumes\n"
            "                        from an earlier one (0-16, default 4; 0: off). kvbound.implicit says\n"
            "                        which was resumed; cached_tokens counts the tokens not read again\n"
            "  --checkpoint-max N    checkpoints kept in the store, all conversations (default 4096)\n"
            "  --checkpoint-mb M     their bytes at most (default 1024); past either, the least recently\n"
            "                        used go first\n"
            "  --checkpoint-ttl S    a checkpoint unused for S seconds goes (default 86400)\n"
            "  --max-body BYTES      largest request body; beyond, 413 (default 4194304)\n"
            "  --max-connections N   connections at once; one more is refused at once (default 256)\n"
            "  --max-connections-per-ip N  connections from one address (default half of --max-connections)\n"
            "  --request-timeout S   a connection must send a whole request within S seconds of opening or\n"
            "                        of its previous answer, else it is closed (default 30)\n"
            "  --cors ORIGIN         let pages from ORIGIN (e.g. http://localhost:3000, or *) call the API\n"
            "                        across sites; repeatable. Off by default: a POST or DELETE whose\n"
            "                        Origin is another site's is 403. Without --api-key on a loopback\n"
            "                        address, a Host other than localhost or the address is 403 too\n");
    fprintf(f,
            "  --model-name NAME     the model's id in the API (default: the file's name)\n"
            "  --jinja               chat through the model's own Jinja chat template (tokenizer.chat_template),\n"
            "                        with tools and its variables: the default when the template runs\n"
            "  --no-jinja            chat through the template's signature family instead (no tools)\n"
            "  --special-in-content  read control-token text in a message's content (\"<|im_end|>\") as the\n"
            "                        token, as the template's own: a user can then close their turn and\n"
            "                        write a system one. Off: only the template's text is control tokens\n"
            "  --chat-template-file FILE  a Jinja chat template to use instead of the model's\n"
            "  --chat-template NAME|TEMPLATE  chatml | llama3 | llama2 | mistral | gemma | plain: that signature\n"
            "                        family (as --template; with --jinja a note says so); another name is an\n"
            "                        error; anything else is Jinja template text\n"
            "  --template NAME       chat format: chatml | llama3 | llama2 | mistral | gemma | plain (no Jinja;\n"
            "                        default: the model's template, plain when it has none or lacks its tokens)\n"
            "  -c, --ctx-size N      tokens a session may hold under --policy full (default: the model's\n"
            "                        trained length; past it, a note says so); bounded policies hold their\n"
            "                        budget and run past any length (-c is then noted as changing nothing)\n"
            "  --temp T              a request's temperature when it gives none (default the sampler's, 0.8)\n"
            "  --seed N              a request's seed when it gives none (default -1: a fresh one each request)\n"
            "  -n, --n-predict N     as --default-max-tokens (-1: up to --max-tokens)\n"
            "  -np N                 as --parallel; -a, --alias NAME as --model-name (llama-server's spellings)\n"
            "  -ctk T, -ctv T        as --kv-dtype-k T, --kv-dtype-v T (also --cache-type-k, --cache-type-v)\n"
            "  -ngl N, -fa [on|off|auto]  accepted and noted: kvbound runs on the CPU, with its own attention\n"
            "  -v, --verbose         a line per request on stderr: method, path, status, ms, session\n"
            "\n");
    cli_kv_types_help(f, "f16");
    cli_policy_help(f, 1024);
    cli_recall_help(f, SERVE_COLD_MB);
    fprintf(f,
            "                        (serve: --recall applies to every bounded session, --cold-mb and the\n"
            "                        cold file are per session, and a session's cold tier is stored with it)\n"
            "\n"
            "Request fields beyond OpenAI's: kv_policy, kv_budget, kv_sinks, n_keep (a session keeps the ones of\n"
            "its first turn), session_id (the server keeps the conversation; each turn reads only its new text;\n"
            "without it, a chat that resends a conversation the server answered resumes it all the same:\n"
            "--checkpoints), llama-server's n_predict (max_tokens), vLLM's cache_salt (a string of 1 to 256\n"
            "bytes: a shared prefix or a checkpoint is reused only between requests with the same API key and\n"
            "salt). A chat whose last message is the assistant's text is a prefill: the answer continues it.\n");
    return f == stdout ? 0 : 2;
}

/* What the command line says beyond struct serve_opts. */
struct serve_cli {
    struct cli_model_opts mo; /* -m, --no-mmap, -t */
    struct cli_policy po;
    enum kvb_policy_id pid;
    struct cli_kv_types kvt;
    struct cli_recall rec;
    const char *forced_template, *template_file, *template_text;
    const char *forced_template_flag; /* --template or --chat-template */
    bool no_jinja, jinja_given;
    const char *api_key_file;
    int pool_mb, max_conn, max_per_ip, request_timeout, max_budget;
    int n_predict; /* -n: 0 not given, -1 up to --max-tokens */
    long long max_body;
};

static void serve_defaults(struct serve_opts *o, struct serve_cli *c) {
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 4;
    o->queue_max = 64;
    o->queue_timeout_s = 30;
    o->max_tokens_cap = 16384;
    o->default_max_tokens = 512;
    o->max_sessions = 256;
    o->prefix_cache = 8;
    o->prefix_min = 32;
    o->keep = -1;
    o->keep_max = 4096;
    o->park_pid = -1;
    o->checkpoints = 4;
    o->checkpoint_max = 4096;
    o->checkpoint_bytes = 1024ll << 20;
    o->checkpoint_ttl_s = 86400;
    o->step_tokens = 512;
    o->chunk = 256;
    o->step_target_x = 1.5f; /* the default: see --help and docs/SERVING.md */
    o->prompt_min_rows = 0; /* not given: 4, or --chunk if smaller (serve_args) */
    o->prompt_step_share = 1.0f;
    o->default_temp = -1;
    o->max_body = (size_t)4 << 20;
    o->max_compiles = 4;
    o->compile_wait_ms = 2000;
    o->sessions = "kvbound-sessions";
    o->api_key = getenv("KVB_API_KEY");
    if (o->api_key && !o->api_key[0]) o->api_key = NULL;
    memset(c, 0, sizeof *c);
    cli_model_init(&c->mo, "serve", CLI_MODEL_NO_MMAP | CLI_MODEL_THREADS, cli_cores());
    c->mo.threads_max = 256;
    c->mo.name_cmd_on_load = true;
    c->pool_mb = 1024;
    c->max_conn = 256;
    c->request_timeout = 30;
    c->pid = KVB_POLICY_STREAMING;
    cli_policy_init(&c->po, 1024);
    cli_kv_types_init(&c->kvt, KVB_DTYPE_F16);
    cli_recall_init(&c->rec);
    c->rec.cold_mb = SERVE_COLD_MB;
}

static int add_cors(struct serve_opts *o, const char *v) {
    if (o->n_cors == (int)(sizeof o->cors / sizeof *o->cors)) { fprintf(stderr, "kvbound serve: --cors: at most %d origins\n", o->n_cors); return 2; }
    if (strcmp(v, "*") && strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) {
        fprintf(stderr, "kvbound serve: --cors %s: want an origin such as http://localhost:3000 (scheme://host[:port]), or *\n", v);
        return 2;
    }
    o->cors[o->n_cors++] = v;
    return 0;
}

/* One option of serve's own that takes a value (argv[*i]); 0 or 2. */
static int serve_option(struct serve_opts *o, struct serve_cli *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = cli_opt_value("serve",
                                  "--host --port --parallel --pool-mb --policy --sessions --api-key --queue "
                                  "--queue-timeout --max-tokens --default-max-tokens --max-budget --max-sessions --prefix-cache --prefix-min --max-body "
                                  "--keep --keep-max --checkpoints --checkpoint-max --checkpoint-mb --checkpoint-ttl --park-compress --park-ratio "
                                  "--max-connections --max-connections-per-ip --request-timeout --cors --model-name --template "
                                  "--step-tokens --chunk --step-target-ms --prompt-min-rows --prompt-step-share --max-prompt-tokens --max-compiles --compile-wait-ms --template-deadline-ms --temp --seed -n --n-predict --api-key-file -ctk -ctv --cache-type-k --cache-type-v -np -a --alias -c --ctx-size -ngl --n-gpu-layers --chat-template --chat-template-file",
                                  argc, argv, i);
    if (!v) return 2;
    int r = 0;
    if (!strcmp(a, "--host")) o->host = v;
    else if (!strcmp(a, "--port")) r = cli_parse_i32(a, v, 0, 65535, &o->port);
    else if (!strcmp(a, "--parallel")) r = cli_parse_i32(a, v, 1, 256, &o->parallel);
    else if (!strcmp(a, "--pool-mb")) r = cli_parse_i32(a, v, 1, 1 << 20, &c->pool_mb);
    else if (!strcmp(a, "--policy")) {
        if (kvb_policy_from_name(v, &c->pid) != KVB_OK) { fprintf(stderr, "kvbound serve: --policy: %s\n", kvb_last_error()); return 2; }
    }
    else if (!strcmp(a, "--sessions")) o->sessions = v;
    else if (!strcmp(a, "--api-key")) o->api_key = v;
    else if (!strcmp(a, "--api-key-file")) c->api_key_file = v;
    else if (!strcmp(a, "-ctk") || !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-k") || !strcmp(a, "--cache-type-v")) {
        enum kvb_dtype d; /* llama-server's spellings of --kv-dtype-k/-v */
        if (kvb_dtype_from_name(v, &d) != KVB_OK) { fprintf(stderr, "kvbound serve: %s: %s\n", a, kvb_last_error()); return 2; }
        if (a[strlen(a) - 1] == 'k') c->kvt.k = d;
        else c->kvt.v = d;
    }
    else if (!strcmp(a, "--temp")) r = cli_parse_f32(a, v, 0, 2, &o->default_temp);
    else if (!strcmp(a, "--seed")) {
        long long seed = 0; /* -1: a fresh seed per request, as llama-server's default */
        r = cli_parse_i64(a, v, -1, 1ll << 53, &seed);
        o->seed_given = !r && seed >= 0;
        o->default_seed = seed >= 0 ? (uint64_t)seed : 0;
    }
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { /* llama-server's: a request's n_predict when it gives none */
        int32_t n = 0;
        r = cli_parse_i32(a, v, -1, 1 << 30, &n);
        if (!r && n == 0) { fprintf(stderr, "kvbound serve: %s 0: a request must generate at least one token (-1: up to --max-tokens)\n", a); r = 2; }
        c->n_predict = n;
    }
    else if (!strcmp(a, "--queue")) r = cli_parse_i32(a, v, 0, 1 << 20, &o->queue_max);
    else if (!strcmp(a, "--queue-timeout")) r = cli_parse_i32(a, v, 1, 86400, &o->queue_timeout_s);
    else if (!strcmp(a, "--max-tokens")) r = cli_parse_i32(a, v, 1, 1 << 30, &o->max_tokens_cap);
    else if (!strcmp(a, "--max-prompt-tokens")) r = cli_parse_i32(a, v, 1, 1 << 30, &o->max_prompt_tokens);
    else if (!strcmp(a, "--max-compiles")) r = cli_parse_i32(a, v, 1, 64, &o->max_compiles);
    else if (!strcmp(a, "--template-deadline-ms")) r = cli_parse_i32(a, v, 1, 600000, &o->template_deadline_ms);
    else if (!strcmp(a, "--compile-wait-ms")) r = cli_parse_i32(a, v, 0, 60000, &o->compile_wait_ms);
    else if (!strcmp(a, "--default-max-tokens")) r = cli_parse_i32(a, v, 1, 1 << 30, &o->default_max_tokens);
    else if (!strcmp(a, "--max-budget")) r = cli_parse_i32(a, v, 2, 1 << 24, &c->max_budget);
    else if (!strcmp(a, "--max-sessions")) r = cli_parse_i32(a, v, 0, 4000, &o->max_sessions);
    else if (!strcmp(a, "--prefix-cache")) r = cli_parse_i32(a, v, 0, 64, &o->prefix_cache);
    else if (!strcmp(a, "--prefix-min")) r = cli_parse_i32(a, v, 1, 1 << 20, &o->prefix_min);
    else if (!strcmp(a, "--keep")) r = cli_parse_i32(a, v, -1, KVB_KEEP_MAX, &o->keep);
    else if (!strcmp(a, "--keep-max")) r = cli_parse_i32(a, v, 0, KVB_KEEP_MAX, &o->keep_max);
    else if (!strcmp(a, "--checkpoints")) r = cli_parse_i32(a, v, 0, SERVE_CANDS, &o->checkpoints);
    else if (!strcmp(a, "--park-compress")) {
        enum kvb_policy_id pid;
        if (kvb_policy_from_name(v, &pid) != KVB_OK) { fprintf(stderr, "kvbound serve: --park-compress: %s\n", kvb_last_error()); return 2; }
        if (pid != KVB_POLICY_KVZIP) {
            fprintf(stderr, "kvbound serve: --park-compress %s: not implemented (kvzip only: it scores a parked session without a question)\n", v);
            return 2;
        }
        o->park_pid = (int)pid;
    }
    else if (!strcmp(a, "--park-ratio")) {
        char *end = NULL;
        errno = 0;
        o->park_ratio = strtod(v, &end);
        if (errno || !end || *end || end == v || !(o->park_ratio > 0 && o->park_ratio < 1)) {
            fprintf(stderr, "kvbound serve: --park-ratio: '%s' is not a fraction of the cache removed in (0, 1)\n", v);
            return 2;
        }
    }
    else if (!strcmp(a, "--checkpoint-max") || !strcmp(a, "--checkpoint-mb") || !strcmp(a, "--checkpoint-ttl")) {
        long long n = 0;
        r = cli_parse_i64(a, v, 1, !strcmp(a, "--checkpoint-mb") ? 1ll << 24 : 1ll << 40, &n);
        if (!strcmp(a, "--checkpoint-max")) o->checkpoint_max = n;
        else if (!strcmp(a, "--checkpoint-mb")) o->checkpoint_bytes = (int64_t)n << 20;
        else o->checkpoint_ttl_s = n;
    }
    else if (!strcmp(a, "--max-body")) r = cli_parse_i64(a, v, 1024, 1ll << 30, &c->max_body);
    else if (!strcmp(a, "--max-connections")) r = cli_parse_i32(a, v, 1, 65536, &c->max_conn);
    else if (!strcmp(a, "--max-connections-per-ip")) r = cli_parse_i32(a, v, 1, 65536, &c->max_per_ip);
    else if (!strcmp(a, "--request-timeout")) r = cli_parse_i32(a, v, 1, 3600, &c->request_timeout);
    else if (!strcmp(a, "--cors")) r = add_cors(o, v);
    else if (!strcmp(a, "--model-name") || !strcmp(a, "-a") || !strcmp(a, "--alias")) o->model_name = v;
    else if (!strcmp(a, "-np")) r = cli_parse_i32(a, v, 1, 256, &o->parallel);
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) r = cli_parse_i32(a, v, 0, 1 << 30, &o->n_ctx);
    else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) {
        int32_t ngl = 0;
        r = cli_parse_i32(a, v, -1, 1 << 20, &ngl);
        if (!r) fprintf(stderr, "kvbound serve: note: %s %s changes nothing: kvbound runs on the CPU\n", a, v);
    }
    else if (!strcmp(a, "--chat-template")) {
        enum kvb_chat_style st;
        static const char name_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";
        if (kvb_chat_style_from_name(v, &st) == KVB_OK) c->forced_template = v, c->forced_template_flag = a;
        else if (v[0] && strspn(v, name_chars) == strlen(v)) { /* a name, not template text: one kvbound does not know */
            fprintf(stderr, "kvbound serve: --chat-template %s: no such name; the names are chatml, llama3, llama2, mistral, gemma, plain "
                            "(signature families); else give Jinja template text, or --chat-template-file FILE\n", v);
            r = 2;
        }
        else c->template_text = v;
    }
    else if (!strcmp(a, "--chat-template-file")) c->template_file = v;
    else if (!strcmp(a, "--template")) c->forced_template = v, c->forced_template_flag = a;
    else if (!strcmp(a, "--step-tokens")) r = cli_parse_i32(a, v, 1, 1 << 16, &o->step_tokens);
    else if (!strcmp(a, "--chunk")) r = cli_parse_i32(a, v, 1, 1 << 16, &o->chunk);
    else if (!strcmp(a, "--prompt-step-share")) {
        r = cli_parse_f32(a, v, 0, 1, &o->prompt_step_share);
        if (!r && !(o->prompt_step_share > 0)) {
            fprintf(stderr, "kvbound serve: --prompt-step-share must be above 0 and at most 1 (1: every step may carry prompt rows), got %s\n", v);
            r = 1;
        }
    }
    else if (!strcmp(a, "--prompt-min-rows")) r = cli_parse_i32(a, v, 1, 1 << 16, &o->prompt_min_rows);
    else if (!strcmp(a, "--step-target-ms")) {
        const size_t n = v ? strlen(v) : 0;
        char num[32];
        if (n && n < sizeof num && (v[n - 1] == 'x' || v[n - 1] == 'X')) { /* Kx: a multiple of the decode-only step */
            memcpy(num, v, n - 1);
            num[n - 1] = 0;
            r = cli_parse_f32(a, num, 1, 1000, &o->step_target_x);
            o->step_target_ms = 0;
        } else {
            r = cli_parse_f32(a, v, 0, 1e6, &o->step_target_ms);
            o->step_target_x = 0;
        }
    }
    return r ? 2 : 0;
}

/* The options, checked and derived. -1: go on; else the exit code. */
static int serve_args(struct serve_opts *o, struct serve_cli *c, int argc, char **argv) {
    serve_defaults(o, c);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout);
        if (!strcmp(argv[i], "--jinja")) { c->no_jinja = false; c->jinja_given = true; continue; }
        if (!strcmp(argv[i], "-fa") || !strcmp(argv[i], "--flash-attn")) { /* llama-server's; its value (on, off, auto) is optional */
            const char *fv = i + 1 < argc ? argv[i + 1] : NULL;
            const bool val = fv && (!strcmp(fv, "on") || !strcmp(fv, "off") || !strcmp(fv, "auto"));
            fprintf(stderr, "kvbound serve: note: %s%s%s changes nothing: kvbound's attention runs on the CPU, over its own paged cache\n", argv[i],
                    val ? " " : "", val ? fv : "");
            i += val;
            continue;
        }
        if (!strcmp(argv[i], "--no-jinja")) { c->no_jinja = true; continue; }
        if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) { o->verbose = true; continue; }
        if (!strcmp(argv[i], "--special-in-content")) { o->special_in_content = true; continue; }
        int pr = cli_model_option(&c->mo, argc, argv, &i);
        if (pr == 0) pr = cli_cache_option(&c->po, &c->kvt, &c->rec, argc, argv, &i);
        if (pr < 0) return 2;
        if (pr == 0 && serve_option(o, c, argc, argv, &i)) return 2;
    }
    if (!cli_model_required(&c->mo)) return 2;
    o->model_path = c->mo.path;
    o->threads = c->mo.threads;
    o->no_mmap = c->mo.no_mmap;
    if ((c->template_file || c->template_text) && (c->no_jinja || c->forced_template)) {
        fprintf(stderr, "kvbound serve: a Jinja template (--chat-template-file, --chat-template TEXT) cannot go with --no-jinja or --template\n");
        return 2;
    }
    if (c->template_file && c->template_text) {
        fprintf(stderr, "kvbound serve: give --chat-template-file or --chat-template TEXT, not both\n");
        return 2;
    }
    if (o->chunk > o->step_tokens) {
        fprintf(stderr, "kvbound serve: --chunk %d is larger than --step-tokens %d\n", o->chunk, o->step_tokens);
        return 2;
    }
    if (o->prompt_min_rows > o->chunk) {
        fprintf(stderr, "kvbound serve: --prompt-min-rows %d is larger than --chunk %d\n", o->prompt_min_rows, o->chunk);
        return 2;
    }
    if (!o->prompt_min_rows) o->prompt_min_rows = o->chunk < 4 ? o->chunk : 4;
    if ((o->park_pid >= 0) != (o->park_ratio > 0)) {
        fprintf(stderr, "kvbound serve: --park-compress and --park-ratio go together (e.g. --park-compress kvzip --park-ratio 0.5)\n");
        return 2;
    }
    if (c->api_key_file) { /* llama-server's --api-key-file; here one key a line, each its own tenant (tenant.c) */
        if (o->api_key && o->api_key != getenv("KVB_API_KEY")) { fprintf(stderr, "kvbound serve: give --api-key or --api-key-file, not both\n"); return 2; }
        size_t len = 0;
        char *text = cli_read_file(c->api_key_file, 1 << 20, "--api-key-file", &len);
        if (!text) return 2;
        char err[200];
        const bool ok = tenant_parse_keys(text, len, &o->keys, err, sizeof err);
        free(text);
        if (!ok) { fprintf(stderr, "kvbound serve: --api-key-file %s: %s\n", c->api_key_file, err); return 2; }
    } else if (o->api_key && !tenant_one_key(&o->keys, o->api_key)) {
        fprintf(stderr, "kvbound serve: out of memory\n");
        return 2;
    }
    o->api_key = o->keys.n ? o->keys.key[0] : NULL;
    o->check_host = !o->api_key && host_is_loopback(o->host);
    if (c->n_predict) o->default_max_tokens = c->n_predict < 0 ? o->max_tokens_cap : c->n_predict;
    if (o->default_max_tokens > o->max_tokens_cap) o->default_max_tokens = o->max_tokens_cap;
    if (c->max_body) o->max_body = (size_t)c->max_body;
    if (!c->max_per_ip) c->max_per_ip = c->max_conn > 1 ? c->max_conn / 2 : 1;
    o->pool_bytes = (size_t)c->pool_mb << 20;
    o->kv = cli_kv_params(&c->po, c->pid, &c->kvt, &c->rec);
    const struct kvb_policy_params *pol = &o->kv.policy;
    o->max_budget = c->max_budget ? c->max_budget : (pol->budget ? 8 * pol->budget : 8192);
    if (pol->id != KVB_POLICY_FULL && pol->budget > o->max_budget) o->max_budget = pol->budget;
    if (!o->model_name) {
        const char *slash = strrchr(o->model_path, '/');
        o->model_name = slash ? slash + 1 : o->model_path;
    }
    return -1;
}

/* The Jinja template (--chat-template-file, --chat-template TEXT, or the
 * model's), tried on a stand-in exchange: what it writes after an answer
 * (srv->closing), whether it renders tools, and its model's syntax. A
 * template given on the command line that fails is an error (nonzero); the
 * model's own falls back to its signature family with a warning. */
static int serve_jinja(struct server *srv, const struct serve_cli *c, const char *model_template) {
    size_t len = 0;
    char *own = NULL;
    if (c->template_file) {
        own = cli_read_file(c->template_file, (size_t)1 << 20, "--chat-template-file", &len);
        if (!own) return 1;
    } else if (c->template_text) {
        own = strdup(c->template_text);
    } else if (model_template) {
        own = strdup(model_template);
    } else {
        return 0; /* no template: the signature family (plain) */
    }
    if (!own) { fprintf(stderr, "kvbound serve: out of memory\n"); return 1; }
    const char *what = c->template_file ? c->template_file : c->template_text ? "--chat-template" : "the model's chat template";
    struct kvb_chat_apply_params p = kvb_chat_apply_default_params();
    p.template_text = own;
    p.vocab = srv->vocab;
    p.messages_json = "[{\"role\":\"user\",\"content\":\"Hello.\"},{\"role\":\"assistant\",\"content\":\"" SERVE_TEMPLATE_MARK "\"}]";
    p.strip_bos = true;
    p.add_generation_prompt = false;
    char *out = NULL;
    size_t ol = 0;
    kvb_status st = kvb_chat_apply(&p, &out, &ol);
    const char *mark = st == KVB_OK ? strstr(out, SERVE_TEMPLATE_MARK) : NULL;
    if (!mark) {
        const bool given = c->template_file || c->template_text;
        fprintf(stderr, "kvbound serve: %s%s: %s%s\n", given ? "" : "warning: ", what,
                st != KVB_OK ? kvb_last_error() : "it does not write an assistant's answer as given",
                given ? "" : "; chatting through its signature family instead (no tools)");
        kvb_buffer_free(out);
        free(own);
        return given ? 1 : 0;
    }
    srv->closing = strdup(mark + strlen(SERVE_TEMPLATE_MARK));
    kvb_buffer_free(out);
    if (!srv->closing) { free(own); return 1; }
    srv->template_text = own;
    srv->jinja = true;
    srv->tmpl_tools = strstr(own, "tools") != NULL;
    srv->tmpl_developer = strstr(own, "developer") != NULL;
    kvb_chat_syntax_detect(own, NULL, &srv->syntax);
    return 0;
}

/* The model (GGUF only: a llama2.c checkpoint is converted first; the
 * library's own message would suggest -z, which serve has not) and its
 * chat template. 0, or the exit code with nothing held. */
static int serve_load(struct server *srv, const struct serve_cli *c) {
    const struct serve_opts *o = &srv->o;
    FILE *mf = fopen(o->model_path, "rb");
    char magic[4] = {0};
    const size_t got = mf ? fread(magic, 1, 4, mf) : 0;
    if (mf) fclose(mf);
    if (mf && (got != 4 || memcmp(magic, "GGUF", 4))) {
        fprintf(stderr, "kvbound serve: '%s' is not a GGUF file (it does not start with \"GGUF\"); serve loads GGUF models only. "
                        "A llama2.c checkpoint: kvbound convert -m MODEL.bin -z TOKENIZER.bin -o MODEL.gguf\n", o->model_path);
        return 1;
    }
    if (cli_load_model(&c->mo, &srv->model, &srv->mi)) return 1;
    srv->vocab = kvb_model_vocab(srv->model);
    cli_policy_warn(&c->po, c->pid, srv->mi.n_ctx_train);
    if (srv->o.n_ctx && srv->o.kv.policy.id != KVB_POLICY_FULL)
        fprintf(stderr, "kvbound serve: note: -c %d changes nothing under --policy %s: a session holds at most its budget (%d tokens) and runs "
                        "past any length; -c is a session's token limit under --policy full\n", srv->o.n_ctx, kvb_policy_name(srv->o.kv.policy.id),
                (int)srv->o.kv.policy.budget);
    else if (srv->o.n_ctx > srv->mi.n_ctx_train && srv->mi.n_ctx_train > 0)
        fprintf(stderr, "kvbound serve: note: -c %d is past the model's trained length (%d): a session may hold %d tokens, and positions "
                        "past %d are ones the model was not trained on (its answers may get worse there)\n", srv->o.n_ctx,
                (int)srv->mi.n_ctx_train, srv->o.n_ctx, (int)srv->mi.n_ctx_train);
    if (!srv->o.max_prompt_tokens) { /* 8 x the larger of the budget and the trained length */
        const int64_t budget = srv->o.kv.policy.budget, trained = srv->mi.n_ctx_train;
        const int64_t most = 8 * (budget > trained ? budget : trained);
        srv->o.max_prompt_tokens = most < 1 ? 1 << 30 : most > (1 << 30) ? 1 << 30 : (int)most;
    }
    const char *why = NULL, *forced = c->forced_template;
    if (forced && c->jinja_given)
        fprintf(stderr, "kvbound serve: note: --jinja with %s %s: kvbound chats through the %s signature family (its own formatting, "
                        "no Jinja, no tools), not a Jinja template of that name; leave %s out to use the model's own Jinja template\n",
                c->forced_template_flag, forced, forced, c->forced_template_flag);
    if (forced) {
        if (kvb_chat_style_from_name(forced, &srv->style) != KVB_OK) {
            fprintf(stderr, "kvbound serve: --template: %s\n", kvb_last_error());
            kvb_model_free(srv->model);
            return 2;
        }
        const char *miss = kvb_chat_missing_token(srv->vocab, srv->style);
        if (miss) fprintf(stderr, "kvbound serve: warning: --template %s: the vocabulary has no %s token; the markup is fed as plain text\n", forced, miss);
    } else if (kvb_chat_style_for_vocab(srv->vocab, &srv->style, &why) == KVB_FALLBACK && why) {
        fprintf(stderr, "kvbound serve: warning: %s (--template to choose)\n", why);
    }
    struct kvb_vocab_info vi;
    kvb_vocab_get_info(srv->vocab, &vi);
    if (srv->style == KVB_CHAT_CHATML && vi.chat_template) kvb_chat_default_system(vi.chat_template, srv->default_system, sizeof srv->default_system);
    if (!c->no_jinja && !forced && serve_jinja(srv, c, vi.chat_template)) {
        kvb_model_free(srv->model);
        return 2;
    }
    if (kvb_grammar_vocab_new(srv->vocab, &srv->gvocab) != KVB_OK) {
        fprintf(stderr, "kvbound serve: the vocabulary for grammars: %s\n", kvb_last_error());
        free(srv->template_text);
        free(srv->closing);
        kvb_model_free(srv->model);
        return 1;
    }
    return 0;
}

/* The scheduler and the HTTP daemon until SIGINT/SIGTERM, then shutdown in
 * order: stop listening, let running turns finish (5 s at most), stop the
 * connections, free the scheduler. 0 after a clean stop, 1 if it could
 * not start. The signals are blocked in every thread started here. */
static int serve_until_signal(struct server *srv, const struct serve_cli *c) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!srv->metrics || sched_start(srv) != 0) {
        fprintf(stderr, "kvbound serve: cannot start the scheduler\n");
        return 1;
    }
    char err[512];
    int port = 0;
    struct MHD_Daemon *d = http_start(srv, c->max_conn, c->max_per_ip, c->request_timeout, &port, err, sizeof err);
    if (!d) {
        fprintf(stderr, "kvbound serve: %s\n", err);
        sched_stop(srv);
        sched_free(srv);
        return 1;
    }
    const struct serve_opts *o = &srv->o;
    fprintf(stderr, "kvbound serve: %s (%s), template %s%s%s, policy %s (budget %d), pool %d MiB, parallel %d, sessions in %s (%s)\n",
            o->model_name, srv->mi.arch, srv->jinja ? "jinja" : kvb_chat_style_name(srv->style), srv->jinja ? ", tool calls " : "",
            srv->jinja ? kvb_tool_format_name(srv->syntax.tools) : "", kvb_policy_name(o->kv.policy.id), (int)o->kv.policy.budget, c->pool_mb,
            o->parallel, o->sessions, srv->store->kind);
    fprintf(stderr, "kvbound serve: listening on http://%s:%d\n", o->host, port);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "kvbound serve: %s: finishing running turns, then stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_quiesce(d);
    sched_stop(srv);
    /* the answers the scheduler gave last (503 to turns cut or queued) are sent before the connections close */
    for (int i = 0; i < 200 && guard_answering_count(srv->guard) > 0; i++) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    http_stop(d);
    sched_free(srv);
    guard_free(srv->guard);
    return 0;
}

/* The session directory a failed start made (its SQLite files, then itself). */
static void remove_new_store(const char *dir) {
    static const char *const files[] = {"sessions.sqlite", "sessions.sqlite-wal", "sessions.sqlite-shm", "sessions.sqlite-journal"};
    char path[4096];
    for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        unlink(path);
    }
    rmdir(dir);
}

static int serve_main(struct server *srvp, int argc, char **argv) {
    struct server srv = *srvp;
    struct serve_cli c;
    int rc = serve_args(&srv.o, &c, argc, argv);
    srvp->o.keys = srv.o.keys; /* the caller frees them, whichever way this returns */
    if (rc >= 0) return rc;
    kvb_log_set(log_warnings, NULL);
    if ((rc = serve_load(&srv, &c)) != 0) return rc;
    char err[512];
    struct stat sb; /* a session directory made by a start that fails is removed again */
    const bool new_dir = strncmp(srv.o.sessions, "redis://", 8) && stat(srv.o.sessions, &sb) != 0;
    srv.store = store_open(srv.o.sessions, err, sizeof err);
    if (!srv.store) {
        if (new_dir) remove_new_store(srv.o.sessions);
        fprintf(stderr, "kvbound serve: %s\n", err);
        kvb_grammar_vocab_free(srv.gvocab);
        free(srv.template_text);
        free(srv.closing);
        kvb_model_free(srv.model);
        return 1;
    }
    srv.metrics = metrics_new();
    pthread_mutex_init(&srv.mu, NULL);
    pthread_cond_init(&srv.work, NULL);
    rc = serve_until_signal(&srv, &c);
    srv.store->close(srv.store);
    if (rc != 0 && new_dir) remove_new_store(srv.o.sessions); /* 1: it never started */
    metrics_free(srv.metrics);
    kvb_model_free(srv.model);
    free(srv.template_text);
    free(srv.closing);
    kvb_grammar_vocab_free(srv.gvocab);
    pthread_cond_destroy(&srv.work);
    pthread_mutex_destroy(&srv.mu);
    return rc;
}

int cmd_serve_main(int argc, char **argv) {
    struct server srv;
    memset(&srv, 0, sizeof srv);
    const int rc = serve_main(&srv, argc, argv);
    tenant_keys_free(&srv.o.keys);
    return rc;
}
