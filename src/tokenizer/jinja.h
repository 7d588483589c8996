/*
 * jinja.h — a Jinja2 interpreter for chat templates (jinja.c) and the JSON
 * reader/writer that feeds it (jinja_json.c).
 *
 * Everything one render allocates lives in one arena (struct jarena) that is
 * freed at the end, so values are plain structs with pointers into it and
 * need no reference counts. Errors inside the interpreter unwind with
 * longjmp to the render's entry point (nothing to release but the arena).
 * Limits keep untrusted templates and inputs bounded: arena bytes, output
 * bytes, nesting depth (parser, evaluator, and every recursive walk over
 * values: equality, comparison, printing, tojson), work in total (struct
 * jerr's budget: loop iterations, calls, and every byte scanned, value
 * compared or node evaluated), and wall-clock time.
 */
#ifndef KVB_JINJA_H
#define KVB_JINJA_H

#include "../core/core.h"

#include <setjmp.h>

/* the library's symbols all start with kvb_ (tests/test_install_cli.sh) */
#define jinja_render kvb_jinja_render
#define jjson_parse kvb_jjson_parse
#define jjson_dump kvb_jjson_dump
#define jjson_check kvb_jjson_check
#define jjson_simple_messages kvb_jjson_simple_messages
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

/* Growable output bytes, bounded by limit; each byte put is a unit of work. */
struct jbuf {
    char *p;
    size_t n, cap, limit;
};
void jbuf_put(struct jarena *a, struct jerr *e, struct jbuf *b, const char *s, size_t n);

/* JSON text -> value (objects keep their key order). depth: most nesting. */
jv jjson_parse(struct jarena *a, struct jerr *e, const char *what, const char *text, size_t len, int depth);
/* Python's json.dumps(x, ensure_ascii=False, indent=indent or None,
 * separators default) as transformers' tojson filter calls it. indent < 0:
 * none. Nesting past e->max_depth fails (KVB_ERR_NOMEM). */
void jjson_dump(struct jarena *a, struct jerr *e, struct jbuf *b, jv x, int indent, int level);

/* One render. Inputs are JSON texts (NULL: absent). */
struct jinja_limits {
    size_t max_output;   /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;   /* arena bytes (default 256 MiB) */
    int32_t max_depth;   /* nesting of expressions, statements, macro calls and values (default 200) */
    int64_t max_steps;   /* work in total, in steps of JWORK_STEP units: a loop iteration or call is a
                            step, and so are 256 bytes scanned or values compared (default 1,000,000) */
    int32_t deadline_ms; /* wall-clock time of one render (default 2000; < 0: none) */
};
/* Renders src (template text) with the variables of the JSON object
 * vars_json (may be NULL). *out: kvb_malloc'ed, NUL-terminated. On failure
 * the message (with the template line) is in msg, and the status is
 * KVB_ERR_INVALID (template or input error, raise_exception),
 * KVB_ERR_UNSUPPORTED (a construct outside the subset), KVB_ERR_NOMEM (a
 * limit, named in msg: output, memory, nesting, steps, deadline; or the
 * allocator). */
struct jinja_input {
    const char *src;
    size_t src_len;
    /* variables: JSON values by name (each NULL to leave undefined) */
    const char *const *names;
    const char *const *json;
    int n_vars;
    const char *vars_object; /* NULL, or a JSON object whose keys are set after names (and override them) */
    const struct jinja_limits *limits; /* NULL: defaults */
};
kvb_status jinja_render(const struct jinja_input *in, char **out, size_t *len, char *msg, size_t msg_cap);

/* Checks JSON text without keeping it: its top-level type must be `want`
 * ('[' array, '{' object, 0 any); for messages (is_messages) every item
 * must be an object with a string "role". KVB_OK, or KVB_ERR_INVALID /
 * KVB_ERR_NOMEM with the reason (naming `what`, line and column) in msg. */
kvb_status jjson_check(const char *what, const char *text, char want, bool is_messages, char *msg, size_t msg_cap);
/* The messages as role/content pairs for the signature families: string
 * contents only (a list of parts is joined from its "text" parts). *msgs and
 * the strings live in one kvb_malloc'ed block (free *block). */
kvb_status jjson_simple_messages(const char *text, struct kvb_chat_message **msgs, int32_t *n, void **block, char *msg, size_t msg_cap);

/* The value of a hex digit, or -1 (string escapes of templates and JSON). */
static inline int kvb_jinja_hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

#endif
