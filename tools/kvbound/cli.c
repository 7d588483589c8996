/* cli.c — argument parsing and logging helpers for the kvbound tool. */
#define _GNU_SOURCE
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cli_parse_i64(const char *flag, const char *value, long long lo, long long hi, long long *out) {
    if (!value || !*value) {
        fprintf(stderr, "kvbound: %s needs a number\n", flag);
        return -1;
    }
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || *end) {
        fprintf(stderr, "kvbound: %s: '%s' is not an integer\n", flag, value);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvbound: %s: %lld is out of range %lld..%lld\n", flag, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_i32(const char *flag, const char *value, int lo, int hi, int *out) {
    long long v;
    if (cli_parse_i64(flag, value, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_f32(const char *flag, const char *value, double lo, double hi, float *out) {
    if (!value || !*value) {
        fprintf(stderr, "kvbound: %s needs a number\n", flag);
        return -1;
    }
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || *end || v != v) {
        fprintf(stderr, "kvbound: %s: '%s' is not a number\n", flag, value);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvbound: %s: %g is out of range %g..%g\n", flag, v, lo, hi);
        return -1;
    }
    *out = (float)v;
    return 0;
}

static bool word_in(const char *w, const char *list) {
    const size_t n = strlen(w);
    for (const char *p = list; *p;) {
        while (*p == ' ') p++;
        const size_t k = strcspn(p, " ");
        if (k == n && k && !strncmp(p, w, n)) return true;
        p += k;
    }
    return false;
}

const char *cli_opt_value(const char *cmd, const char *opts, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (a[0] != '-' || !a[1]) {
        fprintf(stderr, "kvbound %s: unexpected argument '%s' (options start with -; see --help)\n", cmd, a);
        return NULL;
    }
    if (!word_in(a, opts)) {
        fprintf(stderr, "kvbound %s: unknown option '%s' (see --help)\n", cmd, a);
        return NULL;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "kvbound %s: %s needs a value\n", cmd, a);
        return NULL;
    }
    return argv[++*i];
}

const char *cli_need_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "kvbound: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

char *cli_read_file(const char *path, size_t max_bytes, const char *what, size_t *len) {
    const bool std_in = !strcmp(path, "-");
    FILE *f = std_in ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvbound: cannot open %s '%s': %s\n", what, path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "kvbound: %s '%s' is a directory\n", what, path);
        if (!std_in) fclose(f);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) { /* read to the end: pipes and /dev/stdin have no size */
        if (n == cap) {
            if (cap >= max_bytes) {
                fprintf(stderr, "kvbound: %s '%s' is larger than %zu MiB\n", what, path, max_bytes >> 20);
                free(buf);
                buf = NULL;
                break;
            }
            cap = cap * 2 > max_bytes ? max_bytes : cap * 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); buf = NULL; fprintf(stderr, "kvbound: out of memory reading %s '%s'\n", what, path); break; }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                fprintf(stderr, "kvbound: cannot read %s '%s': %s\n", what, path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (!std_in) fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    *len = n;
    return buf;
}

char *cli_read_prompt_file(const char *path, size_t *len) {
    char *buf = cli_read_file(path, (size_t)256 << 20, "prompt file", len);
    if (buf && *len && buf[*len - 1] == '\n') buf[--*len] = 0; /* as llama.cpp's -f */
    return buf;
}

const char *cli_dir_arg(const char *flag, const char *dir, char *buf, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n + 1 > cap) {
        fprintf(stderr, "kvbound: %s: '%s' is too long a path\n", flag, dir);
        return NULL;
    }
    memcpy(buf, dir, n);
    buf[n] = 0;
    return buf;
}

int cli_check_output_file(const char *cmd, const char *flag, const char *path) {
    struct stat sb;
    if (!*path) {
        fprintf(stderr, "kvbound %s: %s: an empty file name\n", cmd, flag);
        return -1;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "kvbound %s: %s '%s' is a directory (give a file name)\n", cmd, flag, path);
        return -1;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &sb) != 0) {
        fprintf(stderr, "kvbound %s: %s '%s': cannot use directory '%s': %s\n", cmd, flag, path, dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "kvbound %s: %s '%s': '%s' is not a directory\n", cmd, flag, path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "kvbound %s: %s '%s': directory '%s' is not writable\n", cmd, flag, path, dir);
        return -1;
    }
    return 0;
}

void cli_progress(const char *what, long long done, long long total) {
    static int tty = -1;
    if (tty < 0) tty = isatty(2);
    if (total <= 0) return;
    if (tty) {
        fprintf(stderr, "\r%s %lld/%lld", what, done, total);
        if (done >= total) fprintf(stderr, "\n");
    } else if (done >= total || done * 10 / total > (done - 1) * 10 / total) {
        fprintf(stderr, "%s %lld/%lld\n", what, done, total);
    }
}

int cli_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void cli_warn_threads(int threads) {
    if (threads > cli_cores())
        fprintf(stderr, "kvbound: warning: -t %d is more threads than the %d cores; they will only take turns\n", threads, cli_cores());
}

void cli_log_stderr(enum kvb_log_level level, const char *msg, void *user) {
    int verbose = user ? *(int *)user : 0;
    static const char *names[] = {"error", "warning", "info", "debug"};
    if ((int)level <= KVB_LOG_WARN + verbose) fprintf(stderr, "kvbound: %s: %s\n", names[level], msg);
}

void *cli_xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "kvbound: out of memory (%zu bytes for %s)\n", bytes, what);
        exit(1);
    }
    return p;
}

void *cli_xcalloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "kvbound: out of memory (%zu x %zu bytes for %s)\n", n, size, what);
        exit(1);
    }
    return p;
}

double cli_now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

const char *cpu_model_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return buf;
    char line[512], impl[32] = "", part[32] = ""; /* ARM Linux has no model name: its implementer and part ids */
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        if (strncmp(line, "model name", 10) == 0) {
            snprintf(buf, n, "%s", c);
            break;
        }
        if (!impl[0] && strncmp(line, "CPU implementer", 15) == 0) snprintf(impl, sizeof impl, "%s", c);
        if (!part[0] && strncmp(line, "CPU part", 8) == 0) snprintf(part, sizeof part, "%s", c);
    }
    if (strcmp(buf, "unknown") == 0 && impl[0]) snprintf(buf, n, "ARM implementer %s part %s", impl, part[0] ? part : "?");
    fclose(f);
    return buf;
}
