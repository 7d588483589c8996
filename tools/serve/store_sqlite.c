/*
 * store_sqlite.c — sessions in one SQLite file: a table of (id, blob,
 * updated). Every put is one INSERT OR REPLACE in its own transaction
 * (journal WAL, synchronous FULL): after kill -9, or a crash in the middle
 * of a write, the previous snapshot is what the next open reads.
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

static int put(struct store *st, const char *id, const void *buf, size_t len) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO sessions(id, image, updated) VALUES (?1, ?2, ?3)", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob64(q, 2, buf, (sqlite3_uint64)len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 3, (sqlite3_int64)time(NULL));
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    const int ok = rc == SQLITE_DONE;
    if (!ok) set_err(st, s->db);
    sqlite3_finalize(q);
    return ok ? 0 : -1;
}

static int get(struct store *st, const char *id, void **buf, size_t *len) {
    struct sqlite_store *s = (struct sqlite_store *)st;
    sqlite3_stmt *q = NULL;
    *buf = NULL;
    *len = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT image FROM sessions WHERE id = ?1", -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
    if (rc == SQLITE_OK) rc = sqlite3_step(q);
    int res;
    if (rc == SQLITE_ROW) {
        const int n = sqlite3_column_bytes(q, 0);
        const void *b = sqlite3_column_blob(q, 0);
        *buf = malloc(n > 0 ? (size_t)n : 1);
        if (!*buf) { snprintf(st->error, sizeof st->error, "out of memory for a %d-byte session", n); res = -1; }
        else {
            if (n > 0) memcpy(*buf, b, (size_t)n);
            *len = (size_t)n;
            res = 0;
        }
    } else if (rc == SQLITE_DONE) {
        res = 1;
    } else {
        set_err(st, s->db);
        res = -1;
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
    if (rc != SQLITE_DONE) { set_err(st, s->db); return -1; }
    return sqlite3_changes(s->db) > 0 ? 0 : 1;
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
                            "CREATE TABLE IF NOT EXISTS sessions(id TEXT PRIMARY KEY, image BLOB NOT NULL, updated INTEGER NOT NULL);",
                     NULL, NULL, &msg) != SQLITE_OK) {
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
    s->base.close = close_store;
    return &s->base;
}
