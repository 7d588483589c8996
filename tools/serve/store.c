/*
 * store.c — the session store behind `--sessions`: a directory means
 * SQLite (DIR/sessions.sqlite), redis://HOST:PORT means Redis. Both write
 * a session in one atomic operation, so a crash leaves the previous
 * snapshot.
 */
#include "serve.h"

#include <stdio.h>
#include <string.h>

struct store *store_open(const char *where, char *err, size_t errlen) {
    if (!strncmp(where, "redis://", 8)) return store_redis_open(where, err, errlen);
    return store_sqlite_open(where, err, errlen);
}
