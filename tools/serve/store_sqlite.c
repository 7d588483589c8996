/*
 * store_sqlite.c — sessions in one SQLite file: a table of (id, blob,
 * updated, version). Every put is one statement in its own transaction
 * (journal WAL, synchronous FULL): after kill -9, or a crash in the middle
 * of a write, the previous snapshot is what the next open reads. A put is
 * conditional on the version read: an INSERT OR IGNORE for a new session,
 * an UPDATE ... WHERE version = the one read otherwise; no row changed is
 * a conflict (another process wrote it meanwhile). A file from before
 * versions gains the column, its rows at version 0. The health probe
 * writes one row of a table of its own (kvbound_probe), waiting 250 ms at
 * most for a lock.
 *
 * Checkpoints (implicit sessions) are a table of their own, kvbound_checkpoints
 * (key, image, bytes, used: the wall clock's seconds of its last use; a
 * completion's also grp and ntok, listed by grp). A
 * put is one transaction: the row, then the rows unused past the TTL, then,
 * least recently used first, the rows past the count and past the bytes (a
 * running sum over the rows newest first). A read takes a row not expired
 * and marks it used.
 */
#include "serve.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct sqlite_store {
    struct store base;
    sqlite3 *db;
};

static void set_err(struct store *s, sqlite3 *db) { snprintf(s->error, sizeof s->error, "sqlite: %s", sqlite3_errmsg(db)); }

/* One statement that changes at most one row, stepped; SQLITE_DONE or the
 * failure (with its message in the store). */
static int exec_changes(struct sqlite_store *s, sqlite3_stmt *q, int rc) {
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    if (rc != SQLITE_DONE) set_err(&s->base, s->db);
    sqlite3_finalize(q);
    return rc;
}

/* A row's first column (a blob) copied into *buf (malloc); what names it in the error. */
static int column_blob(struct store *st, sqlite3_stmt *q, const char *what, void **buf, size_t *len) {
    const int n = sqlite3_column_bytes(q, 0);
    const void *b = sqlite3_column_blob(q, 0);
    *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!*buf) {
        snprintf(st->error, sizeof st->error, "out of memory for a %d-byte %s", n, what);
        return STORE_ERROR;
    }
    if (n > 0) memcpy(*buf, b, (size_t)n);
    *len = (size_t)n;
    return STORE_OK;
}

static int put(struct store *st, const char *id, const void *buf, size_t len, int64_t expect, int64_t *version) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    int rc;
    if (expect == STORE_ABSENT) { /* a new session: only if no one stored it meanwhile */
        rc = sqlite3_prepare_v2(s->db, "INSERT OR IGNORE INTO sessions(id, image, updated, version) VALUES (?1, ?2, ?3, 1)", -1, &q, NULL);
    } else {
        rc = sqlite3_prepare_v2(s->db, "UPDATE sessions SET image = ?2, updated = ?3, version = version + 1 WHERE id = ?1 AND version = ?4", -1, &q,
                                NULL);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 4, (sqlite3_int64)expect);
    }
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob64(q, 2, buf, (sqlite3_uint64)len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 3, (sqlite3_int64)time(NULL));
    if (exec_changes(s, q, rc) != SQLITE_DONE) return STORE_ERROR;
    if (sqlite3_changes(s->db) != 1) {
        snprintf(st->error, sizeof st->error, "session '%s' is at another version than the one read", id);
        return STORE_CONFLICT;
    }
    *version = expect == STORE_ABSENT ? 1 : expect + 1;
    return STORE_OK;
}

static int get(struct store *st, const char *id, void **buf, size_t *len, int64_t *version) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    *buf = NULL;
    *len = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT image, version FROM sessions WHERE id = ?1", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    int res;
    if (rc == SQLITE_ROW) {
        *version = (int64_t)sqlite3_column_int64(q, 1);
        res = column_blob(st, q, "session", buf, len);
    } else if (rc == SQLITE_DONE) {
        res = STORE_NOT_FOUND;
    } else {
        set_err(st, s->db);
        res = STORE_ERROR;
    }
    sqlite3_finalize(q);
    return res;
}

static int del(struct store *st, const char *id) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(s->db, "DELETE FROM sessions WHERE id = ?1", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) { set_err(st, s->db); return STORE_ERROR; }
    return sqlite3_changes(s->db) > 0 ? STORE_OK : STORE_NOT_FOUND;
}

/* ---- checkpoints ---- */

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One statement, its named parameters those it has of :key, :image, :now
 * and :n, stepped: SQLITE_DONE or the failure (its message in the store). */
static int ck_exec_grp(struct sqlite_store *s, const char *sql, const char *key, const char *grp, const void *buf, size_t len, double now, int64_t n) {
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &q, NULL);
    int at;
    if (rc == SQLITE_OK && (at = sqlite3_bind_parameter_index(q, ":key"))) rc = sqlite3_bind_text(q, at, key, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK && (at = sqlite3_bind_parameter_index(q, ":grp")))
        rc = grp ? sqlite3_bind_text(q, at, grp, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(q, at);
    if (rc == SQLITE_OK && (at = sqlite3_bind_parameter_index(q, ":image"))) rc = sqlite3_bind_blob64(q, at, buf, (sqlite3_uint64)len, SQLITE_STATIC);
    if (rc == SQLITE_OK && (at = sqlite3_bind_parameter_index(q, ":now"))) rc = sqlite3_bind_double(q, at, now);
    if (rc == SQLITE_OK && (at = sqlite3_bind_parameter_index(q, ":n"))) rc = sqlite3_bind_int64(q, at, (sqlite3_int64)n);
    return exec_changes(s, q, rc);
}

static int ck_exec(struct sqlite_store *s, const char *sql, const char *key, const void *buf, size_t len, double now, int64_t n) {
    return ck_exec_grp(s, sql, key, NULL, buf, len, now, n);
}

static int cstats(struct store *st, int64_t *count, int64_t *bytes) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    int res = STORE_ERROR;
    if (sqlite3_prepare_v2(s->db, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM kvbound_checkpoints", -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
        *count = sqlite3_column_int64(q, 0);
        *bytes = sqlite3_column_int64(q, 1);
        res = STORE_OK;
    } else {
        set_err(st, s->db);
    }
    sqlite3_finalize(q);
    return res;
}

static int cput(struct store *st, const char *key, const char *grp, int32_t ntok, const void *buf, size_t len, const struct ckpt_limits *l,
                int64_t *count, int64_t *bytes) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    const double now = wall_now();
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) { set_err(st, s->db); return STORE_ERROR; }
    bool ok = ck_exec_grp(s, "INSERT OR REPLACE INTO kvbound_checkpoints(key, image, bytes, used, grp, ntok) VALUES (:key, :image, length(:image), :now,"
                          " :grp, :n)", key, grp, buf, len, now, ntok) == SQLITE_DONE;
    ok = ok && ck_exec(s, "DELETE FROM kvbound_checkpoints WHERE used < :now - :n", NULL, NULL, 0, now, l->ttl_s) == SQLITE_DONE;
    ok = ok && ck_exec(s, "DELETE FROM kvbound_checkpoints WHERE key IN (SELECT key FROM kvbound_checkpoints ORDER BY used DESC, key LIMIT -1 OFFSET :n)",
                       NULL, NULL, 0, now, l->max_count) == SQLITE_DONE;
    ok = ok && ck_exec(s, "DELETE FROM kvbound_checkpoints WHERE key IN (SELECT key FROM (SELECT key, SUM(bytes) OVER (ORDER BY used DESC, key"
                          " ROWS UNBOUNDED PRECEDING) AS upto FROM kvbound_checkpoints) WHERE upto > :n)",
                       NULL, NULL, 0, now, l->max_bytes) == SQLITE_DONE;
    ok = ok && cstats(st, count, bytes) == STORE_OK;
    if (ok && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return STORE_OK;
    if (ok) set_err(st, s->db);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return STORE_ERROR;
}

static int cget(struct store *st, const char *key, int64_t ttl_s, void **buf, size_t *len) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    const double now = wall_now();
    sqlite3_stmt *q = NULL;
    *buf = NULL;
    *len = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT image FROM kvbound_checkpoints WHERE key = ?1 AND used >= ?2", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, key, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(q, 2, now - (double)ttl_s);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    int res = STORE_ERROR;
    if (rc == SQLITE_ROW) {
        res = column_blob(st, q, "checkpoint", buf, len);
    } else if (rc == SQLITE_DONE) {
        res = STORE_NOT_FOUND;
    } else {
        set_err(st, s->db);
    }
    sqlite3_finalize(q);
    if (res == STORE_OK) /* its last use: a failure here costs only its place in the order */
        ck_exec(s, "UPDATE kvbound_checkpoints SET used = :now WHERE key = :key", key, NULL, 0, now, 0);
    return res;
}

static int clist(struct store *st, const char *grp, int max, char (*keys)[SERVE_CKEY], int32_t *ntok, int *n) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    *n = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT key, ntok FROM kvbound_checkpoints WHERE grp = ?1 ORDER BY used DESC LIMIT ?2", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, grp, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(q, 2, max);
    while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const unsigned char *k = sqlite3_column_text(q, 0);
        if (k && strlen((const char *)k) == SERVE_CKEY - 1 && *n < max) {
            memcpy(keys[*n], k, SERVE_CKEY);
            ntok[(*n)++] = (int32_t)sqlite3_column_int(q, 1);
        }
        rc = SQLITE_OK;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) { set_err(st, s->db); return STORE_ERROR; }
    return STORE_OK;
}

static int cdel(struct store *st, const char *key) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    if (ck_exec(s, "DELETE FROM kvbound_checkpoints WHERE key = :key", key, NULL, 0, 0, 0) != SQLITE_DONE) return STORE_ERROR;
    return sqlite3_changes(s->db) > 0 ? STORE_OK : STORE_NOT_FOUND;
}

/* A file written before sessions had versions gains the column (its rows
 * at version 0). false with *msg (sqlite3_free) on failure. */
static bool has_version_column(sqlite3 *db, char **msg) {
    sqlite3_stmt *q = NULL;
    bool found = false;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info('sessions') WHERE name = 'version'", -1, &q, NULL) == SQLITE_OK)
        found = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return found || sqlite3_exec(db, "ALTER TABLE sessions ADD COLUMN version INTEGER NOT NULL DEFAULT 0", NULL, NULL, msg) == SQLITE_OK;
}

static int64_t count(struct store *st) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    int64_t n = -1;
    if (sqlite3_prepare_v2(s->db, "SELECT COUNT(*) FROM sessions", -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
        n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return n;
}

static int probe(struct store *st) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_busy_timeout(s->db, 250);
    char *msg = NULL;
    const int rc = sqlite3_exec(s->db, "INSERT OR REPLACE INTO kvbound_probe(k, t) VALUES (1, strftime('%s','now'))", NULL, NULL, &msg);
    if (rc != SQLITE_OK) snprintf(st->error, sizeof st->error, "sqlite: %s", msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    sqlite3_busy_timeout(s->db, 5000);
    return rc == SQLITE_OK ? STORE_OK : STORE_ERROR;
}

static void close_store(struct store *st) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_close(s->db);
    free(s);
}

struct store *store_sqlite_open(const char *dir, char *err, size_t errlen) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (mkdir(dir, 0700) != 0) { snprintf(err, errlen, "--sessions %s: cannot create the directory: %s", dir, strerror(errno)); return NULL; }
    } else if (!S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "--sessions %s: not a directory (give a directory, or redis://HOST:PORT)", dir);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/sessions.sqlite", dir);
    struct sqlite_store *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return NULL; }
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", path, s->db ? sqlite3_errmsg(s->db) : "cannot open");
        sqlite3_close(s->db);
        free(s);
        return NULL;
    }
    char *msg = NULL;
    if (sqlite3_exec(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;"
                            "CREATE TABLE IF NOT EXISTS sessions(id TEXT PRIMARY KEY, image BLOB NOT NULL, updated INTEGER NOT NULL,"
                            " version INTEGER NOT NULL DEFAULT 0);"
                            "CREATE TABLE IF NOT EXISTS kvbound_probe(k INTEGER PRIMARY KEY, t INTEGER NOT NULL);"
                            "CREATE TABLE IF NOT EXISTS kvbound_checkpoints(key TEXT PRIMARY KEY, image BLOB NOT NULL, bytes INTEGER NOT NULL,"
                            " used REAL NOT NULL, grp TEXT, ntok INTEGER);"
                            "CREATE INDEX IF NOT EXISTS kvbound_checkpoints_used ON kvbound_checkpoints(used);"
                            "CREATE INDEX IF NOT EXISTS kvbound_checkpoints_grp ON kvbound_checkpoints(grp, used);",
                     NULL, NULL, &msg) != SQLITE_OK ||
        !has_version_column(s->db, &msg)) {
        snprintf(err, errlen, "%s: %s", path, msg ? msg : "cannot create the sessions table");
        sqlite3_free(msg);
        sqlite3_close(s->db);
        free(s);
        return NULL;
    }
    s->base.kind = "sqlite";
    s->base.put = put;
    s->base.get = get;
    s->base.del = del;
    s->base.count = count;
    s->base.cput = cput;
    s->base.cget = cget;
    s->base.clist = clist;
    s->base.cdel = cdel;
    s->base.cstats = cstats;
    s->base.probe = probe;
    s->base.close = close_store;
    return &s->base;
}
