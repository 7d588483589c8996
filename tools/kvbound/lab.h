/*
 * lab.h — data shared by `kvbound lab` (lab.c: runs, audits, table, JSON)
 * and its HTML report (lab_report.c).
 */
#ifndef KVB_TOOL_LAB_H
#define KVB_TOOL_LAB_H

#include "cli.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>

#define LAB_MIN(a, b) ((a) < (b) ? (a) : (b))

#define LAB_MAX_BUDGETS 8
#define LAB_SNAPS 4
#define LAB_MAX_AUDITS 16
/* KV bytes per token of a 32-layer, 8-KV-head, 128-dim F16 model: K and V */
#define LAB_BYTES_PER_TOKEN (32 * 8 * 2 * 128 * 2)

struct lab_opts {
    int32_t prompt, steps, chunk;
    uint64_t seed;
    int32_t budgets[LAB_MAX_BUDGETS];
    int n_budgets;
    enum kvb_policy_id pol[KVB_POLICY_COUNT];
    int n_pol;
    int32_t recall_pages; /* --recall: each cell also runs with recall (rr) */
};

struct lab_cell {
    enum kvb_policy_id pid;
    int32_t budget;
    struct kvb_lab_result r;
    struct kvb_lab_result rr; /* with recall (opts.recall_pages > 0) */
};

struct lab_scen {
    const char *name;
    struct kvb_lab_stream *st;
    double row_err, row_min;
    int32_t snaps[LAB_SNAPS];
    int n_snaps;
    struct lab_cell *cells; /* [budget][policy] */
};

struct lab_audit {
    char name[64];
    bool pass;
    bool skipped;   /* not checked (scenario or policy not in the run): never reported as PASS */
    char detail[1400];
};

struct lab_report {
    const struct lab_opts *opts;
    struct lab_scen scen[4];
    int n_scen;
    struct lab_audit audits[LAB_MAX_AUDITS], findings[LAB_MAX_AUDITS];
    int n_audits, n_findings;
    bool trace_ran;
    char trace_h2o[256];
};

const struct lab_cell *lab_find(const struct lab_opts *o, const struct lab_scen *sc, enum kvb_policy_id id, int b);
/* Writes DIR/report.html; prints the reason and returns -1 on failure. */
int lab_write_report(const struct lab_report *rep, const char *dir);
int cmd_lab(int argc, char **argv);

#endif
