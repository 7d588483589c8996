/*
 * lab_report.c — the lab's HTML report: one self-contained file, inline SVG,
 * no external assets, readable offline. The markup is well-formed XML
 * (polyglot XHTML) so `xmllint` can check it strictly. Per scenario:
 *   1. retained mass over generated tokens, one line per policy;
 *   2. a cache map of the positions each policy holds at a selected step,
 *      facts marked, the active fact drawn strongly;
 *   3. the full attention row at that step in grey, with the part one policy
 *      retains overlaid;
 *   4. a budget sweep of mean retained mass against budget.
 * Panels 2 and 3 are drawn for every selected step; a small inline script
 * switches scenario and step (without it, everything is shown stacked).
 */
#include "lab.h"

#include <string.h>

/* one colour per policy, in enum kvb_policy_id order; the table is unsized so
 * that a policy added without its colour fails the build below */
static const char *const k_colors[] = {
    "#222222", "#9e9e9e", "#1f77b4", "#d62728", "#ff7f0e", "#8c564b",
    "#2ca02c", "#17becf", "#9467bd", "#e377c2", "#bcbd22", "#6a3d9a",
    "#b15928", "#33a02c", "#fb9a99",
};
_Static_assert(sizeof k_colors / sizeof k_colors[0] == KVB_POLICY_COUNT, "k_colors needs one colour per policy");

#define W 900
#define ML 110
#define MR 130
#define MT 12
#define MB 38

static const char *color(enum kvb_policy_id id) { return k_colors[(int)id % KVB_POLICY_COUNT]; }

static void axes(FILE *f, int h, const char *xlabel, const char *ylabel) {
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>", ML, h - MB, W - MR, h - MB);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>", ML, MT, ML, h - MB);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"label\" text-anchor=\"middle\">%s</text>", (ML + W - MR) / 2, h - 6, xlabel);
    if (ylabel)
        fprintf(f, "<text x=\"14\" y=\"%d\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 14 %d)\">%s</text>",
                (MT + h - MB) / 2, (MT + h - MB) / 2, ylabel);
}

static void legend(FILE *f, const struct lab_opts *o) {
    for (int p = 0; p < o->n_pol; p++) {
        int y = MT + 4 + p * 15;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/>", W - MR + 10, y + 4, color(o->pol[p]));
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\">%s</text>", W - MR + 26, y + 9, kvb_policy_name(o->pol[p]));
    }
}

static double xs(double v, double lo, double hi) { return ML + (hi > lo ? (v - lo) / (hi - lo) : 0) * (W - ML - MR); }
static double ys(double v, int h) { return MT + (1.0 - v) * (h - MT - MB); }

/* 1. retained mass over generated tokens */
static void panel_mass(FILE *f, const struct lab_opts *o, const struct lab_scen *sc, int b) {
    const int h = 260, G = o->steps;
    fprintf(f, "<figure><figcaption>1. Retained attention mass over generated tokens, budget %d</figcaption>", o->budgets[b]);
    fprintf(f, "<svg class=\"panel\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, h, W, h);
    for (int k = 0; k <= 4; k++) {
        double v = k / 4.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%.2f</text>",
                ML, ys(v, h), W - MR, ys(v, h), ML - 4, ys(v, h) + 4, v);
    }
    for (int k = 0; k <= 4; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%d</text>", xs(k * (G - 1) / 4.0, 0, G - 1), h - MB + 14, k * (G - 1) / 4);
    const int buckets = G < 450 ? G : 450;
    for (int p = 0; p < o->n_pol; p++) {
        const struct kvb_lab_result *r = &sc->cells[b * o->n_pol + p].r;
        fprintf(f, "<polyline class=\"line\" stroke=\"%s\" points=\"", color(o->pol[p]));
        for (int k = 0; k < buckets; k++) {
            int t0 = (int)((long long)k * G / buckets), t1 = (int)((long long)(k + 1) * G / buckets);
            double m = 0;
            for (int t = t0; t < t1; t++) m += r->mass[t];
            m /= (t1 - t0);
            fprintf(f, "%.1f,%.1f ", xs(0.5 * (t0 + t1 - 1), 0, G - 1), ys(m, h));
        }
        fprintf(f, "\"/>");
    }
    axes(f, h, "generated token", "retained mass");
    legend(f, o);
    fprintf(f, "</svg></figure>\n");
}

static bool is_active(const struct lab_scen *sc, int t, int32_t pos) {
    int32_t fa[32];
    int n = kvb_lab_active_facts(sc->st, t, fa, 32);
    for (int i = 0; i < n; i++)
        if (kvb_lab_fact(sc->st, fa[i]).pos == pos) return true;
    return false;
}

/* 2. cache map at the selected steps */
static void panel_map(FILE *f, const struct lab_opts *o, const struct lab_scen *sc, int b) {
    const int row_h = 16, h = MT + o->n_pol * row_h + MB + 4;
    fprintf(f, "<figure><figcaption>2. Cache map at the selected step, budget %d: positions each policy holds (facts: grey ticks, queried fact: red)</figcaption>", o->budgets[b]);
    fprintf(f, "<svg class=\"panel\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, h, W, h);
    for (int p = 0; p < o->n_pol; p++)
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\" text-anchor=\"end\" fill=\"%s\">%s</text>", ML - 6, MT + p * row_h + 12,
                color(o->pol[p]), kvb_policy_name(o->pol[p]));
    for (int k = 0; k < sc->n_snaps; k++) {
        const int t = sc->snaps[k];
        const double q = (double)o->prompt + t;
        fprintf(f, "<g class=\"snap\" data-step=\"%d\">", k);
        for (int fi = 0; fi < kvb_lab_n_facts(sc->st); fi++) {
            struct kvb_lab_fact fa = kvb_lab_fact(sc->st, fi);
            bool act = is_active(sc, t, fa.pos);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"%s\"/>", xs(fa.pos + 0.5, 0, q + 1), MT - 4,
                    xs(fa.pos + 0.5, 0, q + 1), MT + o->n_pol * row_h, act ? "fact-active" : "fact");
        }
        for (int p = 0; p < o->n_pol; p++) {
            const struct kvb_lab_result *r = &sc->cells[b * o->n_pol + p].r;
            const int64_t *pos = r->snap_pos + (size_t)k * r->snap_stride;
            int n = r->snap_n[k];
            for (int j = 0; j < n;) { /* one rect per run of consecutive positions */
                int e = j;
                while (e + 1 < n && pos[e + 1] == pos[e] + 1) e++;
                double x0 = xs((double)pos[j], 0, q + 1), x1 = xs((double)pos[e] + 1, 0, q + 1);
                fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>", x0, MT + p * row_h + 3,
                        x1 - x0 < 0.6 ? 0.6 : x1 - x0, row_h - 6, color(o->pol[p]));
                j = e + 1;
            }
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\" text-anchor=\"end\">%.0f</text>", W - MR, h - MB + 14, q);
        fprintf(f, "</g>");
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\">0</text>", ML, h - MB + 14);
    axes(f, h, "position (the query is the last one)", NULL);
    fprintf(f, "</svg></figure>\n");
}

/* 3. attention row at the selected steps, with one policy's retained part */
static void panel_row(FILE *f, const struct lab_opts *o, const struct lab_scen *sc, int b, int focus) {
    const int h = 240, buckets = 600;
    const enum kvb_policy_id fid = o->pol[focus];
    fprintf(f, "<figure><figcaption>3. Attention row at the selected step (grey) and the part %s retains at budget %d (colour); sqrt scale</figcaption>",
            kvb_policy_name(fid), o->budgets[b]);
    fprintf(f, "<svg class=\"panel\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, h, W, h);
    const struct kvb_lab_result *r = &sc->cells[b * o->n_pol + focus].r;
    double *row = malloc(sizeof(double) * ((size_t)o->prompt + o->steps));
    double *full = malloc(sizeof(double) * buckets), *kept = malloc(sizeof(double) * buckets);
    if (!row || !full || !kept) {
        free(row); free(full); free(kept);
        fprintf(f, "</svg></figure>\n");
        return;
    }
    for (int k = 0; k < sc->n_snaps; k++) {
        const int t = sc->snaps[k];
        const int64_t q = (int64_t)o->prompt + t;
        kvb_lab_row(sc->st, q, row);
        const int64_t *pos = r->snap_pos + (size_t)k * r->snap_stride;
        const int n = r->snap_n[k];
        int nb = q + 1 < buckets ? (int)(q + 1) : buckets;
        double mx = 0, kept_sum = 0;
        for (int u = 0; u < nb; u++) full[u] = kept[u] = 0;
        for (int64_t i = 0; i <= q; i++) {
            int u = (int)(i * nb / (q + 1));
            if (row[i] > full[u]) full[u] = row[i];
            if (row[i] > mx) mx = row[i];
        }
        for (int j = 0; j < n; j++) {
            int u = (int)(pos[j] * nb / (q + 1));
            if (row[pos[j]] > kept[u]) kept[u] = row[pos[j]];
            kept_sum += row[pos[j]];
        }
        double smx = sqrt(mx > 0 ? mx : 1);
        fprintf(f, "<g class=\"snap\" data-step=\"%d\">", k);
        for (int pass = 0; pass < 2; pass++) {
            const double *v = pass ? kept : full;
            fprintf(f, "<path class=\"%s\" %s%s%s d=\"M%.1f,%.1f", pass ? "kept" : "full", pass ? "fill=\"" : "", pass ? color(fid) : "", pass ? "\"" : "",
                    xs(0, 0, nb), ys(0, h));
            for (int u = 0; u < nb; u++) {
                double y = ys(sqrt(v[u]) / smx, h);
                fprintf(f, " L%.1f,%.1f L%.1f,%.1f", xs(u, 0, nb), y, xs(u + 1, 0, nb), y);
            }
            fprintf(f, " L%.1f,%.1f Z\"/>", xs(nb, 0, nb), ys(0, h));
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\" text-anchor=\"end\">step %d: %s keeps %.1f%% of the row's mass</text>", W - MR,
                MT + 12, t, kvb_policy_name(fid), 100.0 * kept_sum);
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\" text-anchor=\"end\">%lld</text>", W - MR, h - MB + 14, (long long)q);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%.3f</text>", ML - 4, ys(1, h) + 4, mx);
        fprintf(f, "</g>");
    }
    free(row); free(full); free(kept);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"tick\">0</text>", ML, h - MB + 14);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">0</text>", ML - 4, ys(0, h));
    axes(f, h, "position", "attention (sqrt)");
    fprintf(f, "</svg></figure>\n");
}

/* 4. budget sweep */
static void panel_sweep(FILE *f, const struct lab_opts *o, const struct lab_scen *sc) {
    const int h = 260, nb = o->n_budgets;
    fprintf(f, "<figure><figcaption>4. Budget sweep: mean retained mass against budget (tokens)</figcaption>");
    fprintf(f, "<svg class=\"panel\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">", W, h, W, h);
    for (int k = 0; k <= 4; k++) {
        double v = k / 4.0;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/><text x=\"%d\" y=\"%.1f\" class=\"tick\" text-anchor=\"end\">%.2f</text>",
                ML, ys(v, h), W - MR, ys(v, h), ML - 4, ys(v, h) + 4, v);
    }
    for (int b = 0; b < nb; b++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%d</text>", nb > 1 ? xs(b, 0, nb - 1) : xs(0.5, 0, 1), h - MB + 14, o->budgets[b]);
    for (int p = 0; p < o->n_pol; p++) {
        fprintf(f, "<polyline class=\"line\" stroke=\"%s\" points=\"", color(o->pol[p]));
        for (int b = 0; b < nb; b++)
            fprintf(f, "%.1f,%.1f ", nb > 1 ? xs(b, 0, nb - 1) : xs(0.5, 0, 1), ys(sc->cells[b * o->n_pol + p].r.mass_mean, h));
        fprintf(f, "\"/>");
        for (int b = 0; b < nb; b++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", nb > 1 ? xs(b, 0, nb - 1) : xs(0.5, 0, 1),
                    ys(sc->cells[b * o->n_pol + p].r.mass_mean, h), color(o->pol[p]));
    }
    axes(f, h, "budget (tokens per stream)", "mean retained mass");
    legend(f, o);
    fprintf(f, "</svg></figure>\n");
}

static void text(FILE *f, const char *s) { /* escape for XML text and attributes */
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static const char *k_style =
    "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1000px}"
    "nav button,.steps button{margin:0 .3em .3em 0;padding:.25em .7em;border:1px solid #888;background:#f4f4f4;cursor:pointer}"
    "button.on{background:#1f77b4;color:#fff}"
    "figure{margin:.8em 0}figcaption{font-weight:bold;margin-bottom:.2em}"
    ".axis{stroke:#333;stroke-width:1}.grid{stroke:#e4e4e4;stroke-width:1}"
    ".label{font-size:12px;fill:#333}.tick{font-size:10px;fill:#444}"
    ".line{fill:none;stroke-width:1.4}.full{fill:#c8c8c8}.kept{fill-opacity:.75}"
    ".fact{stroke:#aaa;stroke-width:1}.fact-active{stroke:#e00000;stroke-width:2.5}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
    ".pass{color:#080}.fail{color:#c00;font-weight:bold}.skip{color:#888}";

static const char *k_script =
    "//<![CDATA[\n"
    "window.addEventListener('error',function(){document.body.setAttribute('data-error','1');});\n"
    "(function(){\n"
    "  var secs=document.querySelectorAll('section.scenario');\n"
    "  function showStep(sec,k){\n"
    "    sec.querySelectorAll('g.snap').forEach(function(g){g.style.display=(g.getAttribute('data-step')===String(k))?'':'none';});\n"
    "    sec.querySelectorAll('.steps button').forEach(function(b){b.classList.toggle('on',b.getAttribute('data-step')===String(k));});\n"
    "  }\n"
    "  function showScen(name){\n"
    "    secs.forEach(function(s){s.style.display=(s.getAttribute('data-name')===name)?'':'none';});\n"
    "    document.querySelectorAll('nav button').forEach(function(b){b.classList.toggle('on',b.getAttribute('data-scen')===name);});\n"
    "  }\n"
    "  secs.forEach(function(sec){\n"
    "    sec.querySelectorAll('.steps button').forEach(function(b){b.addEventListener('click',function(){showStep(sec,b.getAttribute('data-step'));});});\n"
    "    showStep(sec,0);\n"
    "  });\n"
    "  document.querySelectorAll('nav button').forEach(function(b){b.addEventListener('click',function(){showScen(b.getAttribute('data-scen'));});});\n"
    "  if(secs.length){showScen(secs[0].getAttribute('data-name'));}\n"
    "  document.body.setAttribute('data-ready','1');\n"
    "})();\n"
    "//]]>";

int lab_write_report(const struct lab_report *rep, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/report.html", dir);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "kvbound: cannot write '%s'\n", tmp);
        return -1;
    }
    const struct lab_opts *o = rep->opts;
    const int b = o->n_budgets / 2; /* the main budget of panels 1-3 */
    int focus = 0;
    for (int p = 0; p < o->n_pol; p++)
        if (o->pol[p] == KVB_POLICY_H2O) focus = p;
    if (o->pol[focus] == KVB_POLICY_FULL && o->n_pol > 1) focus = 1;
    fprintf(f, "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\"><head><meta charset=\"utf-8\"/>"
               "<title>kvbound lab report</title><style>%s</style></head>\n<body>\n", k_style);
    fprintf(f, "<h1>kvbound lab</h1><p>Synthetic attention streams: prompt %d tokens, %d generated steps, seed %llu. "
               "Policies are the library's real policy objects; retained mass is the attention falling on the tokens a policy still holds. "
               "Panels 1&#8211;3 at budget %d.</p>\n",
            o->prompt, o->steps, (unsigned long long)o->seed, o->budgets[b]);
    fprintf(f, "<nav>");
    for (int i = 0; i < rep->n_scen; i++) fprintf(f, "<button type=\"button\" data-scen=\"%s\">%s</button>", rep->scen[i].name, rep->scen[i].name);
    fprintf(f, "</nav>\n");
    for (int i = 0; i < rep->n_scen; i++) {
        const struct lab_scen *sc = &rep->scen[i];
        fprintf(f, "<section class=\"scenario\" data-name=\"%s\" id=\"sc-%s\"><h2>%s</h2><p>", sc->name, sc->name, sc->name);
        text(f, kvb_lab_scenario_describe(sc->name));
        fprintf(f, "</p>\n<div class=\"steps\">selected step: ");
        for (int k = 0; k < sc->n_snaps; k++) {
            int32_t fa[8];
            int na = kvb_lab_active_facts(sc->st, sc->snaps[k], fa, 8);
            fprintf(f, "<button type=\"button\" data-step=\"%d\">t = %d%s</button>", k, sc->snaps[k], na ? " (fact queried)" : " (last)");
        }
        fprintf(f, "</div>\n");
        panel_mass(f, o, sc, b);
        panel_map(f, o, sc, b);
        panel_row(f, o, sc, b, focus);
        panel_sweep(f, o, sc);
        fprintf(f, "<table><tr><th>policy</th>");
        for (int k = 0; k < o->n_budgets; k++) fprintf(f, "<th>mean R @%d</th><th>fact hits @%d</th>", o->budgets[k], o->budgets[k]);
        fprintf(f, "</tr>");
        for (int p = 0; p < o->n_pol; p++) {
            fprintf(f, "<tr><th style=\"color:%s\">%s</th>", color(o->pol[p]), kvb_policy_name(o->pol[p]));
            for (int k = 0; k < o->n_budgets; k++) {
                const struct kvb_lab_result *r = &sc->cells[k * o->n_pol + p].r;
                fprintf(f, "<td>%.4f</td><td>%d/%d</td>", r->mass_mean, r->fact_hits[0] + r->fact_hits[1], r->fact_queries[0] + r->fact_queries[1]);
            }
            fprintf(f, "</tr>");
        }
        fprintf(f, "</table></section>\n");
    }
    fprintf(f, "<h2>Findings</h2><ul>");
    for (int i = 0; i < rep->n_findings; i++) {
        fprintf(f, "<li><b>%s</b>: ", rep->findings[i].name);
        text(f, rep->findings[i].detail);
        fprintf(f, "</li>");
    }
    fprintf(f, "</ul><h2>Audits</h2><ul>");
    for (int i = 0; i < rep->n_audits; i++) {
        const struct lab_audit *au = &rep->audits[i];
        fprintf(f, "<li class=\"%s\"><b>%s</b> %s: ", au->skipped ? "skip" : au->pass ? "pass" : "fail", au->name,
                au->skipped ? "SKIP" : au->pass ? "PASS" : "FAIL");
        text(f, rep->audits[i].detail);
        fprintf(f, "</li>");
    }
    fprintf(f, "</ul>\n<script>%s</script>\n</body></html>\n", k_script);
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "kvbound: cannot write '%s'\n", path);
        remove(tmp);
        return -1;
    }
    return 0;
}
