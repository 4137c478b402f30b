/*
 * minfer - command line for the minfer inference engine. C99 against include/minfer.h only.
 *
 *   minfer info MODEL.gguf [--meta] [--tensors]
 *   minfer synth --preset NAME [--mix f32|f16|bf16] [--seed N] -o OUT.gguf
 *   minfer bench -m MODEL.gguf [-p 512] [-n 128] [-r 3] [--option KEY=VALUE]...
 *   minfer options [--markdown]
 *   minfer version
 *
 * Errors print the status name and the library's message on stderr and exit 1; usage errors exit 2.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "minfer.h"

static int g_quiet = 0;

static int fail_status(minfer_status st, const char* what) {
    fprintf(stderr, "minfer: %s: %s: %s\n", what, minfer_status_string(st), minfer_last_error());
    return 1;
}

static int usage_error(const char* cmd, const char* msg) {
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

static void setup_reporting(void) {
    if (!g_quiet && isatty(STDERR_FILENO)) minfer_set_progress_callback(progress, NULL);
    if (g_quiet) minfer_set_option(NULL, "log_level", "error");
    minfer_set_log_callback(log_to_stderr, NULL);
}

static void human_bytes(uint64_t n, char* buf, size_t cap) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
}

static int is_help(const char* a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

#define MAX_OPTIONS 32

/* Splits "key=value" in place into the option arrays. Returns 0, 1 for a malformed pair, 2 when full. */
static int split_option(char* pair, const char** keys, const char** values, size_t* n) {
    char* eq = strchr(pair, '=');
    if (!eq || eq == pair) return 1;
    if (*n >= MAX_OPTIONS + 1) return 2;
    *eq = '\0';
    keys[*n] = pair;
    values[*n] = eq + 1;
    ++*n;
    return 0;
}

/* ---- info ------------------------------------------------------------------------------------ */

static const char* const INFO_HELP =
    "usage: minfer info MODEL.gguf [--meta] [--tensors] [--option KEY=VALUE]... [--quiet]\n"
    "\n"
    "Validates a GGUF model and prints its architecture, hyperparameters, tensor count and bytes by type,\n"
    "and total size. --meta also prints every metadata key (arrays by length); --tensors lists each tensor.\n"
    "--option sets a library option for this model (repeatable; see 'minfer options'); device defaults to\n"
    "cpu here. A file that fails validation prints the status and the reason on stderr and exits 1.\n";

static void print_meta(const minfer_model* m) {
    size_t n = minfer_model_meta_count(m), i;
    char small[256];
    printf("\nmetadata (%zu keys):\n", n);
    for (i = 0; i < n; ++i) {
        const char* key = minfer_model_meta_key(m, i);
        minfer_meta_type type, elem;
        uint64_t len = 0;
        size_t need = 0;
        minfer_status st;
        if (minfer_model_meta_type(m, key, &type, &elem, &len) != MINFER_OK) continue;
        if (type == MINFER_META_ARRAY) {
            printf("  %-48s array[%" PRIu64 "]\n", key, len);
            continue;
        }
        st = minfer_model_meta_string(m, key, small, sizeof small, &need);
        if (st == MINFER_OK) {
            /* Keep one key per line: show a multi-line value (a chat template) by its first line. */
            char* nl = strchr(small, '\n');
            if (nl) {
                *nl = '\0';
                printf("  %-48s %s ... (%zu bytes)\n", key, small, need);
            } else {
                printf("  %-48s %s\n", key, small);
            }
        } else if (st == MINFER_ERR_BUFFER_TOO_SMALL) {
            printf("  %-48s (string of %zu bytes)\n", key, need);
        }
    }
}

static int cmd_info(int argc, char** argv) {
    const char* path = NULL;
    int meta = 0, tensors = 0, i;
    minfer_model* m = NULL;
    minfer_status st;
    const char* keys[MAX_OPTIONS + 1] = {"device"};
    const char* values[MAX_OPTIONS + 1] = {"cpu"};
    size_t n_options = 1;
    for (i = 0; i < argc; ++i) {
        if (is_help(argv[i])) {
            fputs(INFO_HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--option") == 0) {
            int rc = i + 1 < argc ? split_option(argv[++i], keys, values, &n_options) : 1;
            if (rc != 0) return usage_error("info", rc == 1 ? "--option expects KEY=VALUE" : "too many --option flags");
        } else if (strcmp(argv[i], "--meta") == 0) {
            meta = 1;
        } else if (strcmp(argv[i], "--tensors") == 0) {
            tensors = 1;
        } else if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
            g_quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage_error("info", "unknown flag");
        } else if (!path) {
            path = argv[i];
        } else {
            return usage_error("info", "more than one model given");
        }
    }
    if (!path) return usage_error("info", "no model given");
    setup_reporting();

    /* Inspecting a file never needs a GPU. */
    st = minfer_open_with_options(path, keys, values, n_options, &m);
    if (st != MINFER_OK) return fail_status(st, "info");

    {
        char buf[64], buf2[64];
        int32_t types[64];
        size_t n_types = 0, t, k, n_tensors = minfer_model_tensor_count(m);
        uint64_t total = 0;
        human_bytes(minfer_model_file_size(m), buf, sizeof buf);
        printf("file:           %s (%" PRIu64 " bytes, %s)\n", path, minfer_model_file_size(m), buf);
        printf("name:           %s\n", minfer_model_name(m)[0] ? minfer_model_name(m) : "(none)");
        printf("architecture:   %s\n", minfer_model_architecture(m));
        printf("device:         %s\n", minfer_model_device(m));
        printf("parameters:     %" PRIu64 " (%.3f B)\n", minfer_model_n_params(m), (double)minfer_model_n_params(m) / 1e9);
        printf("vocabulary:     %d\n", minfer_model_n_vocab(m));
        printf("context:        %d (training)\n", minfer_model_n_ctx_train(m));
        printf("embedding:      %d\n", minfer_model_n_embd(m));
        printf("layers:         %d\n", minfer_model_n_layer(m));
        printf("heads:          %d (kv %d, head_dim %d)\n", minfer_model_n_head(m), minfer_model_n_head_kv(m),
               minfer_model_head_dim(m));
        printf("feed-forward:   %d\n", minfer_model_n_ff(m));
        printf("rope base:      %g\n", minfer_model_rope_freq_base(m));
        printf("rms norm eps:   %g\n", minfer_model_rms_norm_eps(m));
        printf("output:         %s\n", minfer_model_tied_output(m) ? "tied to token_embd.weight" : "output.weight");
        printf("tensors:        %zu\n", n_tensors);

        minfer_model_tensor_types(m, types, sizeof types / sizeof types[0], &n_types);
        if (n_types > sizeof types / sizeof types[0]) n_types = sizeof types / sizeof types[0];
        printf("\n  %-8s %8s %16s %12s\n", "type", "tensors", "bytes", "");
        for (t = 0; t < n_types; ++t) {
            size_t count = 0;
            uint64_t bytes = 0;
            for (k = 0; k < n_tensors; ++k) {
                int32_t type;
                uint64_t nb;
                if (minfer_model_tensor_info(m, k, NULL, &type, NULL, NULL, NULL, &nb) == MINFER_OK && type == types[t]) {
                    ++count;
                    bytes += nb;
                }
            }
            total += bytes;
            human_bytes(bytes, buf2, sizeof buf2);
            printf("  %-8s %8zu %16" PRIu64 " %12s\n", minfer_type_name(types[t]), count, bytes, buf2);
        }
        human_bytes(total, buf2, sizeof buf2);
        printf("  %-8s %8zu %16" PRIu64 " %12s\n", "total", n_tensors, total, buf2);

        if (tensors) {
            printf("\ntensors:\n");
            for (k = 0; k < n_tensors; ++k) {
                const char* name;
                int32_t type, nd, d;
                int64_t dims[4];
                uint64_t off, nb;
                minfer_model_tensor_info(m, k, &name, &type, &nd, dims, &off, &nb);
                printf("  %-32s %-6s [", name, minfer_type_name(type));
                for (d = 0; d < nd; ++d) printf(d ? ", %" PRId64 : "%" PRId64, dims[d]);
                printf("] @%" PRIu64 " %" PRIu64 " bytes\n", off, nb);
            }
        }
        if (meta) print_meta(m);
    }
    minfer_close(m);
    return 0;
}

/* ---- synth ----------------------------------------------------------------------------------- */

static const char* const SYNTH_HELP =
    "usage: minfer synth --preset NAME [--mix MIX] [--seed N] -o OUT.gguf [--quiet]\n"
    "       minfer synth --list\n"
    "\n"
    "Writes a Qwen2/Qwen3 GGUF model of a named shape with random weights (normal, std 0.02; norms near 1)\n"
    "and a built-in byte-level vocabulary. MIX is the type of every matmul weight: f32, f16 (default),\n"
    "bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K; or q4_K_M: q4_K with q6_K for the\n"
    "output and for attn_v/ffn_down in some layers, as common files do. Norms and biases stay f32; K-quant\n"
    "rows that are not whole 256-element super-blocks fall back to q4_0/q5_0/q5_1/q8_0 as converters do.\n"
    "The same seed gives the same file. --list prints the presets.\n";

static int cmd_synth(int argc, char** argv) {
    const char *preset = NULL, *mix = "f16", *out = NULL;
    uint64_t seed = 1;
    int i;
    minfer_status st;
    for (i = 0; i < argc; ++i) {
        const char* a = argv[i];
        const char* val = i + 1 < argc ? argv[i + 1] : NULL;
        if (is_help(a)) {
            fputs(SYNTH_HELP, stdout);
            return 0;
        } else if (strcmp(a, "--list") == 0) {
            size_t k, n = minfer_synth_preset_count();
            for (k = 0; k < n; ++k) printf("%s\n", minfer_synth_preset_name(k));
            return 0;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            g_quiet = 1;
        } else if (strcmp(a, "--preset") == 0 || strcmp(a, "--mix") == 0 || strcmp(a, "--seed") == 0 || strcmp(a, "-o") == 0) {
            if (!val) return usage_error("synth", "a flag is missing its value");
            if (strcmp(a, "--preset") == 0) {
                preset = val;
            } else if (strcmp(a, "--mix") == 0) {
                mix = val;
            } else if (strcmp(a, "-o") == 0) {
                out = val;
            } else {
                char* end = NULL;
                seed = strtoull(val, &end, 10);
                if (!end || *end != '\0' || val[0] == '-') return usage_error("synth", "--seed expects a non-negative integer");
            }
            ++i;
        } else {
            return usage_error("synth", "unknown argument");
        }
    }
    if (!preset) return usage_error("synth", "--preset is required");
    if (!out) return usage_error("synth", "-o OUT.gguf is required");
    setup_reporting();
    st = minfer_synth(out, preset, mix, seed);
    if (st != MINFER_OK) return fail_status(st, "synth");
    if (!g_quiet) fprintf(stderr, "wrote %s (preset %s, mix %s, seed %" PRIu64 "; random weights)\n", out, preset, mix, seed);
    return 0;
}

/* ---- bench ----------------------------------------------------------------------------------- */

static const char* const BENCH_HELP =
    "usage: minfer bench -m MODEL.gguf [-p N] [-n N] [-r N] [--option KEY=VALUE]... [--quiet]\n"
    "\n"
    "Measures prefill (pp: N prompt tokens in one call, default 512) and decode (tg: N greedy decode\n"
    "steps after the prompt, default 128) in tokens per second, repeated -r times (default 3) on a fresh\n"
    "context, after one untimed warm-up run. Prints a markdown table: mean and standard deviation over the\n"
    "repetitions, with the model, backend and the options in force. Prompt tokens are random ids (fixed\n"
    "seed); -p 0 or -n 0 skips that test.\n";

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mean_sd(const double* v, int n, double* mean, double* sd) {
    double s = 0, q = 0;
    int i;
    for (i = 0; i < n; ++i) s += v[i];
    *mean = s / n;
    for (i = 0; i < n; ++i) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

/* One repetition: prefill n_prompt tokens, then n_gen decode steps. Rates in tokens per second. */
static minfer_status bench_once(minfer_context* ctx, const int32_t* prompt, int n_prompt, int n_gen, double* pp, double* tg) {
    minfer_status st = minfer_context_reset(ctx);
    double t0, t1;
    int i;
    int32_t tok;
    if (st != MINFER_OK) return st;
    t0 = now_seconds();
    st = minfer_prefill(ctx, prompt, (size_t)(n_prompt > 0 ? n_prompt : 1));
    t1 = now_seconds();
    if (st != MINFER_OK) return st;
    *pp = (n_prompt > 0 ? n_prompt : 1) / (t1 - t0);
    t0 = now_seconds();
    for (i = 0; i < n_gen && st == MINFER_OK; ++i) st = minfer_decode(ctx, &tok);
    t1 = now_seconds();
    *tg = n_gen > 0 ? n_gen / (t1 - t0) : 0.0;
    return st;
}

static int cmd_bench(int argc, char** argv) {
    const char* path = NULL;
    long n_prompt = 512, n_gen = 128, reps = 3;
    const char* keys[MAX_OPTIONS + 1];
    const char* values[MAX_OPTIONS + 1];
    size_t n_options = 1, k;
    char ctx_len[32], threads[32], device[32], buf[64];
    int i, r;
    minfer_model* m = NULL;
    minfer_context* ctx = NULL;
    minfer_status st;
    int32_t* prompt;
    double pp[64], tg[64], mean, sd;
    for (i = 0; i < argc; ++i) {
        const char* a = argv[i];
        if (is_help(a)) {
            fputs(BENCH_HELP, stdout);
            return 0;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            g_quiet = 1;
        } else if (strcmp(a, "--option") == 0) {
            int rc = i + 1 < argc ? split_option(argv[++i], keys, values, &n_options) : 1;
            if (rc != 0) return usage_error("bench", rc == 1 ? "--option expects KEY=VALUE" : "too many --option flags");
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (i + 1 >= argc) return usage_error("bench", "-m expects a model path");
            path = argv[++i];
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "-n") == 0 || strcmp(a, "-r") == 0) {
            char* end = NULL;
            long v;
            if (i + 1 >= argc) return usage_error("bench", "a flag is missing its value");
            v = strtol(argv[++i], &end, 10);
            if (!end || *end != '\0' || v < 0 || v > 1000000) return usage_error("bench", "-p, -n and -r expect a count");
            if (a[1] == 'p') n_prompt = v;
            else if (a[1] == 'n') n_gen = v;
            else reps = v;
        } else {
            return usage_error("bench", "unknown argument");
        }
    }
    if (!path) return usage_error("bench", "-m MODEL.gguf is required");
    if (reps < 1 || reps > 64) return usage_error("bench", "-r expects 1 to 64");
    setup_reporting();

    /* The context must hold the prompt and the generated tokens. */
    snprintf(ctx_len, sizeof ctx_len, "%ld", (n_prompt > 0 ? n_prompt : 1) + n_gen);
    keys[0] = "ctx_len";
    values[0] = ctx_len;
    st = minfer_open_with_options(path, keys, values, n_options, &m);
    if (st != MINFER_OK) return fail_status(st, "bench");
    st = minfer_context_create(m, &ctx);
    if (st != MINFER_OK) {
        minfer_close(m);
        return fail_status(st, "bench");
    }
    prompt = malloc(sizeof(int32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1));
    if (!prompt) {
        fprintf(stderr, "minfer: bench: out of memory\n");
        return 1;
    }
    {
        uint64_t x = 0x2545f4914f6cdd1dull;
        long j;
        for (j = 0; j < (n_prompt > 0 ? n_prompt : 1); ++j) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[j] = (int32_t)(x % (uint64_t)minfer_model_n_vocab(m));
        }
    }
    /* Warm-up, untimed: first-touch of the mapped weights, thread start. */
    st = bench_once(ctx, prompt, (int)(n_prompt < 16 ? n_prompt : 16), n_gen > 0 ? 2 : 0, &pp[0], &tg[0]);
    for (r = 0; r < reps && st == MINFER_OK; ++r) {
        if (!g_quiet && isatty(STDERR_FILENO)) fprintf(stderr, "\rbench: repetition %d of %ld", r + 1, reps);
        st = bench_once(ctx, prompt, (int)n_prompt, (int)n_gen, &pp[r], &tg[r]);
    }
    if (!g_quiet && isatty(STDERR_FILENO)) fputc('\n', stderr);
    free(prompt);
    if (st != MINFER_OK) {
        minfer_context_free(ctx);
        minfer_close(m);
        return fail_status(st, "bench");
    }

    minfer_get_option(m, "threads", threads, sizeof threads, NULL);
    if (strcmp(threads, "0") == 0) snprintf(threads, sizeof threads, "%ld (all)", sysconf(_SC_NPROCESSORS_ONLN));
    snprintf(device, sizeof device, "%s", minfer_model_device(m));
    human_bytes(minfer_model_file_size(m), buf, sizeof buf);
    printf("| model | size | params | device | threads | test | t/s |\n");
    printf("|---|---|---|---|---|---|---|\n");
    if (n_prompt > 0) {
        mean_sd(pp, (int)reps, &mean, &sd);
        printf("| %s | %s | %.2f B | %s | %s | pp%ld | %.2f ± %.2f |\n", minfer_model_name(m), buf,
               (double)minfer_model_n_params(m) / 1e9, device, threads, n_prompt, mean, sd);
    }
    if (n_gen > 0) {
        mean_sd(tg, (int)reps, &mean, &sd);
        printf("| %s | %s | %.2f B | %s | %s | tg%ld | %.2f ± %.2f |\n", minfer_model_name(m), buf,
               (double)minfer_model_n_params(m) / 1e9, device, threads, n_gen, mean, sd);
    }
    printf("\noptions:");
    for (k = 0; k < minfer_option_count(); ++k) {
        const char* name;
        char value[64];
        minfer_option_info(k, &name, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
        if (minfer_get_option(m, name, value, sizeof value, NULL) == MINFER_OK) printf(" %s=%s", name, value);
    }
    printf("\nbuild: %s; %ld repetitions\n", minfer_build_info(), reps);
    minfer_context_free(ctx);
    minfer_close(m);
    return 0;
}

/* ---- options --------------------------------------------------------------------------------- */

static const char* const OPTIONS_HELP =
    "usage: minfer options [--markdown]\n"
    "\n"
    "Lists every option of the library with its type, default, bounds and scope. --markdown prints the\n"
    "table docs/options.md is generated from.\n";

static const char* type_name(minfer_option_type t) {
    switch (t) {
    case MINFER_OPTION_BOOL: return "bool";
    case MINFER_OPTION_INT: return "int";
    case MINFER_OPTION_ENUM: return "enum";
    case MINFER_OPTION_BYTES: return "bytes";
    }
    return "?";
}

static int cmd_options(int argc, char** argv) {
    int markdown = 0, i;
    size_t k, n = minfer_option_count();
    for (i = 0; i < argc; ++i) {
        if (is_help(argv[i])) {
            fputs(OPTIONS_HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--markdown") == 0) {
            markdown = 1;
        } else {
            return usage_error("options", "unknown argument");
        }
    }
    if (markdown) {
        printf("# Options\n\n");
        printf("Generated by `minfer options --markdown` from the option table in lib/options/options.cpp; a test\n");
        printf("fails when this file and the table differ. Set them with `minfer_set_option(model, key, value)`\n");
        printf("(a NULL model sets the process-wide default for models opened later), with\n");
        printf("`minfer_open_with_options`, or with `--option key=value` on the command line. `load` options are\n");
        printf("read once when a model is opened; `runtime` options may change on an open model.\n\n");
        printf("| option | type | default | values | scope | description |\n");
        printf("|---|---|---|---|---|---|\n");
    }
    for (k = 0; k < n; ++k) {
        const char *name, *def, *lo, *hi, *choices, *doc;
        minfer_option_type type;
        minfer_option_scope scope;
        char values[128];
        minfer_option_info(k, &name, &type, &scope, &def, &lo, &hi, &choices, &doc);
        if (type == MINFER_OPTION_ENUM)
            snprintf(values, sizeof values, "%s", choices);
        else if (type == MINFER_OPTION_BOOL)
            snprintf(values, sizeof values, "true|false");
        else
            snprintf(values, sizeof values, "%s .. %s", lo, hi);
        if (markdown) {
            char escaped[160];
            size_t o = 0, c;
            for (c = 0; values[c] && o + 2 < sizeof escaped; ++c) {
                if (values[c] == '|') escaped[o++] = '\\';
                escaped[o++] = values[c];
            }
            escaped[o] = '\0';
            printf("| `%s` | %s | `%s` | %s | %s | %s |\n", name, type_name(type), def, escaped,
                   scope == MINFER_OPTION_SCOPE_LOAD ? "load" : "runtime", doc);
        } else {
            printf("%-18s %-5s default %-12s %-26s %-7s %s\n", name, type_name(type), def, values,
                   scope == MINFER_OPTION_SCOPE_LOAD ? "load" : "runtime", doc);
        }
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

static const char* const MAIN_HELP =
    "usage: minfer COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  info MODEL.gguf     validate a model and describe it\n"
    "  synth               write a synthetic Qwen2/Qwen3 model with random weights\n"
    "  bench -m MODEL      prefill and decode speed in tokens per second\n"
    "  options             list the library's options\n"
    "  version             print the library version and build\n"
    "\n"
    "'minfer COMMAND --help' describes each command.\n";

int main(int argc, char** argv) {
    const char* cmd;
    if (argc < 2) {
        fputs(MAIN_HELP, stderr);
        return 2;
    }
    cmd = argv[1];
    if (is_help(cmd)) {
        fputs(MAIN_HELP, stdout);
        return 0;
    }
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
    if (strcmp(cmd, "synth") == 0) return cmd_synth(argc - 2, argv + 2);
    if (strcmp(cmd, "options") == 0) return cmd_options(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("%s\n", minfer_build_info());
        return 0;
    }
    fprintf(stderr, "minfer: unknown command '%s'\n\n", cmd);
    fputs(MAIN_HELP, stderr);
    return 2;
}
