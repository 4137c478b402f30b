/* minfer command line: shared helpers. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int g_quiet = 0;
static char g_cli_error[512];  /* cli_error's message, until fail_status prints it */

int fail_status(minfer_status st, const char* what) {
    fprintf(stderr, "minfer: %s: %s: %s\n", what, minfer_status_string(st), g_cli_error[0] ? g_cli_error : minfer_last_error());
    g_cli_error[0] = '\0';
    return 1;
}

minfer_status cli_error(minfer_status st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_cli_error, sizeof g_cli_error, fmt, ap);
    va_end(ap);
    return st;
}

int parse_u64(const char* s, uint64_t* out) {
    char* end = NULL;
    unsigned long long v;
    if (!s || *s < '0' || *s > '9') return 0; /* strtoull would skip spaces and take a sign */
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || !end || *end != '\0') return 0;
    *out = (uint64_t)v;
    return 1;
}

int usage_error(const char* cmd, const char* msg) {
    fprintf(stderr, "minfer %s: %s (see 'minfer %s --help')\n", cmd, msg, cmd);
    return 2;
}

/* Progress on stderr, only when it is a terminal and --quiet was not given. */
static int progress(const char* stage, uint64_t done, uint64_t total, void* user) {
    (void)user;
    if (total == 0) return 0;
    fprintf(stderr, "\r%s: %5.1f%%", stage, 100.0 * (double)done / (double)total);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
    return 0;
}

static void log_to_stderr(minfer_log_level level, const char* message, void* user) {
    static const char* const names[] = {"", "error", "warn", "info", "debug"};
    (void)user;
    fprintf(stderr, "minfer [%s] %s\n", names[level >= 1 && level <= 4 ? level : 0], message);
}

void setup_reporting(void) {
    if (!g_quiet && isatty(STDERR_FILENO)) minfer_set_progress_callback(progress, NULL);
    if (g_quiet) minfer_set_option(NULL, "log_level", "error");
    minfer_set_log_callback(log_to_stderr, NULL);
}

void human_bytes(uint64_t n, char* buf, size_t cap) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
}

void format_vram(const minfer_vram* v, char* buf, size_t cap) {
    char w[32], c[32], k[32], s[32], t[32];
    human_bytes(v->weights, w, sizeof w);
    human_bytes(v->w16_cache, c, sizeof c);
    human_bytes(v->kv_cache, k, sizeof k);
    human_bytes(v->scratch, s, sizeof s);
    human_bytes(v->weights + v->w16_cache + v->kv_cache + v->scratch, t, sizeof t);
    snprintf(buf, cap, "weights %s, f16 cache %s, KV cache %s, scratch %s, total %s", w, c, k, s, t);
}

int is_help(const char* a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

int split_option(char* pair, const char** keys, const char** values, size_t* n) {
    char* eq = strchr(pair, '=');
    if (!eq || eq == pair) return 1;
    if (*n >= MAX_OPTIONS + 1) return 2;
    *eq = '\0';
    keys[*n] = pair;
    values[*n] = eq + 1;
    ++*n;
    return 0;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

char* read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    char* buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) return NULL;
    for (;;) {
        size_t got;
        if (n + 4096 + 1 > cap) {
            char* grown;
            cap = cap ? cap * 2 : 65536;
            grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = grown;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}
