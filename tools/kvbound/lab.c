/*
 * lab.c — `kvbound lab`: the synthetic attention laboratory, kvbound's
 * embedded default (`make demo`). Runs every selected policy (the library's
 * real policy objects) on every scenario and budget, prints a table or JSON,
 * checks the audits (any failure: exit 1), reports findings, and with --out
 * writes a self-contained HTML report (lab_report.c). cmd_lab: the options
 * (lab_parse, lab_defaults), the runs (lab_run), the output (lab_output),
 * then the results freed (lab_free).
 */
#include "lab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const k_scenarios[] = {"chat", "needle", "diffuse", "drift"};
#define N_SCEN 4

static void lab_usage(FILE *f) {
    fprintf(f,
            "usage: kvbound lab [options]\n"
            "\n"
            "Runs the library's policies on deterministic synthetic attention streams\n"
            "and measures what they keep. Exit status 1 if an audit fails.\n"
            "\n"
            "  --scenario NAME|all   chat, needle, diffuse, drift, trace, or all (default all)\n"
            "  --budget N [N...]     budgets in tokens, also N,N,N or repeated (default 64 128 256)\n"
            "  --policies a,b,c      policies (default: every policy but knorm, keydiff and\n"
            "                        expected-attention, which score keys and the lab has none,\n"
            "                        and kvzip, which needs a model: refused)\n"
            "  --prompt P            prompt tokens (default 1024)\n"
            "  --steps G             generated steps (default 512)\n"
            "  --chunk C             prefill chunk (default: the whole prompt)\n"
            "  --seed S              generator seed (default 1)\n"
            "  --recall              each run also runs with reversible eviction (8 pages of 16 recalled per\n"
            "                        step, scored by their largest attention weight): fact hits and mean R\n"
            "                        with recall beside the plain ones, at the same hot budget\n"
            "  --recall-pages R      pages recalled per step (implies --recall)\n"
            "  --out DIR             also write DIR/report.html (self-contained, offline)\n"
            "  --json                print JSON instead of the table\n");
}

static int parse_list_i32(const char *flag, const char *v, int32_t *out, int *n, int max) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (*n >= max) {
            fprintf(stderr, "kvbound: %s: at most %d values\n", flag, max);
            return -1;
        }
        int x;
        if (cli_parse_i32(flag, tok, 2, 1 << 20, &x)) return -1;
        out[(*n)++] = x;
    }
    return 0;
}

/* ---- trace: the literal token stream of the core issue ---- */

static const char *const k_trace_tok[8] = {"<s>", "System:", "import", "PostgresDB", "as", "db", "def", "query():"};
static const float k_trace_score[8] = {0.95f, 0.85f, 0.10f, 0.90f, 0.05f, 0.20f, 0.15f, 0.75f};

/* Runs the trace for one policy; writes the final cache as text into final. */
static int run_trace(enum kvb_policy_id id, FILE *out, char *final, size_t final_n) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.max_distance = 1 << 20;
    cp.n_layer = 1; cp.n_kv_head = 1; cp.head_dim = 4; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(id);
    cp.kv.policy.budget = 6;
    cp.kv.policy.n_sink = 2;
    cp.kv.policy.heavy_ratio = 0.5f;
    cp.pool_bytes = 1 << 20;
    struct kvb_cache *c;
    if (kvb_cache_init(NULL, &cp, &c) != KVB_OK) {
        fprintf(stderr, "kvbound: trace: %s\n", kvb_last_error());
        return -1;
    }
    if (out) fprintf(out, "trace %s: capacity 6, 2 sinks (*), heavy ratio 0.5; each token's score is observed once, on arrival\n", kvb_policy_name(id));
    for (int t = 0; t < 8; t++) {
        if (kvb_cache_append(c, 0, NULL, NULL) != KVB_OK) {
            fprintf(stderr, "kvbound: trace: %s\n", kvb_last_error());
            kvb_cache_free(c);
            return -1;
        }
        int n = kvb_cache_n_slots(c, 0, 0);
        float w[16] = {0};
        w[n - 1] = k_trace_score[t];
        kvb_cache_observe(c, 0, 0, w, n);
        kvb_cache_evict(c, 0);
        n = kvb_cache_n_slots(c, 0, 0);
        size_t used = 0;
        final[0] = 0;
        if (out) fprintf(out, "  + %-11s |", k_trace_tok[t]);
        for (int j = 0; j < n; j++) {
            struct kvb_slot_info si;
            kvb_cache_slot_info(c, 0, 0, j, &si);
            int p = (int)si.pos_original;
            if (out) fprintf(out, " %s%s(%.2f)", k_trace_tok[p], p < 2 ? "*" : "", (double)k_trace_score[p]);
            used += (size_t)snprintf(final + used, used < final_n ? final_n - used : 0, "%s%s", j ? " " : "", k_trace_tok[p]);
        }
        if (out) fprintf(out, "\n");
    }
    if (out) fprintf(out, "  final %s cache: %s\n", kvb_policy_name(id), final);
    kvb_cache_free(c);
    return 0;
}

/* ---- runs ---- */

static void pick_snapshots(struct lab_scen *sc) {
    const struct kvb_lab_stream *st = sc->st;
    const int32_t G = kvb_lab_steps(st);
    sc->n_snaps = 0;
    for (int32_t t = 0; t < G && sc->n_snaps < LAB_SNAPS - 1; t++) {
        int32_t f[8];
        if (kvb_lab_active_facts(st, t, f, 8) > 0) sc->snaps[sc->n_snaps++] = t;
    }
    sc->snaps[sc->n_snaps++] = G - 1;
}

static int run_scenario(const struct lab_opts *o, struct lab_scen *sc, const char *name) {
    sc->name = name;
    if (kvb_lab_stream_init(name, o->prompt, o->steps, o->seed, &sc->st) != KVB_OK) {
        fprintf(stderr, "kvbound: lab: %s\n", kvb_last_error());
        return -1;
    }
    kvb_lab_check_rows(sc->st, &sc->row_err, &sc->row_min);
    pick_snapshots(sc);
    sc->cells = calloc((size_t)o->n_budgets * o->n_pol, sizeof *sc->cells);
    if (!sc->cells) return -1;
    for (int b = 0; b < o->n_budgets; b++)
        for (int p = 0; p < o->n_pol; p++) {
            struct lab_cell *cell = &sc->cells[b * o->n_pol + p];
            cell->pid = o->pol[p];
            cell->budget = o->budgets[b];
            struct kvb_policy_params pp = kvb_policy_default_params(o->pol[p]);
            if (o->pol[p] != KVB_POLICY_FULL) pp.budget = o->budgets[b];
            if (pp.n_sink >= pp.budget && pp.budget) pp.n_sink = pp.budget / 2;
            if (kvb_lab_run(sc->st, &pp, o->chunk, sc->snaps, sc->n_snaps, &cell->r) != KVB_OK ||
                (o->recall_pages && kvb_lab_run_recall(sc->st, &pp, o->chunk, o->recall_pages, NULL, 0, &cell->rr) != KVB_OK)) {
                fprintf(stderr, "kvbound: lab: %s / %s / budget %d: %s\n", name, kvb_policy_name(o->pol[p]), o->budgets[b], kvb_last_error());
                return -1;
            }
        }
    return 0;
}

const struct lab_cell *lab_find(const struct lab_opts *o, const struct lab_scen *sc, enum kvb_policy_id id, int b) {
    for (int p = 0; p < o->n_pol; p++)
        if (o->pol[p] == id) return &sc->cells[b * o->n_pol + p];
    return NULL;
}

/* ---- audits and findings ---- */

/* Appends an entry to an audit or finding list (findings always "pass"). */
static void add_entry(struct lab_audit *list, int *n, const char *name, bool pass, const char *fmt, va_list ap) {
    if (*n >= LAB_MAX_AUDITS) return;
    struct lab_audit *a = &list[(*n)++];
    snprintf(a->name, sizeof a->name, "%s", name);
    a->pass = pass;
    a->skipped = !strncmp(fmt, "skipped", 7);
    vsnprintf(a->detail, sizeof a->detail, fmt, ap);
}

static void add_audit(struct lab_report *rep, const char *name, bool pass, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_entry(rep->audits, &rep->n_audits, name, pass, fmt, ap);
    va_end(ap);
}

static void add_finding(struct lab_report *rep, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    add_entry(rep->findings, &rep->n_findings, name, true, fmt, ap);
    va_end(ap);
}

static struct lab_scen *scen(struct lab_report *rep, const char *name) {
    for (int i = 0; i < rep->n_scen; i++)
        if (!strcmp(rep->scen[i].name, name)) return &rep->scen[i];
    return NULL;
}

/* "policy A beats policy B on mean retained mass at every budget" */
static void audit_beats(struct lab_report *rep, const char *audit, const char *sname, enum kvb_policy_id a, enum kvb_policy_id b) {
    struct lab_scen *sc = scen(rep, sname);
    const struct lab_opts *o = rep->opts;
    if (!sc || !lab_find(o, sc, a, 0) || !lab_find(o, sc, b, 0)) {
        add_audit(rep, audit, true, "skipped: needs scenario %s and policies %s, %s", sname, kvb_policy_name(a), kvb_policy_name(b));
        return;
    }
    char detail[256] = "";
    size_t used = 0;
    bool ok = true;
    for (int k = 0; k < o->n_budgets; k++) {
        double ma = lab_find(o, sc, a, k)->r.mass_mean, mb = lab_find(o, sc, b, k)->r.mass_mean;
        ok &= ma > mb;
        used += (size_t)snprintf(detail + used, sizeof detail - LAB_MIN(used, sizeof detail), "%sbudget %d: %.4f vs %.4f",
                                 k ? "; " : "", o->budgets[k], ma, mb);
        if (used >= sizeof detail) break;
    }
    add_audit(rep, audit, ok, "mean retained mass %s vs %s in %s: %s", kvb_policy_name(a), kvb_policy_name(b), sname, detail);
}

/* Every row of every scenario sums to 1 with no negative entry; no run
 * ended a step over budget, or with retained mass outside [0, 1]. */
static void audit_runs(struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    bool ok = true;
    double worst = 0, mn = INFINITY;
    for (int i = 0; i < rep->n_scen; i++) {
        ok &= rep->scen[i].row_err <= 1e-9 && rep->scen[i].row_min >= 0;
        worst = worst > rep->scen[i].row_err ? worst : rep->scen[i].row_err;
        mn = mn < rep->scen[i].row_min ? mn : rep->scen[i].row_min;
    }
    add_audit(rep, "rows-normalized", ok, "every row of every scenario: max |sum - 1| = %.3g (<= 1e-9), min entry = %.3g (>= 0)", worst, mn);
    int viol = 0, out = 0, runs = 0;
    for (int i = 0; i < rep->n_scen; i++)
        for (int c = 0; c < o->n_budgets * o->n_pol; c++) {
            viol += rep->scen[i].cells[c].r.budget_violations;
            out += rep->scen[i].cells[c].r.mass_out_of_range;
            runs++;
        }
    add_audit(rep, "budget-respected", viol == 0, "%d runs, %d steps ended over budget", runs, viol);
    add_audit(rep, "mass-in-range", out == 0, "%d runs, %d steps with retained mass outside [0, 1]", runs, out);
}

/* snapkv answers every needle query from its cache, at each budget whose
 * prompt share is more than its observation window. */
static void audit_snapkv_needle(struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    struct lab_scen *nd = scen(rep, "needle");
    if (!nd || !lab_find(o, nd, KVB_POLICY_SNAPKV, 0)) {
        add_audit(rep, "snapkv-keeps-needle", true, "skipped: needs scenario needle and policy snapkv");
        return;
    }
    bool ok = true;
    char d[256] = "";
    size_t used = 0;
    const struct kvb_policy_params sp = kvb_policy_default_params(KVB_POLICY_SNAPKV);
    int checked = 0;
    for (int k = 0; k < o->n_budgets; k++) {
        const struct kvb_lab_result *r = &lab_find(o, nd, KVB_POLICY_SNAPKV, k)->r;
        /* the lab gives a quarter of the budget to generated tokens (kvb_lab_run) */
        const int prompt_budget = o->budgets[k] - (o->budgets[k] / 4 > 1 ? o->budgets[k] / 4 : 1);
        if (prompt_budget <= sp.obs_window + sp.n_sink) { /* the prompt's budget is the window: nothing to select */
            used += (size_t)snprintf(d + used, sizeof d - LAB_MIN(used, sizeof d), "%sbudget %d: not checked (prompt budget %d <= window %d)",
                                     k ? "; " : "", o->budgets[k], prompt_budget, sp.obs_window);
            continue;
        }
        checked++;
        ok &= r->fact_hits[0] == r->fact_queries[0] && r->fact_queries[0] > 0;
        used += (size_t)snprintf(d + used, sizeof d - LAB_MIN(used, sizeof d), "%sbudget %d: %d/%d", k ? "; " : "",
                                 o->budgets[k], r->fact_hits[0], r->fact_queries[0]);
        if (used >= sizeof d) break;
    }
    add_audit(rep, "snapkv-keeps-needle", ok && checked > 0, "needle queries answered from the cache: %s", d);
}

/* With --recall: needle fact hits of every bounded policy without and with recall. */
static void finding_recall_needle(struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    struct lab_scen *nr = scen(rep, "needle");
    if (!o->recall_pages || !nr || !lab_find(o, nr, KVB_POLICY_FULL, 0)) return;
    char d[1024] = "";
    size_t used = 0;
    for (int k = 0; k < o->n_budgets; k++) {
        const struct kvb_lab_result *full = &lab_find(o, nr, KVB_POLICY_FULL, k)->r;
        const int fh = full->fact_hits[0] + full->fact_hits[1];
        for (int p = 0; p < o->n_pol; p++) {
            const struct lab_cell *cl = &nr->cells[k * o->n_pol + p];
            if (cl->pid == KVB_POLICY_FULL) continue;
            used += (size_t)snprintf(d + used, sizeof d - LAB_MIN(used, sizeof d), "%s%s@%d %d->%d/%d", used ? ", " : "", kvb_policy_name(cl->pid),
                                     o->budgets[k], cl->r.fact_hits[0] + cl->r.fact_hits[1], cl->rr.fact_hits[0] + cl->rr.fact_hits[1], fh);
            if (used >= sizeof d) break;
        }
    }
    add_finding(rep, "recall-needle-fact-hits", "needle fact hits without -> with recall (%d pages), out of the full cache's: %s", o->recall_pages, d);
}

/* diffuse, at the middle budget: the score-based policies' mean retained mass against window's. */
static void finding_diffuse(struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    struct lab_scen *df = scen(rep, "diffuse");
    if (!df || !lab_find(o, df, KVB_POLICY_WINDOW, 0)) return;
    char d[1024] = "";
    size_t used = 0;
    int k = o->n_budgets / 2;
    double mw = lab_find(o, df, KVB_POLICY_WINDOW, k)->r.mass_mean;
    int losers = 0;
    for (int p = 0; p < o->n_pol; p++) {
        enum kvb_policy_id id = o->pol[p];
        if (id == KVB_POLICY_FULL || id == KVB_POLICY_WINDOW || id == KVB_POLICY_STREAMING || id == KVB_POLICY_LMINFINITE) continue;
        double m = lab_find(o, df, id, k)->r.mass_mean;
        losers += m < mw;
        used += (size_t)snprintf(d + used, sizeof d - LAB_MIN(used, sizeof d), "%s%s %+.4f", used ? ", " : "", kvb_policy_name(id), m - mw);
        if (used >= sizeof d) break;
    }
    add_finding(rep, "diffuse-score-vs-window", "budget %d: %d score-based policies lose mean retained mass to window (%.4f); difference per policy: %s",
                o->budgets[k], losers, mw, d);
}

/* drift: h2o's and snapkv's hits on the facts needed after the drift (B) and before it (A). */
static void finding_drift(struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    struct lab_scen *dr = scen(rep, "drift");
    if (!dr || !lab_find(o, dr, KVB_POLICY_H2O, 0) || !lab_find(o, dr, KVB_POLICY_SNAPKV, 0)) return;
    char d[512] = "";
    size_t used = 0;
    for (int k = 0; k < o->n_budgets; k++) {
        const struct kvb_lab_result *h = &lab_find(o, dr, KVB_POLICY_H2O, k)->r, *s = &lab_find(o, dr, KVB_POLICY_SNAPKV, k)->r;
        used += (size_t)snprintf(d + used, sizeof d - LAB_MIN(used, sizeof d), "%sbudget %d: h2o %d/%d, snapkv %d/%d (A: h2o %d/%d, snapkv %d/%d)",
                                 k ? "; " : "", o->budgets[k], h->fact_hits[1], h->fact_queries[1], s->fact_hits[1], s->fact_queries[1],
                                 h->fact_hits[0], h->fact_queries[0], s->fact_hits[0], s->fact_queries[0]);
        if (used >= sizeof d) break;
    }
    add_finding(rep, "drift-b-fact-hits", "B facts (needed after the drift, not revealed by the window): %s", d);
}

/* The audits (pass or fail) and the findings (reported, never pass/fail), in their order. */
static void audits_and_findings(struct lab_report *rep) {
    if (rep->n_scen) {
        audit_runs(rep);
        audit_beats(rep, "streaming-beats-window-chat", "chat", KVB_POLICY_STREAMING, KVB_POLICY_WINDOW);
        audit_beats(rep, "h2o-beats-window-needle", "needle", KVB_POLICY_H2O, KVB_POLICY_WINDOW);
        audit_snapkv_needle(rep);
    }
    finding_recall_needle(rep);
    if (rep->trace_ran) {
        const char *want = "<s> System: PostgresDB db def query():";
        add_audit(rep, "trace-h2o", !strcmp(rep->trace_h2o, want), "final h2o cache '%s' (expected '%s')", rep->trace_h2o, want);
    }
    finding_diffuse(rep);
    finding_drift(rep);
}

/* ---- output ---- */

static void print_table(const struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    printf("kvbound lab: prompt %d, %d generated steps, seed %llu (retained mass R = attention on kept tokens)\n\n",
           o->prompt, o->steps, (unsigned long long)o->seed);
    printf("%-8s %-13s %6s %8s %8s %11s %6s %9s", "scenario", "policy", "budget", "mean R", "min R", "fact hits", "peak", "KV MB*");
    if (o->recall_pages) printf(" %8s %11s", "R+recall", "hits+recall");
    printf("\n");
    for (int i = 0; i < rep->n_scen; i++) {
        const struct lab_scen *sc = &rep->scen[i];
        for (int b = 0; b < o->n_budgets; b++)
            for (int p = 0; p < o->n_pol; p++) {
                const struct lab_cell *c = &sc->cells[b * o->n_pol + p];
                char hits[32];
                snprintf(hits, sizeof hits, "%d/%d", c->r.fact_hits[0] + c->r.fact_hits[1], c->r.fact_queries[0] + c->r.fact_queries[1]);
                printf("%-8s %-13s %6d %8.4f %8.4f %11s %6d %9.1f", sc->name, kvb_policy_name(c->pid),
                       c->pid == KVB_POLICY_FULL ? 0 : c->budget, c->r.mass_mean, c->r.mass_min, hits, c->r.peak_slots,
                       (double)c->r.peak_slots * LAB_BYTES_PER_TOKEN / 1e6);
                if (o->recall_pages) {
                    snprintf(hits, sizeof hits, "%d/%d", c->rr.fact_hits[0] + c->rr.fact_hits[1], c->rr.fact_queries[0] + c->rr.fact_queries[1]);
                    printf(" %8.4f %11s", c->rr.mass_mean, hits);
                }
                printf("\n");
            }
        printf("\n");
    }
    printf("* KV bytes at peak for a 32-layer, 8-KV-head, 128-dim F16 model (%d bytes per token).\n\n", LAB_BYTES_PER_TOKEN);
    for (int i = 0; i < rep->n_findings; i++) printf("finding %s: %s\n", rep->findings[i].name, rep->findings[i].detail);
    if (rep->n_findings) printf("\n");
    for (int i = 0; i < rep->n_audits; i++)
        printf("audit %-28s %s  %s\n", rep->audits[i].name, rep->audits[i].skipped ? "SKIP" : rep->audits[i].pass ? "PASS" : "FAIL", rep->audits[i].detail);
}

static void json_str(FILE *f, const char *s) {
    struct kvb_str b = {0};
    kvb_str_json(&b, s, strlen(s), 0);
    if (kvb_str_error(&b) != KVB_OK) { /* never a cut string in the report */
        fprintf(stderr, "kvbound lab: out of memory writing the JSON report\n");
        exit(1);
    }
    fwrite(b.p, 1, b.n, f);
    kvb_str_free(&b);
}

static void print_json(const struct lab_report *rep) {
    const struct lab_opts *o = rep->opts;
    printf("{\"lab\":{\"prompt\":%d,\"steps\":%d,\"seed\":%llu,\"chunk\":%d,\"bytes_per_token\":%d,\"budgets\":[", o->prompt, o->steps,
           (unsigned long long)o->seed, o->chunk, LAB_BYTES_PER_TOKEN);
    for (int b = 0; b < o->n_budgets; b++) printf("%s%d", b ? "," : "", o->budgets[b]);
    printf("],\"policies\":[");
    for (int p = 0; p < o->n_pol; p++) printf("%s\"%s\"", p ? "," : "", kvb_policy_name(o->pol[p]));
    printf("]},\n\"scenarios\":[");
    for (int i = 0; i < rep->n_scen; i++) {
        const struct lab_scen *sc = &rep->scen[i];
        printf("%s\n{\"name\":\"%s\",\"description\":", i ? "," : "", sc->name);
        json_str(stdout, kvb_lab_scenario_describe(sc->name));
        printf(",\"row_max_sum_error\":%.3g,\"row_min_entry\":%.3g,\"facts\":[", sc->row_err, sc->row_min);
        for (int f = 0; f < kvb_lab_n_facts(sc->st); f++) {
            struct kvb_lab_fact fa = kvb_lab_fact(sc->st, f);
            printf("%s{\"pos\":%d,\"group\":\"%s\"}", f ? "," : "", fa.pos, fa.group ? "B" : "A");
        }
        printf("],\"results\":[");
        for (int c = 0; c < o->n_budgets * o->n_pol; c++) {
            const struct lab_cell *cl = &sc->cells[c];
            const struct kvb_lab_result *r = &cl->r;
            int q = r->fact_queries[0] + r->fact_queries[1], h = r->fact_hits[0] + r->fact_hits[1];
            printf("%s\n {\"policy\":\"%s\",\"budget\":%d,\"mass_mean\":%.6f,\"mass_min\":%.6f,\"fact_hits\":%d,\"fact_queries\":%d,"
                   "\"fact_hit_rate\":%.4f,\"fact_hits_a\":%d,\"fact_queries_a\":%d,\"fact_hits_b\":%d,\"fact_queries_b\":%d,"
                   "\"peak_slots\":%d,\"bytes_at_peak\":%lld",
                   c ? "," : "", kvb_policy_name(cl->pid), cl->pid == KVB_POLICY_FULL ? 0 : cl->budget, r->mass_mean, r->mass_min, h, q,
                   q ? (double)h / q : 1.0, r->fact_hits[0], r->fact_queries[0], r->fact_hits[1], r->fact_queries[1], r->peak_slots,
                   (long long)r->peak_slots * LAB_BYTES_PER_TOKEN);
            if (o->recall_pages)
                printf(",\"recall_pages\":%d,\"fact_hits_recall\":%d,\"fact_hits_a_recall\":%d,\"fact_hits_b_recall\":%d,\"mass_mean_recall\":%.6f",
                       o->recall_pages, cl->rr.fact_hits[0] + cl->rr.fact_hits[1], cl->rr.fact_hits[0], cl->rr.fact_hits[1], cl->rr.mass_mean);
            printf("}");
        }
        printf("]}");
    }
    printf("],\n\"findings\":[");
    for (int i = 0; i < rep->n_findings; i++) {
        printf("%s\n{\"name\":\"%s\",\"detail\":", i ? "," : "", rep->findings[i].name);
        json_str(stdout, rep->findings[i].detail);
        printf("}");
    }
    printf("],\n\"audits\":[");
    for (int i = 0; i < rep->n_audits; i++) {
        printf("%s\n{\"name\":\"%s\",\"pass\":%s,\"skipped\":%s,\"detail\":", i ? "," : "", rep->audits[i].name,
               rep->audits[i].pass && !rep->audits[i].skipped ? "true" : "false", rep->audits[i].skipped ? "true" : "false");
        json_str(stdout, rep->audits[i].detail);
        printf("}");
    }
    printf("]}\n");
}

/* The command line of lab: the run's options and what to print or write. */
struct lab_cmd {
    struct lab_opts o;
    const char *scenario, *out_dir;
    char out_buf[3072]; /* --out without trailing slashes: no "dir//report.html" */
    bool json;
};

/* --policies a,b,c into o->pol; -1: printed. */
static int lab_policies_option(struct lab_opts *o, const char *v) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (o->n_pol == KVB_POLICY_COUNT) { fprintf(stderr, "kvbound: --policies: too many\n"); return -1; }
        if (kvb_policy_from_name(tok, &o->pol[o->n_pol]) != KVB_OK) { fprintf(stderr, "kvbound: --policies: %s\n", kvb_last_error()); return -1; }
        if (o->pol[o->n_pol] == KVB_POLICY_KVZIP) { /* its scores come from a model's reconstruction pass */
            fprintf(stderr, "kvbound: --policies: kvzip scores tokens by a model's reconstruction of the context, and the lab has no model\n");
            return -1;
        }
        o->n_pol++;
    }
    return 0;
}

/* A value option of lab (--budget may take more values after it, advancing *i); -1: printed. */
static int lab_option(struct lab_cmd *c, const char *a, const char *v, int argc, char **argv, int *i) {
    struct lab_opts *o = &c->o;
    if (!strcmp(a, "--scenario")) c->scenario = v;
    else if (!strcmp(a, "--budget")) {
        if (parse_list_i32(a, v, o->budgets, &o->n_budgets, LAB_MAX_BUDGETS)) return -1;
        while (*i + 1 < argc && argv[*i + 1][0] >= '0' && argv[*i + 1][0] <= '9') /* --budget 64 128 256 */
            if (parse_list_i32(a, argv[++*i], o->budgets, &o->n_budgets, LAB_MAX_BUDGETS)) return -1;
    }
    else if (!strcmp(a, "--policies")) return lab_policies_option(o, v);
    else if (!strcmp(a, "--prompt")) return cli_parse_i32(a, v, 64, 1 << 20, &o->prompt);
    else if (!strcmp(a, "--steps")) return cli_parse_i32(a, v, 16, 1 << 20, &o->steps);
    else if (!strcmp(a, "--chunk")) return cli_parse_i32(a, v, 1, 1 << 20, &o->chunk);
    else if (!strcmp(a, "--recall-pages")) return cli_parse_i32(a, v, 1, KVB_RECALL_MAX_PAGES, &o->recall_pages);
    else if (!strcmp(a, "--seed")) {
        long long seed;
        if (cli_parse_i64(a, v, 0, (1LL << 62), &seed)) return -1;
        o->seed = (uint64_t)seed;
    } else c->out_dir = v; /* --out */
    return 0;
}

static int lab_parse(struct lab_cmd *c, int argc, char **argv) {
    memset(c, 0, sizeof *c);
    c->o.prompt = 1024;
    c->o.steps = 512;
    c->o.seed = 1;
    c->scenario = "all";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { lab_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) { c->json = true; continue; }
        if (!strcmp(a, "--recall")) { if (!c->o.recall_pages) c->o.recall_pages = 8; continue; }
        if (!(v = cli_opt_value("lab", "--scenario --budget --policies --prompt --steps --chunk --recall-pages --seed --out", argc, argv, &i))) return 2;
        if (lab_option(c, a, v, argc, argv, &i)) return 2;
    }
    if (c->out_dir && !(c->out_dir = cli_dir_arg("--out", c->out_dir, c->out_buf, sizeof c->out_buf))) return 2;
    return CLI_GO_ON;
}

/* Default budgets and policies, budgets sorted; CLI_GO_ON, or 2 for an unknown --scenario (printed). */
static int lab_defaults(struct lab_cmd *c) {
    struct lab_opts *o = &c->o;
    if (!o->n_budgets) { o->budgets[0] = 64; o->budgets[1] = 128; o->budgets[2] = 256; o->n_budgets = 3; }
    if (!o->n_pol) /* knorm, keydiff and expected-attention score keys (and queries), and lab rows have none; kvzip needs a model */
        for (int p = 0; p < KVB_POLICY_COUNT; p++)
            if (p != KVB_POLICY_KNORM && p != KVB_POLICY_KEYDIFF && p != KVB_POLICY_EXPECTED_ATTENTION && p != KVB_POLICY_KVZIP)
                o->pol[o->n_pol++] = (enum kvb_policy_id)p;
    for (int b = 0; b < o->n_budgets; b++) /* sort budgets: the sweep is drawn in order */
        for (int k = b + 1; k < o->n_budgets; k++)
            if (o->budgets[k] < o->budgets[b]) { int32_t t = o->budgets[b]; o->budgets[b] = o->budgets[k]; o->budgets[k] = t; }
    const bool all = !strcmp(c->scenario, "all");
    if (!all && strcmp(c->scenario, "trace") && !kvb_lab_scenario_describe(c->scenario)) {
        fprintf(stderr, "kvbound: --scenario: unknown '%s' (chat, needle, diffuse, drift, trace, all)\n", c->scenario);
        return 2;
    }
    return CLI_GO_ON;
}

/* The selected scenarios, then the trace (printed unless --json); -1: printed. */
static int lab_run(const struct lab_cmd *c, struct lab_report *rep) {
    const bool all = !strcmp(c->scenario, "all");
    for (int i = 0; i < N_SCEN; i++) {
        if (!all && strcmp(c->scenario, k_scenarios[i])) continue;
        if (!c->json) fprintf(stderr, "kvbound lab: %s ...\n", k_scenarios[i]);
        if (run_scenario(&c->o, &rep->scen[rep->n_scen++], k_scenarios[i])) return -1;
    }
    if (!all && strcmp(c->scenario, "trace")) return 0;
    char fin[256];
    if (!c->json) {
        run_trace(KVB_POLICY_H2O, stdout, rep->trace_h2o, sizeof rep->trace_h2o);
        run_trace(KVB_POLICY_STREAMING, stdout, fin, sizeof fin);
        printf("\n");
    } else {
        run_trace(KVB_POLICY_H2O, NULL, rep->trace_h2o, sizeof rep->trace_h2o);
    }
    rep->trace_ran = true;
    return 0;
}

/* The table or JSON, --out's report, and the audits' verdict: the exit status. */
static int lab_output(const struct lab_cmd *c, const struct lab_report *rep) {
    if (c->json) print_json(rep);
    else if (rep->n_scen) print_table(rep);
    else
        for (int i = 0; i < rep->n_audits; i++)
            printf("audit %-28s %s  %s\n", rep->audits[i].name, rep->audits[i].skipped ? "SKIP" : rep->audits[i].pass ? "PASS" : "FAIL", rep->audits[i].detail);
    int rc = 0;
    if (c->out_dir && rep->n_scen) {
        if (mkdir(c->out_dir, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "kvbound: --out: cannot create '%s': %s\n", c->out_dir, strerror(errno));
            rc = 1;
        } else if (lab_write_report(rep, c->out_dir) != 0) {
            rc = 1;
        } else if (!c->json) {
            printf("\nreport: %s/report.html\n", c->out_dir);
        }
    }
    for (int i = 0; i < rep->n_audits; i++)
        if (!rep->audits[i].pass) {
            fprintf(stderr, "kvbound lab: audit failed: %s\n", rep->audits[i].name);
            rc = 1;
        }
    return rc;
}

static void lab_free(const struct lab_opts *o, struct lab_report *rep) {
    for (int i = 0; i < rep->n_scen; i++) {
        if (rep->scen[i].cells)
            for (int c = 0; c < o->n_budgets * o->n_pol; c++) {
                kvb_lab_result_free(&rep->scen[i].cells[c].r);
                kvb_lab_result_free(&rep->scen[i].cells[c].rr);
            }
        free(rep->scen[i].cells);
        kvb_lab_stream_free(rep->scen[i].st);
    }
}

int cmd_lab(int argc, char **argv) {
    struct lab_cmd c;
    int rc = lab_parse(&c, argc, argv);
    if (rc == CLI_GO_ON) rc = lab_defaults(&c);
    if (rc != CLI_GO_ON) return rc;
    static struct lab_report rep;
    memset(&rep, 0, sizeof rep);
    rep.opts = &c.o;
    if (lab_run(&c, &rep) == 0) {
        audits_and_findings(&rep);
        rc = lab_output(&c, &rep);
    } else {
        rc = 1;
    }
    lab_free(&c.o, &rep);
    return rc;
}
