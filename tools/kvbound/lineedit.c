/*
 * lineedit.c — a small line editor for `kvbound chat` on a terminal, with
 * no library beyond termios. While a line is typed the terminal is in raw
 * mode (no echo, no line buffering, no signals from keys) and the line is
 * redrawn after each key; it is back in its own mode when the line is
 * returned, so Ctrl-C during an answer is a SIGINT again. Keys: left/right
 * (and Ctrl-B/F), backspace, Delete, home/end (and Ctrl-A/E), Ctrl-U and
 * Ctrl-K (delete to the start / the end), up/down (and Ctrl-P/N) through
 * the lines entered this session, Ctrl-L redraws, Enter returns the line.
 * Ctrl-D on an empty line is the end of input; Ctrl-C clears a line that
 * has text and, on an empty line, is the end of input too (as Ctrl-D).
 * Cursor moves step over whole UTF-8 characters (one column each).
 * A stdin or stdout that is not a terminal is read with getline, as before.
 * Type-ahead (keys pressed during an answer) is kept.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#define LE_HIST_MAX 256

void cli_lineedit_free(struct cli_lineedit *le) {
    for (int k = 0; k < le->n; k++) free(le->hist[k]);
    free(le->hist);
    memset(le, 0, sizeof *le);
}

/* The line into the history (not an empty one, nor the last one again). */
static void hist_add(struct cli_lineedit *le, const char *line) {
    if (!line[0] || (le->n && !strcmp(le->hist[le->n - 1], line))) return;
    char *c = strdup(line);
    if (!c) return;
    if (le->n == LE_HIST_MAX) { /* forget the oldest */
        free(le->hist[0]);
        memmove(le->hist, le->hist + 1, sizeof *le->hist * (size_t)(LE_HIST_MAX - 1));
        le->n--;
    }
    if (!le->hist) le->hist = calloc(LE_HIST_MAX, sizeof *le->hist);
    if (!le->hist) { free(c); return; }
    le->hist[le->n++] = c;
}

/* The line being typed. */
struct le_line {
    char *b;
    size_t n, cap, pos; /* bytes, capacity, the cursor (a byte offset) */
};

static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

static size_t chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !is_cont((unsigned char)s[i]);
    return k;
}

static void put(const char *s, size_t n) {
    while (n) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* The prompt and the line from the start of the terminal's row, the cursor at pos. */
static void redraw(const char *prompt, const struct le_line *l) {
    char tail[32];
    put("\r", 1);
    put(prompt, strlen(prompt));
    put(l->b, l->n);
    put("\x1b[K", 3);
    const size_t back = chars(l->b + l->pos, l->n - l->pos);
    if (back) put(tail, (size_t)snprintf(tail, sizeof tail, "\x1b[%zuD", back));
}

static bool set(struct le_line *l, const char *s) {
    const size_t n = strlen(s);
    if (n + 1 > l->cap) {
        char *p = realloc(l->b, n + 1);
        if (!p) return false;
        l->b = p;
        l->cap = n + 1;
    }
    memcpy(l->b, s, n + 1);
    l->n = l->pos = n;
    return true;
}

static bool insert(struct le_line *l, char c) {
    if (l->n + 2 > l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 128;
        char *p = realloc(l->b, nc);
        if (!p) return false;
        l->b = p;
        l->cap = nc;
    }
    memmove(l->b + l->pos + 1, l->b + l->pos, l->n - l->pos);
    l->b[l->pos++] = c;
    l->n++;
    l->b[l->n] = 0;
    return true;
}

/* Bytes [a, b) of the line removed, the cursor at a. */
static void cut(struct le_line *l, size_t a, size_t b) {
    memmove(l->b + a, l->b + b, l->n - b);
    l->n -= b - a;
    l->b[l->n] = 0;
    l->pos = a;
}

static size_t left_of(const struct le_line *l, size_t p) {
    while (p > 0 && is_cont((unsigned char)l->b[--p])) {}
    return p;
}

static size_t right_of(const struct le_line *l, size_t p) {
    if (p < l->n) p++;
    while (p < l->n && is_cont((unsigned char)l->b[p])) p++;
    return p;
}

static int read_byte(void) {
    unsigned char c;
    for (;;) {
        ssize_t r = read(STDIN_FILENO, &c, 1);
        if (r == 1) return c;
        if (r < 0 && errno == EINTR) continue;
        return -1;
    }
}

/* An escape sequence after ESC: 'A'..'D', 'H', 'F' for the arrows, home and
 * end, '3' for Delete; 0 for one not handled. */
static int read_escape(void) {
    int c = read_byte();
    if (c != '[' && c != 'O') return 0;
    int d = read_byte();
    if (d >= '0' && d <= '9') { /* ESC [ n ~ */
        int e = read_byte();
        if (e != '~') {
            while (e >= 0 && e != '~' && !(e >= 'A' && e <= 'Z')) e = read_byte(); /* skip ESC [ 1 ; 5 C and the like */
            return 0;
        }
        return d == '1' || d == '7' ? 'H' : d == '4' || d == '8' ? 'F' : d == '3' ? '3' : 0;
    }
    return d;
}

ssize_t cli_lineedit_read(struct cli_lineedit *le, const char *prompt, char **line, size_t *cap) {
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) { /* a pipe, a file: as before */
        put(prompt, strlen(prompt));
        ssize_t len = getline(line, cap, stdin);
        while (len > 0 && ((*line)[len - 1] == '\n' || (*line)[len - 1] == '\r')) (*line)[--len] = 0;
        return len;
    }
    struct termios old, raw;
    if (tcgetattr(STDIN_FILENO, &old) != 0) return -1;
    raw = old;
    raw.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
    raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
    raw.c_cc[VMIN] = 1;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) != 0) return -1;
    struct le_line l = {0};
    ssize_t ret = -1;
    int h = le->n; /* the history entry shown; le->n: the line being typed */
    char *typed = NULL; /* the line being typed, while the history is shown */
    if (!set(&l, "")) goto out;
    redraw(prompt, &l);
    for (;;) {
        int c = read_byte();
        if (c < 0) break;
        if (c == '\r' || c == '\n') {
            put("\r\n", 2);
            ret = (ssize_t)l.n;
            break;
        }
        if (c == 4) { /* Ctrl-D: end of input on an empty line, else delete under the cursor */
            if (!l.n) { put("\r\n", 2); break; }
            if (l.pos < l.n) cut(&l, l.pos, right_of(&l, l.pos));
        } else if (c == 3) { /* Ctrl-C: clear the line; on an empty line, end of input */
            if (!l.n) { put("^C\r\n", 4); break; }
            put("^C\r\n", 4);
            l.n = l.pos = 0;
            l.b[0] = 0;
            h = le->n;
        } else if (c == 127 || c == 8) { /* backspace */
            if (l.pos) cut(&l, left_of(&l, l.pos), l.pos);
        } else if (c == 1) l.pos = 0;                                        /* Ctrl-A */
        else if (c == 5) l.pos = l.n;                                        /* Ctrl-E */
        else if (c == 2) l.pos = left_of(&l, l.pos);                         /* Ctrl-B */
        else if (c == 6) l.pos = right_of(&l, l.pos);                        /* Ctrl-F */
        else if (c == 21) cut(&l, 0, l.pos);                                 /* Ctrl-U */
        else if (c == 11) { l.n = l.pos; l.b[l.n] = 0; }                     /* Ctrl-K */
        else if (c == 12) put("\x1b[H\x1b[2J", 7);                           /* Ctrl-L */
        else if (c == 16 || c == 14 || c == 27) {                           /* history, or an escape sequence */
            int k = c == 16 ? 'A' : c == 14 ? 'B' : read_escape();
            if (k == 'C') l.pos = right_of(&l, l.pos);
            else if (k == 'D') l.pos = left_of(&l, l.pos);
            else if (k == 'H') l.pos = 0;
            else if (k == 'F') l.pos = l.n;
            else if (k == '3' && l.pos < l.n) cut(&l, l.pos, right_of(&l, l.pos));
            else if ((k == 'A' && h > 0) || (k == 'B' && h < le->n)) {
                if (h == le->n) { free(typed); typed = strdup(l.b); }
                h += k == 'A' ? -1 : 1;
                if (!set(&l, h < le->n ? le->hist[h] : typed ? typed : "")) break;
            }
        } else if (c >= 32 || c == '\t') {
            if (!insert(&l, (char)c)) break;
        }
        redraw(prompt, &l);
    }
    if (ret >= 0) {
        hist_add(le, l.b);
        if ((size_t)ret + 1 > *cap) {
            char *p = realloc(*line, (size_t)ret + 1);
            if (!p) { ret = -2; goto out; }
            *line = p;
            *cap = (size_t)ret + 1;
        }
        memcpy(*line, l.b, (size_t)ret + 1);
    }
out:
    tcsetattr(STDIN_FILENO, TCSANOW, &old);
    free(l.b);
    free(typed);
    return ret;
}
