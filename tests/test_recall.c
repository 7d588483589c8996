/*
 * test_recall.c — reversible eviction (src/cache/recall.c, src/cache/cold.c):
 *   - the cold store gives back every page byte for byte, from memory and
 *     from its file, and its file passes the checker;
 *   - a writer killed with SIGKILL at random moments leaves a file whose
 *     committed pages are all intact (checked against regenerated content);
 *   - truncated files and any flipped byte of a header or committed page are
 *     refused, naming the file;
 *   - the page summary bounds every true logit, on random and quantized keys;
 *   - a cache with recall attends exactly to its hot slots plus its recalled
 *     tokens: each output equals an independent double-precision attention
 *     over that set (original and capped positions, several policies);
 *     recalled rows are bit-identical to the rows the tokens had when hot;
 *     the index's bounds are recomputed from the cold pages' own rows; the
 *     recalled pages are the best ones by bounds the test computes itself
 *     from the whole GQA group's query rows and each page's own keys (the
 *     staged page included); every token is hot, staged
 *     or in a cold page; hot memory equals the same policy's without recall.
 */
#define _GNU_SOURCE
#include "cache/cache_impl.h"
#include "cache_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static char *make_dir(void) {
    static char buf[4][64];
    static int k;
    char *d = buf[k++ % 4];
    strcpy(d, "/tmp/kvb-recall-XXXXXX");
    return mkdtemp(d);
}

static void remove_dir(const char *d) {
    DIR *dir = opendir(d);
    if (!dir) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dir)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            unlink(p);
        }
    closedir(dir);
    rmdir(d);
}

/* The one file in d (a store's), or 0. */
static int only_file(const char *d, char *out, size_t n) {
    DIR *dir = opendir(d);
    if (!dir) return 0;
    struct dirent *e;
    int k = 0;
    while ((e = readdir(dir)))
        if (e->d_name[0] != '.') {
            snprintf(out, n, "%s/%s", d, e->d_name);
            k++;
        }
    closedir(dir);
    return k == 1;
}

static const struct kvb_cold_geom G16 = {3, 16, 32, KVB_DTYPE_F16, KVB_DTYPE_Q8_0, 64, 34};

/* Record content of page seq (stream seq % 3, n = 1 + seq % 16): a hash. */
static void fill_record(const struct kvb_cold_geom *g, uint8_t *rec, int64_t seq, int32_t *stream, int32_t *n) {
    const size_t rb = kvb_cold_record_bytes(g);
    memset(rec, 0, rb);
    *stream = (int32_t)(seq % g->n_streams);
    *n = 1 + (int32_t)(seq % g->block_size);
    uint64_t h = (uint64_t)seq * 0x9E3779B97F4A7C15ull + 1;
    for (int32_t t = 0; t < *n; t++) kvb_cold_rec_pos(rec)[t] = (int32_t)(seq * 16 + t);
    uint8_t *rows = kvb_cold_rec_k(g, rec);
    const size_t nb = (size_t)g->block_size * (g->row_bytes + g->row_bytes_v);
    for (size_t i = 0; i < nb; i++) {
        h ^= h << 13; h ^= h >> 7; h ^= h << 17;
        rows[i] = (uint8_t)h;
    }
}

TEST(cold_store_roundtrip_memory_and_file) {
    char *d = make_dir();
    CHECK(d != NULL);
    const size_t rb = kvb_cold_record_bytes(&G16);
    struct kvb_cold *c;
    CHECK_OK(kvb_cold_create(&G16, 3 * rb + 5, d, &c)); /* 3 pages in memory, the rest in the file */
    uint8_t *rec = malloc(rb), *want = malloc(rb);
    int64_t ids[40];
    for (int64_t i = 0; i < 40; i++) {
        int32_t s, n;
        fill_record(&G16, rec, i, &s, &n);
        ids[i] = kvb_cold_append(c, rec, s, n);
        if (ids[i] < 0) FAILF("append %lld dropped", (long long)i);
    }
    for (int64_t i = 0; i < 40; i++) {
        int32_t s, n;
        fill_record(&G16, want, i, &s, &n);
        const uint8_t *got = kvb_cold_get(c, ids[i]);
        if (memcmp(got + KVB_COLD_REC_HEADER, want + KVB_COLD_REC_HEADER, rb - KVB_COLD_REC_HEADER) != 0) FAILF("page %lld differs", (long long)i);
        int32_t gs, gn;
        memcpy(&gs, got + 4, 4);
        memcpy(&gn, got + 8, 4);
        CHECK_EQ_INT(gs, s);
        CHECK_EQ_INT(gn, n);
    }
    struct kvb_cold_counts cc;
    kvb_cold_counts(c, &cc);
    CHECK_EQ_INT(cc.mem_pages, 3);
    CHECK_EQ_INT(cc.file_pages, 37);
    CHECK_EQ_INT(cc.dropped_pages, 0);
    CHECK(cc.file_bytes == KVB_COLD_HEADER_BYTES + 37 * rb);
    struct kvb_cold_file_info in;
    CHECK_OK(kvb_cold_file_check(kvb_cold_path(c), &in));
    CHECK_EQ_INT(in.pages, 37);
    CHECK_EQ_INT(in.tail_bytes, 0);
    CHECK_EQ_INT(in.block_size, 16);
    CHECK_EQ_INT(in.head_dim, 32);
    CHECK_EQ_INT(in.dtype_v, KVB_DTYPE_Q8_0);
    char path[512];
    snprintf(path, sizeof path, "%s", kvb_cold_path(c));
    kvb_cold_free(c);
    CHECK(access(path, F_OK) != 0); /* the file goes with the store */
    /* no directory: pages beyond memory are dropped and counted */
    CHECK_OK(kvb_cold_create(&G16, rb, NULL, &c));
    int32_t s, n;
    fill_record(&G16, rec, 0, &s, &n);
    CHECK(kvb_cold_append(c, rec, s, n) == 0);
    CHECK(kvb_cold_append(c, rec, s, n) < 0);
    kvb_cold_counts(c, &cc);
    CHECK_EQ_INT(cc.dropped_pages, 1);
    kvb_cold_free(c);
    free(rec);
    free(want);
    remove_dir(d);
}

/* A child appends pages to the file tier as fast as it can; the parent kills
 * it with SIGKILL after a random delay, then checks the file: every
 * committed page must be whole and equal to its regenerated content. */
TEST(cold_file_survives_kill_9) {
    const size_t rb = kvb_cold_record_bytes(&G16);
    for (int round = 0; round < 4; round++) {
        char *d = make_dir();
        CHECK(d != NULL);
        /* The child says when its first page is committed, so a slow start
         * (sanitizer runtimes, a loaded machine) cannot leave the parent
         * killing a child that has not created its file yet. */
        int ready[2];
        CHECK(pipe(ready) == 0);
        pid_t pid = fork();
        if (pid == 0) {
            close(ready[0]);
            struct kvb_cold *c;
            if (kvb_cold_create(&G16, 0, d, &c) != KVB_OK) _exit(3);
            uint8_t *rec = malloc(rb);
            for (int64_t i = 0;; i++) {
                int32_t s, n;
                fill_record(&G16, rec, i, &s, &n);
                if (kvb_cold_append(c, rec, s, n) < 0) _exit(4);
                if (i == 0) {
                    if (write(ready[1], "r", 1) != 1) _exit(5);
                    close(ready[1]);
                }
            }
        }
        CHECK(pid > 0);
        close(ready[1]);
        struct pollfd pf = {.fd = ready[0], .events = POLLIN};
        char byte;
        ssize_t got_ready = poll(&pf, 1, 60000) == 1 ? read(ready[0], &byte, 1) : -1;
        close(ready[0]);
        if (got_ready != 1) {
            int wst;
            kill(pid, SIGKILL);
            waitpid(pid, &wst, 0);
            FAILF("round %d: child gave no first page within 60 s (status %d)", round, wst);
        }
        usleep(20000 + 30000 * (useconds_t)round);
        kill(pid, SIGKILL);
        int wst;
        waitpid(pid, &wst, 0);
        CHECK(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
        char path[512];
        CHECK(only_file(d, path, sizeof path));
        struct kvb_cold_file_info in;
        CHECK_OK(kvb_cold_file_check(path, &in));
        if (in.pages < 1) FAILF("round %d: no page committed", round);
        void *map;
        size_t size;
        CHECK_OK(kvb_map_file(path, 0, "cold file", &map, &size));
        uint8_t *want = malloc(rb);
        for (int64_t i = 0; i < in.pages; i++) {
            int32_t s, n;
            fill_record(&G16, want, i, &s, &n);
            const uint8_t *got = (const uint8_t *)map + KVB_COLD_HEADER_BYTES + (size_t)i * rb;
            if (memcmp(got + KVB_COLD_REC_HEADER, want + KVB_COLD_REC_HEADER, rb - KVB_COLD_REC_HEADER) != 0) FAILF("round %d: page %lld corrupted", round, (long long)i);
        }
        free(want);
        kvb_unmap_file(map, size);
        /* a torn write after the committed pages is a tail, not an error */
        int fd = open(path, O_WRONLY | O_APPEND);
        CHECK(fd >= 0);
        CHECK(write(fd, "torn", 4) == 4);
        close(fd);
        struct kvb_cold_file_info in2;
        CHECK_OK(kvb_cold_file_check(path, &in2));
        CHECK_EQ_INT(in2.pages, in.pages);
        CHECK_EQ_INT(in2.tail_bytes, in.tail_bytes + 4);
        remove_dir(d);
    }
}

/* Copies of a valid file with one change each must be refused. */
TEST(hostile_cold_files_refused) {
    char *d = make_dir();
    CHECK(d != NULL);
    const size_t rb = kvb_cold_record_bytes(&G16);
    struct kvb_cold *c;
    CHECK_OK(kvb_cold_create(&G16, 0, d, &c));
    uint8_t *rec = malloc(rb);
    for (int64_t i = 0; i < 3; i++) {
        int32_t s, n;
        fill_record(&G16, rec, i, &s, &n);
        CHECK(kvb_cold_append(c, rec, s, n) >= 0);
    }
    free(rec);
    void *map;
    size_t size;
    CHECK_OK(kvb_map_file(kvb_cold_path(c), 0, "cold file", &map, &size));
    uint8_t *img = malloc(size);
    memcpy(img, map, size);
    kvb_unmap_file(map, size);
    kvb_cold_free(c);
    char path[600];
    snprintf(path, sizeof path, "%s/hostile.kvc", d);
    uint8_t *mut = malloc(size);
    int refused = 0, tried = 0;
    /* every byte of the header's checked part, the count, and of each page (crc'd) */
    for (size_t off = 0; off < size; off += off < 80 ? 1 : (off < KVB_COLD_HEADER_BYTES ? KVB_COLD_HEADER_BYTES - 80 : 7)) {
        if (off >= 52 && off < 64) continue;    /* reserved zeros */
        if (off >= 72 && off < KVB_COLD_HEADER_BYTES) continue;
        memcpy(mut, img, size);
        uint64_t before;
        memcpy(&before, mut + 64, 8);
        mut[off] ^= 0x41;
        uint64_t after;
        memcpy(&after, mut + 64, 8);
        if (off >= 64 && off < 72 && after < before) continue; /* fewer committed pages: a valid, shorter file */
        FILE *f = fopen(path, "wb");
        fwrite(mut, 1, size, f);
        fclose(f);
        struct kvb_cold_file_info in;
        tried++;
        kvb_status st = kvb_cold_file_check(path, &in);
        if (st == KVB_ERR_CORRUPT && strstr(kvb_last_error(), "hostile.kvc")) refused++;
        else FAILF("byte %zu flipped: status %d (%s)", off, (int)st, kvb_last_error());
    }
    CHECK_EQ_INT(refused, tried);
    /* truncated: any length short of the committed pages */
    int truncs = 0;
    for (size_t len = 0; len < size; len += (len < KVB_COLD_HEADER_BYTES ? 512 : 101)) {
        FILE *f = fopen(path, "wb");
        fwrite(img, 1, len, f);
        fclose(f);
        struct kvb_cold_file_info in;
        CHECK_STATUS(kvb_cold_file_check(path, &in), KVB_ERR_CORRUPT);
        /* the error names the file and what is short: the header, or the committed pages */
        char want[700];
        if (len < KVB_COLD_HEADER_BYTES) snprintf(want, sizeof want, "%s: too short for a cold-tier header (%zu bytes)", path, len);
        else snprintf(want, sizeof want, "%s: truncated: the header commits 3 pages, the file holds %zu", path, (len - KVB_COLD_HEADER_BYTES) / rb);
        if (strcmp(kvb_last_error(), want) != 0) FAILF("truncated to %zu bytes: \"%s\", want \"%s\"", len, kvb_last_error(), want);
        truncs++;
    }
    CHECK_EQ_INT(truncs, 8 + (size - KVB_COLD_HEADER_BYTES + 100) / 101);
    free(img);
    free(mut);
    remove_dir(d);
}

/* No true logit over a page exceeds its bound (exact arithmetic in double,
 * f32 rounding of the bound allowed for). Keys as attention reads them:
 * f32, f16 and q8_0 rows dequantized. */
TEST(page_bound_is_an_upper_bound) {
    const int d = 64, B = 16;
    const enum kvb_dtype types[3] = {KVB_DTYPE_F32, KVB_DTYPE_F16, KVB_DTYPE_Q8_0};
    for (int ti = 0; ti < 3; ti++)
        for (int trial = 0; trial < 200; trial++) {
            float keys[16][64], lohi[128];
            for (int c = 0; c < d; c++) { lohi[c] = INFINITY; lohi[d + c] = -INFINITY; }
            const float scale = trial % 3 == 0 ? 10.0f : 1.0f;
            for (int t = 0; t < B; t++) {
                float raw[64];
                uint8_t row[512];
                for (int c = 0; c < d; c++) raw[c] = frand() * scale + (c % 5 == 0 ? 3.0f : 0.0f);
                kvb_kv_row_store(types[ti], raw, row, d);
                kvb_kv_row_load(types[ti], row, keys[t], d);
                for (int c = 0; c < d; c++) {
                    lohi[c] = fminf(lohi[c], keys[t][c]);
                    lohi[d + c] = fmaxf(lohi[d + c], keys[t][c]);
                }
            }
            for (int qi = 0; qi < 20; qi++) {
                float q[64];
                for (int c = 0; c < d; c++) q[c] = frand() * (qi % 2 ? 5.0f : 0.3f);
                const double bound = kvb_recall_bound(q, lohi, d);
                double slack = 0;
                for (int c = 0; c < d; c++) slack += fabs((double)q[c]) * fmax(fabs((double)lohi[c]), fabs((double)lohi[d + c]));
                for (int t = 0; t < B; t++) {
                    double logit = 0;
                    for (int c = 0; c < d; c++) logit += (double)q[c] * keys[t][c];
                    if (logit > bound + 1e-6 * slack) FAILF("%s trial %d: logit %.9g above bound %.9g", kvb_dtype_name(types[ti]), trial, logit, bound);
                }
            }
        }
}

/* ---- a cache with recall against references ---- */

#define L 2
#define H 2
#define NH 4
#define D 32
#define STEPS 260

struct shadow { /* stored bytes of every token's rows, captured while hot */
    uint8_t *k, *v;
    bool *have;
    size_t rk, rv;
};

static void capture(struct kvb_cache *c, struct shadow *sh) {
    for (int i = 0; i < L * H; i++) {
        const struct kvb_stream *s = &c->streams[i];
        for (int32_t j = 0; j < s->v.n; j++) {
            const int32_t slot = s->v.order[j], p = s->v.pos[slot];
            const size_t at = (size_t)i * STEPS + (size_t)p;
            if (sh->have[at]) continue;
            memcpy(sh->k + at * sh->rk, kvb_stream_row(&c->geom, s, slot), sh->rk);
            memcpy(sh->v + at * sh->rv, kvb_stream_vrow(&c->geom, s, slot), sh->rv);
            sh->have[at] = true;
        }
    }
}

/* Checks a stream's recall area and cold index against the shadow and each
 * other. 0 or prints and returns 1. */
static int check_area(struct kvb_cache *c, const struct shadow *sh, int i, int step) {
    const struct kvb_recall_stream *r = &c->recall[i];
    const struct kvb_cold_geom *g = &c->cold_geom;
    const int32_t B = c->params.kv.block_size, R = c->params.kv.recall.pages;
    /* the index's bounds are the cold pages' own keys' */
    float key[D];
    for (int64_t p = 0; p < r->n_cold; p++) {
        uint8_t *rec = (uint8_t *)kvb_cold_get(c->cold, r->rec[p]);
        float lo[D], hi[D];
        for (int x = 0; x < D; x++) { lo[x] = INFINITY; hi[x] = -INFINITY; }
        for (int32_t t = 0; t < B; t++) {
            kvb_kv_row_load(g->dtype, kvb_cold_rec_k(g, rec) + (size_t)t * g->row_bytes, key, D);
            for (int x = 0; x < D; x++) { lo[x] = fminf(lo[x], key[x]); hi[x] = fmaxf(hi[x], key[x]); }
        }
        if (memcmp(lo, r->lohi + p * 2 * D, sizeof lo) || memcmp(hi, r->lohi + p * 2 * D + D, sizeof hi)) {
            printf("  step %d stream %d: cold page %lld bounds differ from its keys\n", step, i, (long long)p);
            return 1;
        }
    }
    if (!r->pages) return 0;
    /* recalled rows: bit-identical to the rows the tokens had when hot */
    for (int32_t j = 0; j < r->n; j++) {
        const int32_t slot = r->order[j], p = r->pos[slot];
        const size_t at = (size_t)i * STEPS + (size_t)p;
        if (j > 0 && r->pos[r->order[j - 1]] >= p) { printf("  step %d stream %d: area not by position\n", step, i); return 1; }
        if (!sh->have[at]) continue; /* evicted on arrival (tova may): never seen hot */
        const uint8_t *kr = r->pages[slot / B] + (size_t)(slot % B) * c->geom.row_bytes;
        const uint8_t *vr = r->pages[slot / B] + c->geom.v_offset + (size_t)(slot % B) * c->geom.row_bytes_v;
        if (memcmp(kr, sh->k + at * sh->rk, sh->rk) || memcmp(vr, sh->v + at * sh->rv, sh->rv)) {
            printf("  step %d stream %d: recalled rows of position %d differ\n", step, i, p);
            return 1;
        }
    }
    /* the chosen pages score at least as high as every other candidate
     * (scores of the last choice; the staged page is candidate n_cold) */
    if (r->since == 1 && r->n_cold + (r->n_stage > 0) > 0) {
        float lo_chosen = INFINITY;
        int chosen = 0;
        for (int32_t a = 0; a < R; a++)
            if (r->loaded[a] >= 0) { lo_chosen = fminf(lo_chosen, r->score[r->loaded[a]]); chosen++; }
        for (int64_t p = 0; p < r->n_cold; p++) {
            bool in = false;
            for (int32_t a = 0; a < R; a++) in |= r->loaded[a] == p;
            if (!in && chosen == R && r->score[p] > lo_chosen) {
                printf("  step %d stream %d: page %lld scores %g above a chosen one (%g)\n", step, i, (long long)p, r->score[p], lo_chosen);
                return 1;
            }
        }
    }
    return 0;
}

/* The candidates of one stream's page choice, taken before a decode: every
 * sealed page, then the staged one, each with its first position and the
 * bound the test computes itself: from the G query rows of the group
 * (rotated to position t by the reference RoPE, scaled by 1/sqrt(D)) and
 * the page's own stored keys, per channel max(q lo, q hi) summed, the
 * largest over the G rows. */
struct choice {
    int n;
    long long first[512];
    double bound[512], slack;
};

static double group_bound(const double qr[][D], int G, const uint8_t *krows, size_t rb, enum kvb_dtype dt, int n, double *slack) {
    double lo[D], hi[D], best = -INFINITY;
    float key[D];
    for (int x = 0; x < D; x++) { lo[x] = INFINITY; hi[x] = -INFINITY; }
    for (int t = 0; t < n; t++) {
        kvb_kv_row_load(dt, krows + (size_t)t * rb, key, D);
        for (int x = 0; x < D; x++) { lo[x] = fmin(lo[x], key[x]); hi[x] = fmax(hi[x], key[x]); }
    }
    for (int g = 0; g < G; g++) {
        double b = 0, sl = 0;
        for (int x = 0; x < D; x++) {
            b += fmax(qr[g][x] * lo[x], qr[g][x] * hi[x]);
            sl += fabs(qr[g][x]) * fmax(fabs(lo[x]), fabs(hi[x]));
        }
        best = fmax(best, b);
        *slack = fmax(*slack, sl);
    }
    return best;
}

static void choice_candidates(const struct kvb_cache *c, const struct kvb_rope *rope, int i, const float q[][D], int G, long long t,
                              struct choice *ch) {
    const struct kvb_recall_stream *r = &c->recall[i];
    const struct kvb_cold_geom *g = &c->cold_geom;
    double qr[NH][D];
    for (int r0 = 0; r0 < G; r0++) {
        ref_rope(rope, q[r0], D, t, qr[r0]);
        for (int x = 0; x < D; x++) qr[r0][x] /= sqrt((double)D);
    }
    ch->n = 0;
    ch->slack = 0;
    for (int64_t p = 0; p < r->n_cold && ch->n < 511; p++) {
        uint8_t *rec = (uint8_t *)kvb_cold_get(c->cold, r->rec[p]);
        ch->first[ch->n] = kvb_cold_rec_pos(rec)[0];
        ch->bound[ch->n++] = group_bound((const double(*)[D])qr, G, kvb_cold_rec_k(g, rec), g->row_bytes, g->dtype, g->block_size, &ch->slack);
    }
    if (r->n_stage > 0) {
        ch->first[ch->n] = kvb_cold_rec_pos(r->stage)[0];
        ch->bound[ch->n++] = group_bound((const double(*)[D])qr, G, kvb_cold_rec_k(g, r->stage), g->row_bytes, g->dtype, r->n_stage, &ch->slack);
    }
}

/* After the decode: if stream i chose its pages there (since == 1), the
 * pages in its area (known by their first positions) are min(R, candidates)
 * of the candidates, and none left out bounds higher than one chosen (f32
 * rounding of the library's bounds allowed for). 0 or prints and returns 1. */
static int check_choice(const struct kvb_cache *c, int i, const struct choice *ch, int step) {
    const struct kvb_recall_stream *r = &c->recall[i];
    const int32_t B = c->params.kv.block_size, R = c->params.kv.recall.pages;
    if (!r->pages || r->since != 1 || ch->n == 0) return 0;
    bool chosen[512] = {false};
    int n_chosen = 0;
    for (int p = 0; p < ch->n; p++)
        for (int32_t a = 0; a < R; a++)
            if (r->pos[a * B] == ch->first[p] && !chosen[p]) { chosen[p] = true; n_chosen++; }
    if (n_chosen != (ch->n < R ? ch->n : R)) {
        printf("  step %d stream %d: %d of %d candidate pages in the area of %d\n", step, i, n_chosen, ch->n, R);
        return 1;
    }
    const double tol = 1e-5 * ch->slack;
    for (int u = 0; u < ch->n; u++)
        for (int p = 0; p < ch->n && !chosen[u]; p++)
            if (chosen[p] && ch->bound[u] > ch->bound[p] + tol) {
                printf("  step %d stream %d: page at position %lld (bound %.7g) left out, page at %lld (bound %.7g) chosen\n", step, i,
                       ch->first[u], ch->bound[u], ch->first[p], ch->bound[p]);
                return 1;
            }
    return 0;
}

struct rcase {
    enum kvb_policy_id pid;
    enum kvb_pos_mode pm;
    enum kvb_dtype dt;
    int R, every;
    size_t mem;   /* cold memory bytes */
    bool file;    /* a cold directory */
    bool reference; /* compare outputs with the double-precision reference (f32 rows) */
    int restore_at; /* > 0: after this step the cache is saved, freed and continued from its image */
    bool nope;      /* layer 1 rotates nothing (a NoPE layer, kvb_cache_params.no_rope) */
};

/* c saved, then loaded into pool: the image loads, saves again to the same
 * bytes, and the original is freed; returns the restored cache or NULL. */
static struct kvb_cache *save_and_restore(struct kvb_cache *c, struct kvb_pool *pool, const char *dir) {
    void *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    struct kvb_cache *r = NULL;
    if (kvb_cache_save(c, &a, &la) != KVB_OK) { printf("  save: %s\n", kvb_last_error()); return NULL; }
    if (kvb_cache_load(pool, a, la, 0, &r) != KVB_OK) printf("  load: %s\n", kvb_last_error());
    else if (dir && kvb_cache_set_cold_dir(r, dir) != KVB_OK) { /* the restored tier spills where the first one did */
        printf("  set_cold_dir: %s\n", kvb_last_error());
        kvb_cache_free(r);
        r = NULL;
    }
    else if (kvb_cache_save(r, &b, &lb) != KVB_OK || la != lb || memcmp(a, b, la)) {
        printf("  the restored cache saves to a different image (%zu vs %zu bytes)\n", la, lb);
        kvb_cache_free(r);
        r = NULL;
    }
    if (r) {
        struct kvb_cache_stats x, y;
        kvb_cache_get_stats(c, &x);
        kvb_cache_get_stats(r, &y);
        if (x.slots != y.slots || x.cold_pages != y.cold_pages || x.cold_staged_tokens != y.cold_staged_tokens || x.recall_bytes != y.recall_bytes ||
            x.cold_dropped_pages != y.cold_dropped_pages || x.recall_loads != y.recall_loads || x.bytes_used != y.bytes_used) {
            printf("  restored stats differ (cold pages %lld vs %lld, recall bytes %zu vs %zu)\n", (long long)x.cold_pages, (long long)y.cold_pages,
                   x.recall_bytes, y.recall_bytes);
            kvb_cache_free(r);
            r = NULL;
        }
    }
    kvb_buffer_free(a);
    kvb_buffer_free(b);
    if (r) kvb_cache_free(c);
    return r;
}

/* Runs one case; with hot_bytes, also records hot bytes per step. */
static int run_recall(const struct rcase *k, size_t *hot_bytes, float *outs) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.n_layer = L;
    cp.n_kv_head = H;
    cp.head_dim = D;
    cp.kv.kv_dtype = k->dt;
    cp.kv.block_size = 16;
    cp.kv.pos_mode = k->pm;
    cp.kv.max_distance = 40;
    cp.rope = (struct kvb_rope){KVB_ROPE_INTERLEAVED, D, 10000.0f, 1.0f, NULL};
    static const uint8_t nope[L] = {0, 1};
    if (k->nope) cp.no_rope = nope;
    cp.kv.policy = kvb_policy_default_params(k->pid);
    cp.kv.policy.budget = 48;
    cp.kv.policy.n_sink = 4;
    char *dir = k->file ? make_dir() : NULL;
    cp.kv.recall = (struct kvb_recall_params){k->R, k->every, k->mem, dir, KVB_RECALL_BOUNDS};
    struct kvb_pool_params pp = kvb_pool_default_params();
    pp.page_bytes = kvb_cache_page_bytes(&cp);
    pp.capacity_bytes = (size_t)4 << 20;
    struct kvb_pool *pool;
    struct kvb_cache *c;
    if (kvb_pool_init(&pp, &pool) != KVB_OK || kvb_cache_init(pool, &cp, &c) != KVB_OK) { printf("  init: %s\n", kvb_last_error()); return 1; }
    struct kvb_cache_params got;
    kvb_cache_get_params(c, &got);
    const enum kvb_pos_mode pm = kvb_cache_pos_mode(c);
    static float hk[L][H][STEPS][D], hv[L][H][STEPS][D];
    struct shadow sh = {calloc((size_t)L * H * STEPS, 512), calloc((size_t)L * H * STEPS, 512), calloc((size_t)L * H * STEPS, 1),
                        c->geom.row_bytes, c->geom.row_bytes_v};
    int rc = 0;
    bool spilled = false;
    for (int t = 0; t < STEPS && !rc; t++) {
        if (k->restore_at && t == k->restore_at) {
            struct kvb_cache *r = save_and_restore(c, pool, dir);
            if (!r) { rc = 1; break; }
            c = r;
        }
        for (int l = 0; l < L && !rc; l++) {
            float q[NH][D], kk[H][D], vv[H][D], out[NH][D];
            for (int h = 0; h < NH; h++) for (int x = 0; x < D; x++) q[h][x] = frand() * 2.0f;
            for (int h = 0; h < H; h++)
                for (int x = 0; x < D; x++) {
                    /* every 37th token is loud: a heavy hitter worth recalling */
                    kk[h][x] = frand() * (t % 37 == 5 ? 3.0f : 1.0f);
                    vv[h][x] = frand();
                    hk[l][h][t][x] = kk[h][x];
                    hv[l][h][t][x] = vv[h][x];
                }
            /* the hot set before the step, plus the new token */
            long long hot[H][64 + 1];
            int nhot[H];
            for (int h = 0; h < H; h++) {
                nhot[h] = kvb_cache_n_slots(c, l, h);
                for (int j = 0; j < nhot[h]; j++) {
                    struct kvb_slot_info si;
                    kvb_cache_slot_info(c, l, h, j, &si);
                    hot[h][j] = si.pos_original;
                }
                hot[h][nhot[h]++] = t;
            }
            static struct choice ch[H];
            struct kvb_rope lrope = got.rope; /* the layer's own: none on a NoPE layer */
            if (k->nope && nope[l]) lrope.type = KVB_ROPE_NONE;
            for (int h = 0; c->recall && h < H; h++) choice_candidates(c, &lrope, l * H + h, (const float(*)[D])&q[h * (NH / H)], NH / H, t, &ch[h]);
            if (kvb_cache_decode(c, l, &q[0][0], NH, &kk[0][0], &vv[0][0], &out[0][0], NULL) != KVB_OK) { printf("  decode: %s\n", kvb_last_error()); rc = 1; break; }
            for (int h = 0; c->recall && h < H && !rc; h++) rc = check_choice(c, l * H + h, &ch[h], t);
            if (outs) memcpy(outs + ((size_t)t * L + l) * NH * D, out, sizeof out);
            if (k->reference)
                for (int hq = 0; hq < NH && !rc; hq++) {
                    const int h = hq / (NH / H);
                    int32_t rec[64 * 16];
                    const int nr = kvb_cache_recalled(c, l, h, rec, 64 * 16);
                    const float *kp[64 + 1 + 1024], *vp[64 + 1 + 1024];
                    long long kpos[64 + 1 + 1024];
                    int n = 0;
                    for (int j = 0; j < nhot[h]; j++) kpos[n] = hot[h][j], kp[n] = hk[l][h][hot[h][j]], vp[n] = hv[l][h][hot[h][j]], n++;
                    for (int j = 0; j < nr; j++) {
                        for (int x = 0; x < nhot[h]; x++)
                            if (hot[h][x] == rec[j]) { printf("  step %d: position %d both hot and recalled\n", t, rec[j]); rc = 1; }
                        kpos[n] = rec[j], kp[n] = hk[l][h][rec[j]], vp[n] = hv[l][h][rec[j]], n++;
                    }
                    if (pm == KVB_POS_CAPPED)
                        for (int j = 0; j < n; j++)
                            if (t - kpos[j] > got.kv.max_distance) kpos[j] = t - got.kv.max_distance;
                    double ref[D];
                    ref_attend(&lrope, D, q[hq], t, kp, vp, kpos, n, ref);
                    for (int x = 0; x < D; x++)
                        if (fabs(ref[x] - out[hq][x]) > 2e-5) {
                            printf("  step %d layer %d head %d: out[%d] %.7f, reference %.7f (%d hot, %d recalled)\n", t, l, hq, x, out[hq][x], ref[x], nhot[h], nr);
                            rc = 1;
                            break;
                        }
                }
        }
        if (rc) break;
        capture(c, &sh);
        for (int i = 0; c->recall && i < L * H && !rc; i++) rc = check_area(c, &sh, i, t);
        /* every token is hot, staged or in a cold page */
        struct kvb_cache_stats cs;
        kvb_cache_get_stats(c, &cs);
        if (!rc && c->recall && cs.cold_dropped_pages == 0 && cs.slots + cs.cold_staged_tokens + cs.cold_pages * 16 != (int64_t)(t + 1) * L * H) {
            printf("  step %d: %lld hot + %lld staged + %lld cold pages != %d tokens\n", t, (long long)cs.slots, (long long)cs.cold_staged_tokens,
                   (long long)cs.cold_pages, (t + 1) * L * H);
            rc = 1;
        }
        if (!rc) rc = check_invariants(c, pool, "recall step");
        if (hot_bytes) hot_bytes[t] = cs.bytes_used - cs.recall_bytes;
        spilled |= cs.cold_file_bytes > 0;
    }
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    if (!rc && k->R && cs.recall_loads == 0 && k->pid != KVB_POLICY_FULL) { printf("  nothing was ever recalled\n"); rc = 1; }
    if (!rc && k->file && !spilled) { printf("  nothing reached the cold file\n"); rc = 1; }
    /* the image holds the cold tier and the areas: it loads and saves again to the same bytes */
    if (!rc) {
        struct kvb_cache *r = save_and_restore(c, pool, dir);
        if (r) c = r;
        else rc = 1;
    }
    kvb_cache_free(c);
    struct kvb_pool_stats ps;
    kvb_pool_get_stats(pool, &ps);
    if (!rc && ps.pages_in_use != 0) { printf("  %lld pages left in the pool\n", (long long)ps.pages_in_use); rc = 1; }
    kvb_pool_free(pool);
    free(sh.k); free(sh.v); free(sh.have);
    if (dir) remove_dir(dir);
    return rc;
}

TEST(recalled_attention_equals_direct_reference) {
    const struct rcase cases[] = {
        {KVB_POLICY_STREAMING, KVB_POS_POLICY_DEFAULT, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false}, /* capped by default */
        {KVB_POLICY_STREAMING, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 3, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_WINDOW, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 3, 0, true, true, 0, false},                       /* file only, every 3 */
        {KVB_POLICY_H2O, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, 20000, true, true, 0, false},                     /* memory then file */
        {KVB_POLICY_TOVA, KVB_POS_CAPPED, KVB_DTYPE_F32, 1, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_KNORM, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 4, 2, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_KEYDIFF, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_EXPECTED_ATTENTION, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_SCISSORHANDS, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_SNAPKV, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_PYRAMIDKV, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_ADAKV, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_LMINFINITE, KVB_POS_POLICY_DEFAULT, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, false},
        {KVB_POLICY_STREAMING, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, 8000, true, false, 0, false},
        {KVB_POLICY_H2O, KVB_POS_ORIGINAL, KVB_DTYPE_Q8_0, 2, 1, 0, true, false, 0, false},
        {KVB_POLICY_BLOCK_H2O, KVB_POS_ORIGINAL, KVB_DTYPE_Q4_0, 2, 1, (size_t)1 << 20, false, false, 0, false},
        /* a NoPE layer (layer 1) beside a rotating one: original, capped (the shadow keys), restored mid-way */
        {KVB_POLICY_H2O, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 0, true},
        {KVB_POLICY_STREAMING, KVB_POS_POLICY_DEFAULT, KVB_DTYPE_F32, 2, 1, (size_t)1 << 20, false, true, 70, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (run_recall(&cases[i], NULL, NULL)) FAILF("case %zu (%s, %s)", i, kvb_policy_name(cases[i].pid), kvb_dtype_name(cases[i].dt));
}

/* Hot memory with recall equals the policy's without, step by step (streaming
 * and window: their victims do not depend on attention); and a cold tier in
 * memory or in a file gives bit-identical outputs. */
TEST(hot_memory_unchanged_and_tiers_agree) {
    static size_t without[STEPS], with[STEPS];
    static float o_mem[STEPS * L * NH * D], o_file[STEPS * L * NH * D];
    const enum kvb_policy_id ids[2] = {KVB_POLICY_STREAMING, KVB_POLICY_WINDOW};
    for (int i = 0; i < 2; i++) {
        struct rcase a = {ids[i], KVB_POS_ORIGINAL, KVB_DTYPE_F16, 0, 0, 0, false, false, 0, false};
        struct rcase b = {ids[i], KVB_POS_ORIGINAL, KVB_DTYPE_F16, 4, 1, (size_t)1 << 20, false, false, 0, false};
        rng = 12345;
        CHECK(run_recall(&a, without, NULL) == 0);
        rng = 12345;
        CHECK(run_recall(&b, with, o_mem) == 0);
        for (int t = 0; t < STEPS; t++)
            if (without[t] != with[t]) FAILF("%s step %d: hot bytes %zu with recall, %zu without", kvb_policy_name(ids[i]), t, with[t], without[t]);
        struct rcase f = b;
        f.mem = 0;
        f.file = true;
        rng = 12345;
        CHECK(run_recall(&f, NULL, o_file) == 0);
        if (memcmp(o_mem, o_file, sizeof o_mem) != 0) FAILF("%s: outputs differ between a memory and a file cold tier", kvb_policy_name(ids[i]));
    }
}

/* A cache with recall saved mid-stream (cold pages in memory or in its
 * file, areas loaded, a page staged) and continued from its image gives
 * the outputs of one that never stopped, bit for bit, for every policy. */
TEST(restored_recall_cache_continues_bit_identically) {
    static float o_run[STEPS * L * NH * D], o_restored[STEPS * L * NH * D];
    const struct rcase cases[] = {
        {KVB_POLICY_STREAMING, KVB_POS_POLICY_DEFAULT, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false}, /* capped: shadows */
        {KVB_POLICY_WINDOW, KVB_POS_ORIGINAL, KVB_DTYPE_F32, 2, 3, 0, true, false, 0, false},                          /* file only, every 3 */
        {KVB_POLICY_H2O, KVB_POS_ORIGINAL, KVB_DTYPE_Q8_0, 2, 1, 20000, true, false, 0, false},                        /* memory then file */
        {KVB_POLICY_TOVA, KVB_POS_CAPPED, KVB_DTYPE_F16, 1, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_KNORM, KVB_POS_ORIGINAL, KVB_DTYPE_Q4_0, 4, 2, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_KEYDIFF, KVB_POS_ORIGINAL, KVB_DTYPE_Q8_0, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_EXPECTED_ATTENTION, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_SCISSORHANDS, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_SNAPKV, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_PYRAMIDKV, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_ADAKV, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_LMINFINITE, KVB_POS_POLICY_DEFAULT, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
        {KVB_POLICY_BLOCK_H2O, KVB_POS_ORIGINAL, KVB_DTYPE_F16, 2, 1, (size_t)1 << 20, false, false, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int at = 70; at <= 190; at += 120) { /* past the first cold pages, and late */
            struct rcase k = cases[i];
            rng = 4242 + i;
            if (run_recall(&k, NULL, o_run)) FAILF("case %zu (%s): the uninterrupted run failed", i, kvb_policy_name(k.pid));
            k.restore_at = at;
            rng = 4242 + i;
            if (run_recall(&k, NULL, o_restored)) FAILF("case %zu (%s): the run restored at step %d failed", i, kvb_policy_name(k.pid), at);
            size_t first = 0;
            while (first < sizeof o_run / sizeof *o_run && o_run[first] == o_restored[first]) first++;
            if (first < sizeof o_run / sizeof *o_run)
                FAILF("case %zu (%s): restored at step %d, outputs differ from the uninterrupted run from step %zu", i,
                      kvb_policy_name(k.pid), at, first / (L * NH * D));
        }
}

/* Evictions from two worker threads append to one cold store (memory, then
 * its file): outputs equal the serial run's bit for bit (ThreadSanitizer
 * runs this case: make tsan). */
TEST(threaded_recall_equals_serial) {
    enum { TL = 2, TH = 4, TQ = 16, TD = 64, TSTEPS = 200 };
    static float outs[2][TSTEPS][TL][TQ * TD];
    struct kvb_cold_counts cc[2];
    for (int run = 0; run < 2; run++) {
        char *dir = make_dir();
        struct kvb_cache_params cp = kvb_cache_default_params();
        cp.n_layer = TL; cp.n_kv_head = TH; cp.head_dim = TD; cp.kv.kv_dtype = KVB_DTYPE_F16; cp.kv.block_size = 16;
        cp.rope = (struct kvb_rope){KVB_ROPE_NEOX, TD, 10000.0f, 1.0f, NULL};
        cp.kv.policy = kvb_policy_default_params(KVB_POLICY_H2O);
        cp.kv.policy.budget = 128;
        cp.kv.policy.n_sink = 4;
        cp.pool_bytes = (size_t)16 << 20;
        cp.kv.recall = (struct kvb_recall_params){4, 1, 40000, dir, KVB_RECALL_BOUNDS};
        struct kvb_cache *c;
        struct kvb_threadpool *tp = NULL;
        CHECK_OK(kvb_cache_init(NULL, &cp, &c));
        if (run) CHECK_OK(kvb_threadpool_init(2, &tp));
        rng = 777;
        for (int t = 0; t < TSTEPS; t++)
            for (int l = 0; l < TL; l++) {
                float q[TQ * TD], k[TH * TD], v[TH * TD];
                for (int i = 0; i < TQ * TD; i++) q[i] = frand();
                for (int i = 0; i < TH * TD; i++) { k[i] = frand(); v[i] = frand(); }
                CHECK_OK(kvb_cache_decode(c, l, q, TQ, k, v, outs[run][t][l], tp));
            }
        kvb_cold_counts(c->cold, &cc[run]);
        kvb_cache_free(c);
        kvb_threadpool_free(tp);
        remove_dir(dir);
    }
    CHECK(cc[1].file_pages > 0 && cc[1].mem_pages > 0);
    CHECK_EQ_INT(cc[0].file_pages + cc[0].mem_pages, cc[1].file_pages + cc[1].mem_pages);
    if (memcmp(outs[0], outs[1], sizeof outs[0]) != 0) FAILF("two threads gave different outputs than one");
}

TEST(recall_params_checked) {
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_STREAMING);
    cp.kv.recall.pages = 65;
    struct kvb_cache *c;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "recall.pages"));
    cp.kv.recall.pages = 4;
    cp.kv.pos_mode = KVB_POS_CONTIGUOUS;
    CHECK_STATUS(kvb_cache_init(NULL, &cp, &c), KVB_ERR_INVALID);
    CHECK(strstr(kvb_last_error(), "contiguous"));
    cp.kv.pos_mode = KVB_POS_POLICY_DEFAULT;
    cp.kv.max_distance = 0;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    CHECK_EQ_INT(kvb_cache_pos_mode(c), KVB_POS_ORIGINAL); /* streaming's contiguous default, with recall */
    CHECK_EQ_INT(kvb_cache_recalled(c, 0, 0, NULL, 0), 0);
    CHECK_EQ_INT(kvb_cache_recalled(c, 5, 0, NULL, 0), -1);
    kvb_cache_free(c);
}

/* A pinned token (kv.keep) never goes cold, so recall never brings it
 * back: the span's keys are the ones every query wants most, so if the
 * window policy ever evicted them they would go cold and be recalled at
 * once. Others do go cold and come back. */
TEST(pinned_span_never_goes_cold) {
    enum { KD = 8, KEEP = 8 };
    struct kvb_cache_params cp = kvb_cache_default_params();
    cp.head_dim = KD; cp.kv.kv_dtype = KVB_DTYPE_F32; cp.kv.block_size = 4;
    cp.kv.policy = kvb_policy_default_params(KVB_POLICY_WINDOW);
    cp.kv.policy.budget = 8;
    cp.kv.recall.pages = 2;
    cp.kv.recall.cold_mem_bytes = 1 << 20;
    cp.kv.keep = KEEP;
    cp.pool_bytes = 4 << 20;
    struct kvb_cache *c;
    CHECK_OK(kvb_cache_init(NULL, &cp, &c));
    unsigned st = 7u;
    int recalled_any = 0;
    for (int t = 0; t < 120; t++) {
        float q[KD], k[KD], v[KD], o[KD];
        for (int i = 0; i < KD; i++) {
            st = st * 1664525u + 1013904223u;
            const float r = (float)((st >> 8) & 0xffff) / 65536.0f - 0.5f;
            q[i] = i == 0 ? 4.0f : 0.0f;
            k[i] = t < KEEP ? (i == 0 ? 4.0f : 0.0f) : (i == 0 ? 2.0f * r + (t % 9 == 0 ? 3.0f : 0.0f) : r);
            v[i] = r;
        }
        CHECK_OK(kvb_cache_decode(c, 0, q, 1, k, v, o, NULL));
        for (int j = 0; j < KEEP && j <= t; j++) {
            struct kvb_slot_info si;
            CHECK_OK(kvb_cache_slot_info(c, 0, 0, j, &si));
            if (si.pos_original != j) FAILF("step %d: pinned position %d left the hot slots", t, j);
        }
        int32_t rec[64];
        const int nr = kvb_cache_recalled(c, 0, 0, rec, 64);
        for (int i = 0; i < nr; i++)
            if (rec[i] < KEEP) FAILF("step %d: pinned position %d was recalled (it went cold)", t, (int)rec[i]);
        recalled_any += nr > 0;
    }
    struct kvb_cache_stats cs;
    kvb_cache_get_stats(c, &cs);
    CHECK(cs.cold_pages > 0); /* the conversation did go cold... */
    CHECK(recalled_any > 0);  /* ...and came back: recall was at work */
    kvb_cache_free(c);
}

int main(void) {
    RUN(cold_store_roundtrip_memory_and_file);
    RUN(cold_file_survives_kill_9);
    RUN(hostile_cold_files_refused);
    RUN(page_bound_is_an_upper_bound);
    RUN(recalled_attention_equals_direct_reference);
    RUN(hot_memory_unchanged_and_tiers_agree);
    RUN(restored_recall_cache_continues_bit_identically);
    RUN(threaded_recall_equals_serial);
    RUN(recall_params_checked);
    RUN(pinned_span_never_goes_cold);
    return test_summary();
}
