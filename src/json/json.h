/*
 * json.h — the library's JSON values: what the Jinja interpreter
 * (src/chat/jinja.c) computes with, what the JSON Schema compiler
 * (src/grammar/json_schema.c) and the tool-call parser (src/chat/chat_parse.c)
 * read JSON into, and JSON in and out (json.c). It sits on core alone, below
 * both the grammar and the chat room, so neither reaches into the other for it.
 *
 * Everything one render (or one parse) allocates lives in one arena (struct jarena) that is
 * freed at the end, so values are plain structs with pointers into it and
 * need no reference counts. Errors inside the interpreter unwind with
 * longjmp to the render's entry point (nothing to release but the arena).
 * Limits keep untrusted templates and inputs bounded: arena bytes, output
 * bytes, nesting depth (parser, evaluator, and every recursive walk over
 * values: equality, comparison, printing, tojson), work in total (struct
 * jerr's budget: loop iterations, calls, and every byte scanned, value
 * compared or node evaluated), and wall-clock time.
 */
#ifndef KVB_JSON_H
#define KVB_JSON_H

#include "../core/core.h"

#include <setjmp.h>

/* the library's symbols all start with kvb_ (tests/test_install_cli.sh) */
#define jjson_parse kvb_jjson_parse
#define jjson_dump kvb_jjson_dump
#define jarena_alloc kvb_jarena_alloc
#define jarena_free kvb_jarena_free
#define jerr_throw kvb_jerr_throw
#define jv_str kvb_jv_str
#define jv_list_new kvb_jv_list_new
#define jv_list_push kvb_jv_list_push
#define jv_dict_new kvb_jv_dict_new
#define jv_dict_set kvb_jv_dict_set
#define jv_dict_get kvb_jv_dict_get
#define jv_equal kvb_jv_equal
#define jbuf_put kvb_jbuf_put
#define jbuf_json kvb_jbuf_json
#define jwork_check kvb_jwork_check
#define jfloat_repr kvb_jfloat_repr


enum jv_type { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_MACRO, JV_BUILTIN, JV_METHOD };

struct jlist;
struct jdict;
struct jmacro;
struct jmethod;

typedef struct jv {
    uint8_t t;   /* enum jv_type */
    bool ns;     /* JV_DICT: a namespace() (attributes may be set); JV_LIST: a tuple (printed as one) */
    size_t n;    /* JV_STR: bytes */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;       /* JV_STR (not NUL-terminated); JV_UNDEF: the name, or NULL */
        struct jlist *l;
        struct jdict *d;
        struct jmacro *m;
        int fn;              /* JV_BUILTIN */
        struct jmethod *me;
    } u;
} jv;

struct jlist {
    int32_t n, cap;
    jv *v;
};
struct jdict { /* ordered; keys compared by value */
    int32_t n, cap;
    jv *k, *v;
};

struct jchunk;
struct jarena {
    struct jchunk *head;
    size_t total, limit; /* bytes taken from the allocator, and the most allowed */
    int refused;         /* why a jbuf's growth was refused: 1 the limit, 2 the allocator (0: it was not) */
};

/* The interpreter's error channel and budget: a status, a message, and where
 * to jump; and what a render may still spend. Work is counted in units: a
 * byte scanned, copied or written, a value compared, a node evaluated, a
 * name looked up is one; a loop iteration or a call is JWORK_STEP. A zeroed
 * struct (the JSON readers of the grammar and the chat parser) has no work
 * limit and no deadline, and its walks nest at most 512 levels. */
struct jerr {
    jmp_buf jb;
    kvb_status st;
    char msg[256];
    int line;            /* the template line being evaluated, for messages (0: none) */
    int max_depth;       /* nesting a walk over values may enter (0: 512) */
    int64_t work;        /* units spent */
    int64_t max_work;    /* the most (0: no limit) */
    int64_t next_check;  /* work at which jwork_check runs next */
    int64_t deadline_ns; /* CLOCK_MONOTONIC time past which the render fails (0: none) */
    int32_t deadline_ms; /* the same, as given, for the message */
};
#define JWORK_STEP 256      /* units of one loop iteration or call */
#define JWORK_CLOCK 65536   /* units between two readings of the clock */

void *jarena_alloc(struct jarena *a, struct jerr *e, size_t n);
void jarena_free(struct jarena *a);
/* Records status and message and jumps to e->jb. */
_Noreturn void jerr_throw(struct jerr *e, kvb_status st, const char *fmt, ...) KVB_PRINTF(3, 4);

/* Past max_work or the deadline: KVB_ERR_NOMEM naming the limit (jumps). */
void jwork_check(struct jerr *e);
/* Charges units of work (cheap unless a check is due). */
static inline void jwork(struct jerr *e, int64_t units) {
    e->work += units;
    if (e->work >= e->next_check) jwork_check(e);
}

jv jv_str(struct jarena *a, struct jerr *e, const char *s, size_t n);
jv jv_list_new(struct jarena *a, struct jerr *e, int32_t cap);
void jv_list_push(struct jarena *a, struct jerr *e, jv list, jv x);
jv jv_dict_new(struct jarena *a, struct jerr *e, int32_t cap);
/* Sets key (replacing an equal key's value) */
void jv_dict_set(struct jarena *a, struct jerr *e, jv dict, jv key, jv val);
/* The value of key, or NULL */
jv *jv_dict_get(const struct jdict *d, const char *key, size_t n);
/* Python's ==, with its identity shortcut for lists and dicts. Charges e a
 * unit per value and per byte compared; nesting past e->max_depth fails
 * (KVB_ERR_NOMEM, jumps). */
bool jv_equal(struct jerr *e, jv a, jv b);

/* Python's repr of a float ("1.0", "1e+16", "0.1"); buf >= 32 bytes. */
void jfloat_repr(double f, char *buf);

/* Output bytes: the core builder (struct kvb_str, kvbound.h) under its old
 * name, growing in the arena (jbuf_put and jbuf_json set its allocator) and
 * bounded by its limit, the output limit: p, n, cap, limit, as before. Each
 * byte written is a unit of work; past the limit, or out of arena,
 * jbuf_put throws (KVB_ERR_NOMEM: "output limit of N bytes reached", or
 * the arena's message). */
#define jbuf kvb_str
void jbuf_put(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s, size_t n);
/* s[0..n) as a JSON string (kvb_str_json's flags). false when it would pass
 * b->limit (the caller throws its own message; b takes nothing more); the
 * arena's failures throw as in jbuf_put. */
bool jbuf_json(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s, size_t n, unsigned flags);

/* JSON text -> value (objects keep their key order). depth: most nesting. */
jv jjson_parse(struct jarena *a, struct jerr *e, const char *what, const char *text, size_t len, int depth);
/* Python's json.dumps(x, ensure_ascii=False, indent=indent or None,
 * separators default) as transformers' tojson filter calls it. indent < 0:
 * none. Nesting past e->max_depth fails (KVB_ERR_NOMEM). */
void jjson_dump(struct jarena *a, struct jerr *e, struct jbuf *b, jv x, int indent, int level);

/* The value of a hex digit, or -1 (string escapes of templates and JSON). */
static inline int kvb_jinja_hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

#endif
