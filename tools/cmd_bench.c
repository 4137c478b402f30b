/* minfer command line: `minfer bench`, prefill and decode speed. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>
#include <sys/resource.h>

#include "cli.h"

/* ---- bench ----------------------------------------------------------------------------------- */

static const char* const BENCH_HELP =
    "usage: minfer bench -m MODEL.gguf [-p N] [-n N] [-r N] [-d|--depth N] [--json] [--option KEY=VALUE]...\n"
    "                    [--bandwidth] [--seqs N[,N...] [--temp T [--top-k K]]] [--quiet]\n"
    "\n"
    "Measures prefill (pp: N prompt tokens in one call, default 512) and decode (tg: N greedy decode\n"
    "steps from an empty context, as llama-bench's tg, default 128) in tokens per second, repeated -r times\n"
    "(default 3) on a fresh context, after one untimed warm-up run of the same lengths (its prefill rate is\n"
    "printed as the first call's: it pays a backend's first-call costs). Prints a markdown table: mean and\n"
    "standard deviation over the repetitions, with the model, backend, peak memory and the options in force\n"
    "(--json: one JSON object with every repetition instead). Prompt tokens are random ids (fixed seed);\n"
    "-p 0 or -n 0 skips that test.\n"
    "\n"
    "--depth N (as llama-bench -d): each repetition first prefills N random tokens, untimed, and both\n"
    "tests run on top of them: the prefill of -p tokens at positions N.., then (the context cut back to N\n"
    "tokens, untimed) the -n decode steps at positions N... The tests read `pp512 @ d8192`, `tg128 @ d8192`.\n"
    "The context length is set to what the run needs (N + max(p, n); without --depth, max(p, 1) + n)\n"
    "unless --option ctx_len=... is given; the run must fit the model's training context, or that ctx_len.\n"
    "\n"
    "--bandwidth: also measures the host's memory read bandwidth (a 1 GiB buffer summed by as many threads as\n"
    "the `threads` option, or every online CPU for 0; best of 3) and, for the CPU backend, the share of it\n"
    "decode uses, taking the file's bytes as the weights one token reads (tied embeddings are read once as\n"
    "the output matrix; an untied embedding table is not streamed, so the share is then an upper bound).\n"
    "\n"
    "--seqs N[,N...]: batched serving instead (minfer_batch_*): for each N, N sequences of -p random prompt\n"
    "tokens (default 128 here) and -n greedy new tokens each join one batch at once, and the batch steps until\n"
    "all are done. The first step takes every prompt (up to 32,768 tokens in all), as llama-batched-bench\n"
    "prefills before it decodes, so the sequences then decode in lockstep. Prints per N the time until every\n"
    "sequence has its first token (the prefill phase), the aggregate decode rate (tokens sampled after that\n"
    "over the time they took) and the end-to-end rate, best of -r repetitions (each on a fresh batch after a\n"
    "warm-up). --temp T: the sequences sample instead, at temperature T with nothing cut (top_k 0, top_p 1,\n"
    "min_p 0, as a request that sets the temperature alone: every token of the vocabulary a candidate), each\n"
    "with its own seed. --top-k K with it: top_k K (the default sampler's cut is 40), so each step brings\n"
    "back the rows' best logits instead of the rows (on the GPU).\n";

/* ---- prefill arithmetic ----------------------------------------------------------------------- */

/* Floating-point operations of one prefill call of n tokens after `depth` earlier ones, a multiply-add
   counted as 2: every layer's q, k, v, o, gate, up and down projections for each token, the causal
   attention products (q k and p v: 2 x 2 x n_head x head_dim per key, token i at position depth + i
   attending to depth + i + 1 keys), and the output projection of the one row whose logits are kept. */
static double prefill_flops(const minfer_model* m, long n, long depth) {
    const double e = minfer_model_n_embd(m), f = minfer_model_n_ff(m), hd = minfer_model_head_dim(m);
    const double q = minfer_model_n_head(m) * hd, kv = minfer_model_n_head_kv(m) * hd, layers = minfer_model_n_layer(m);
    const double per_token = 2.0 * layers * (e * q + 2.0 * e * kv + q * e + 3.0 * e * f);
    const double keys = (double)n * (double)depth + (double)n * ((double)n + 1.0) / 2.0;
    return per_token * (double)n + 4.0 * layers * q * keys + 2.0 * e * minfer_model_n_vocab(m);
}

/* ---- host read bandwidth ---------------------------------------------------------------------- */

struct read_slice {
    const uint64_t* p;
    size_t n;
    uint64_t sum;
};

static void* read_slice_run(void* arg) {
    struct read_slice* s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i;
    for (i = 0; i + 4 <= s->n; i += 4) a += s->p[i], b += s->p[i + 1], c += s->p[i + 2], d += s->p[i + 3];
    for (; i < s->n; ++i) a += s->p[i];
    s->sum = a + b + c + d;
    return NULL;
}

/* Bytes per second that `threads` threads read from a 1 GiB buffer (best of 3), or 0 when it cannot run. */
static double read_bandwidth(int threads) {
    const size_t bytes = (size_t)1 << 30, words = bytes / sizeof(uint64_t);
    uint64_t* buf = malloc(bytes);
    double best = 0.0;
    int rep, t;
    if (!buf) return 0.0;
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    for (size_t i = 0; i < words; ++i) buf[i] = i; /* touch every page */
    for (rep = 0; rep < 3; ++rep) {
        struct read_slice slices[256];
        pthread_t ids[256];
        int started = 0;
        double t0 = now_seconds(), dt;
        uint64_t total = 0;
        for (t = 0; t < threads; ++t) {
            slices[t].p = buf + words / (size_t)threads * (size_t)t;
            slices[t].n = t + 1 < threads ? words / (size_t)threads : words - words / (size_t)threads * (size_t)t;
            slices[t].sum = 0;
            if (t > 0 && pthread_create(&ids[t], NULL, read_slice_run, &slices[t]) != 0) break;
            started = t + 1;
        }
        read_slice_run(&slices[0]);
        for (t = 1; t < started; ++t) pthread_join(ids[t], NULL);
        dt = now_seconds() - t0;
        for (t = 0; t < started; ++t) total += slices[t].sum;
        if (started != threads || total == 42) continue; /* the sum is used, so the reads stay */
        if (bytes / dt > best) best = bytes / dt;
    }
    free(buf);
    return best;
}

static void mean_sd(const double* v, int n, double* mean, double* sd) {
    double s = 0, q = 0;
    int i;
    for (i = 0; i < n; ++i) s += v[i];
    *mean = s / n;
    for (i = 0; i < n; ++i) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

/* The context length one repetition needs (see bench_once). */
static long bench_context(long depth, long n_prompt, long n_gen) {
    if (depth > 0) return depth + (n_prompt > n_gen ? n_prompt : n_gen);
    return (n_prompt > 0 ? n_prompt : 1) + n_gen;
}

/* One repetition. Without depth: prefill n_prompt tokens (at least one); then, the context emptied, one
 * token prefilled untimed (its logits) and n_gen decode steps timed from position 1 (llama-bench's tg
 * also decodes from an empty context, not after its pp test). With depth: prefill the depth tokens
 * tokens[0 .. depth) untimed, then the n_prompt tokens after them; then cut the context back to depth - 1
 * tokens and prefill token depth - 1 again (untimed: the logits of position depth - 1), and time n_gen
 * decode steps from position depth. Rates in tokens per second. */
static minfer_status bench_once(minfer_context* ctx, const int32_t* tokens, int depth, int n_prompt, int n_gen, double* pp,
                                double* tg) {
    minfer_status st = minfer_context_reset(ctx);
    const int32_t* prompt = tokens + depth;
    double t0, t1;
    int i;
    int32_t tok;
    if (st != MINFER_OK) return st;
    *pp = 0.0;
    if (depth > 0) st = minfer_prefill(ctx, tokens, (size_t)depth);
    if (st != MINFER_OK) return st;
    if (depth == 0 || n_prompt > 0) {
        t0 = now_seconds();
        st = minfer_prefill(ctx, prompt, (size_t)(n_prompt > 0 ? n_prompt : 1));
        t1 = now_seconds();
        if (st != MINFER_OK) return st;
        *pp = (n_prompt > 0 ? n_prompt : 1) / (t1 - t0);
    }
    if (depth > 0 && n_prompt > 0 && n_gen > 0) {
        st = minfer_context_truncate(ctx, depth - 1);
        if (st == MINFER_OK) st = minfer_prefill(ctx, tokens + depth - 1, 1);
        if (st != MINFER_OK) return st;
    } else if (depth == 0 && n_prompt > 1 && n_gen > 0) {
        st = minfer_context_truncate(ctx, 0);
        if (st == MINFER_OK) st = minfer_prefill(ctx, prompt, 1);
        if (st != MINFER_OK) return st;
    }
    t0 = now_seconds();
    for (i = 0; i < n_gen && st == MINFER_OK; ++i) st = minfer_decode(ctx, &tok);
    t1 = now_seconds();
    *tg = n_gen > 0 ? n_gen / (t1 - t0) : 0.0;
    return st;
}

/* A JSON string literal of s (escapes quotes, backslashes and control bytes). */
static void json_string(const char* s) {
    putchar('"');
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* The name of a test: "pp512", or "pp512 @ d8192" on top of a context (as llama-bench names them). */
static void test_name(char* buf, size_t cap, const char* kind, long n, long depth) {
    if (depth > 0) snprintf(buf, cap, "%s%ld @ d%ld", kind, n, depth);
    else snprintf(buf, cap, "%s%ld", kind, n);
}

static void json_test(const char* kind, long n, long depth, const double* v, int reps) {
    double mean, sd;
    int i;
    char name[64];
    test_name(name, sizeof name, kind, n, depth);
    mean_sd(v, reps, &mean, &sd);
    printf("{\"test\": \"%s\", \"tokens\": %ld, \"depth\": %ld, \"tok_per_s\": %.4f, \"sd\": %.4f, \"runs\": [", name, n,
           depth, mean, sd);
    for (i = 0; i < reps; ++i) printf(i ? ", %.4f" : "%.4f", v[i]);
    printf("]}");
}

/* Batched serving: n_seqs sequences of n_prompt random tokens and n_gen new tokens each, all added at
 * once; the first-token time, the aggregate decode rate after it and the end-to-end rate. */
struct batch_run {
    double first_s, decode_tps, total_tps;
    uint64_t tokens, steps;
    int failed;
};

static minfer_status bench_batch_once(minfer_model* m, int n_seqs, int n_prompt, int n_gen, double temp, int top_k, uint64_t seed,
                                      struct batch_run* out) {
    minfer_batch_params bp;
    minfer_batch* b = NULL;
    minfer_batch_event* ev = NULL;
    int32_t* prompt = NULL;
    minfer_status st;
    int i, j, done = 0, started = 0;
    long step;
    uint64_t x = seed | 1, tokens = 0, tokens_at_first = 0, steps = 0;
    double t0, t_first = 0.0, t1;
    const int n_vocab = minfer_model_n_vocab(m);
    memset(out, 0, sizeof *out);
    minfer_batch_params_init(&bp);
    bp.max_sequences = n_seqs;
    bp.max_queue = n_seqs;
    /* Every prompt in the first step (up to 32,768 tokens), as llama-batched-bench prefills every sequence
       before it decodes: the sequences then decode in lockstep, one token each per step. */
    step = (long)n_seqs * (n_prompt > 0 ? n_prompt : 1);
    if (step > 32768) step = 32768;
    if (step < 512) step = 512;
    if (step < n_seqs) step = n_seqs;
    bp.max_step_tokens = (int32_t)step;
    bp.n_ctx = n_prompt + n_gen;
    bp.kv_tokens = (int64_t)n_seqs * (((n_prompt + n_gen) + 15) / 16 * 16);
    st = minfer_batch_create(m, &bp, &b);
    if (st != MINFER_OK) return st;
    ev = malloc(sizeof *ev * (size_t)n_seqs);
    prompt = malloc(sizeof *prompt * (size_t)n_prompt);
    if (!ev || !prompt) {
        free(ev);
        free(prompt);
        minfer_batch_free(b);
        return MINFER_ERR_OUT_OF_MEMORY;
    }
    t0 = now_seconds();
    for (i = 0; i < n_seqs && st == MINFER_OK; ++i) {
        minfer_sequence_params sp;
        minfer_sampler_params sampler;
        uint64_t id;
        for (j = 0; j < n_prompt; ++j) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[j] = (int32_t)(x % (uint64_t)n_vocab);
        }
        minfer_sequence_params_init(&sp);
        sp.prompt = prompt;
        sp.n_prompt = (size_t)n_prompt;
        sp.max_tokens = n_gen;
        if (temp > 0.0) {
            minfer_sampler_params_init(&sampler);
            sampler.temperature = (float)temp;
            sampler.top_k = top_k;
            sampler.top_p = 1.0f;
            sampler.min_p = 0.0f;
            sampler.seed = seed + (uint64_t)i;
            sp.sampler = &sampler;
        }
        st = minfer_batch_add(b, &sp, &id);
    }
    while (st == MINFER_OK && done < n_seqs) {
        size_t n = 0, k;
        st = minfer_batch_step(b, 0, ev, (size_t)n_seqs, &n);
        ++steps;
        for (k = 0; k < n && st == MINFER_OK; ++k) {
            if (ev[k].token >= 0) ++tokens;
            if (ev[k].finished) {
                ++done;
                if (ev[k].status != MINFER_OK) ++out->failed;
            }
        }
        if (!started && tokens >= (uint64_t)n_seqs - (uint64_t)out->failed) { /* every sequence has its first token */
            started = 1;
            t_first = now_seconds();
            tokens_at_first = tokens;
        }
    }
    t1 = now_seconds();
    free(ev);
    free(prompt);
    minfer_batch_free(b);
    if (st != MINFER_OK) return st;
    out->first_s = (started ? t_first : t1) - t0;
    out->decode_tps = started && t1 > t_first ? (double)(tokens - tokens_at_first) / (t1 - t_first) : 0.0;
    out->total_tps = (double)tokens / (t1 - t0);
    out->tokens = tokens;
    out->steps = steps;
    return MINFER_OK;
}

static int bench_batch(minfer_model* m, const char* seqs, long n_prompt, long n_gen, double temp, int top_k, long reps) {
    const char* p = seqs;
    char sampling[48];
    if (temp > 0.0 && top_k > 0) snprintf(sampling, sizeof sampling, "temp %.2f top-k %d", temp, top_k);
    else if (temp > 0.0) snprintf(sampling, sizeof sampling, "temp %.2f", temp);
    else snprintf(sampling, sizeof sampling, "greedy");
    printf("| model | device | seqs | prompt | new | sampling | first tokens s | decode t/s (aggregate) | end-to-end t/s | steps |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    while (*p) {
        char* end = NULL;
        long n = strtol(p, &end, 10);
        struct batch_run best, run;
        minfer_status st;
        long r;
        if (end == p || n < 1 || n > 4096 || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "minfer: bench: --seqs expects counts from 1 to 4096, comma-separated\n");
            return 1;
        }
        p = *end == ',' ? end + 1 : end;
        st = bench_batch_once(m, (int)n, n_prompt < 16 ? (int)n_prompt : 16, 4, temp, top_k, 7, &run); /* warm-up */
        memset(&best, 0, sizeof best);
        for (r = 0; r < reps && st == MINFER_OK; ++r) {
            st = bench_batch_once(m, (int)n, (int)n_prompt, (int)n_gen, temp, top_k, 0x9e3779b97f4a7c15ull + (uint64_t)r, &run);
            if (st == MINFER_OK && run.decode_tps > best.decode_tps) best = run;
        }
        if (st != MINFER_OK) return fail_status(st, "bench");
        printf("| %s | %s | %ld | %ld | %ld | %s | %.3f | %.1f | %.1f | %" PRIu64 " |%s\n", minfer_model_name(m), minfer_model_device(m), n,
               n_prompt, n_gen, sampling, best.first_s, best.decode_tps, best.total_tps, best.steps, best.failed ? " (some sequences failed)" : "");
        fflush(stdout);
    }
    printf("\nbuild: %s; best of %ld repetitions\n", minfer_build_info(), reps);
    return 0;
}

int cmd_bench(int argc, char** argv) {
    const char* path = NULL;
    long n_prompt = 512, n_gen = 128, reps = 3, depth = 0, need, limit;
    const char* keys[MAX_OPTIONS + 1];
    const char* values[MAX_OPTIONS + 1];
    size_t n_options = 1, k;
    int user_ctx_len = 0;
    char ctx_len[32], threads[32], device[32], buf[64], name[64];
    int i, r;
    minfer_model* m = NULL;
    minfer_context* ctx = NULL;
    minfer_status st;
    int32_t* tokens;
    double pp[64], tg[64], warm_pp = 0.0, warm_tg = 0.0, mean, sd, load_s, sweep_ms = -1.0;
    minfer_vram vram;
    char vram_line[256];
    uint64_t peak_rss = 0;
    int json = 0, bandwidth = 0, prompt_given = 0;
    const char* seqs = NULL;
    double read_bw = 0.0, temp = 0.0;
    long top_k = 0;
    for (i = 0; i < argc; ++i) {
        const char* a = argv[i];
        if (is_help(a)) {
            fputs(BENCH_HELP, stdout);
            return 0;
        } else if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) {
            g_quiet = 1;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--bandwidth") == 0) {
            bandwidth = 1;
        } else if (strcmp(a, "--seqs") == 0) {
            if (i + 1 >= argc) return usage_error("bench", "--seqs expects counts, e.g. 1,8,32,64");
            seqs = argv[++i];
        } else if (strcmp(a, "--temp") == 0) {
            char* end = NULL;
            if (i + 1 >= argc) return usage_error("bench", "--temp expects a temperature");
            temp = strtod(argv[++i], &end);
            if (!end || *end != '\0' || !(temp > 0.0 && temp <= 100.0)) return usage_error("bench", "--temp expects a temperature above 0, at most 100");
        } else if (strcmp(a, "--top-k") == 0) {
            char* end = NULL;
            if (i + 1 >= argc) return usage_error("bench", "--top-k expects a count");
            top_k = strtol(argv[++i], &end, 10);
            if (!end || *end != '\0' || top_k < 1 || top_k > 1000000) return usage_error("bench", "--top-k expects a count from 1 to 1000000");
        } else if (strcmp(a, "--option") == 0) {
            int rc = i + 1 < argc ? split_option(argv[++i], keys, values, &n_options) : 1;
            if (rc != 0) return usage_error("bench", rc == 1 ? "--option expects KEY=VALUE" : "too many --option flags");
            if (strcmp(keys[n_options - 1], "ctx_len") == 0) user_ctx_len = 1;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            if (i + 1 >= argc) return usage_error("bench", "-m expects a model path");
            path = argv[++i];
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "-n") == 0 || strcmp(a, "-r") == 0 || strcmp(a, "-d") == 0 ||
                   strcmp(a, "--depth") == 0) {
            char* end = NULL;
            long v;
            if (i + 1 >= argc) return usage_error("bench", "a flag is missing its value");
            v = strtol(argv[++i], &end, 10);
            if (!end || *end != '\0' || v < 0 || v > 1000000) return usage_error("bench", "-p, -n, -r and --depth expect a count");
            if (a[1] == 'p') n_prompt = v, prompt_given = 1;
            else if (a[1] == 'n') n_gen = v;
            else if (a[1] == 'r') reps = v;
            else depth = v;
        } else {
            return usage_error("bench", "unknown argument");
        }
    }
    if (!path) return usage_error("bench", "-m MODEL.gguf is required");
    if (temp > 0.0 && !seqs) return usage_error("bench", "--temp goes with --seqs (the single-context tests decode greedily, as llama-bench)");
    if (top_k > 0 && !(temp > 0.0)) return usage_error("bench", "--top-k goes with --temp");
    if (reps < 1 || reps > 64) return usage_error("bench", "-r expects 1 to 64");
    setup_reporting();
    if (seqs) {
        int rc;
        if (!prompt_given) n_prompt = 128;
        if (n_prompt < 1 || n_gen < 1) return usage_error("bench", "--seqs needs -p and -n of at least 1");
        st = minfer_open_with_options(path, keys + 1, values + 1, n_options - 1, &m);
        if (st != MINFER_OK) return fail_status(st, "bench");
        rc = bench_batch(m, seqs, n_prompt, n_gen, temp, (int)top_k, reps);
        minfer_close(m);
        return rc;
    }

    /* The context must hold the depth, the prompt and the generated tokens: sized to that unless the user
     * set ctx_len (then slot 0 is not passed). */
    need = bench_context(depth, n_prompt, n_gen);
    snprintf(ctx_len, sizeof ctx_len, "%ld", need);
    keys[0] = "ctx_len";
    values[0] = ctx_len;
    load_s = now_seconds();
    st = user_ctx_len ? minfer_open_with_options(path, keys + 1, values + 1, n_options - 1, &m)
                      : minfer_open_with_options(path, keys, values, n_options, &m);
    load_s = now_seconds() - load_s;
    if (st != MINFER_OK) return fail_status(st, "bench");
    /* The limit: the user's ctx_len (0 is the training context), else the model's training context. */
    limit = minfer_model_n_ctx_train(m);
    if (user_ctx_len && minfer_get_option(m, "ctx_len", buf, sizeof buf, NULL) == MINFER_OK && strtol(buf, NULL, 10) > 0)
        limit = strtol(buf, NULL, 10);
    if (need > limit) {
        fprintf(stderr,
                "minfer: bench: --depth %ld, -p %ld and -n %ld need a context of %ld tokens, beyond %s of %ld tokens%s\n",
                depth, n_prompt, n_gen, need, user_ctx_len ? "the ctx_len option" : "the model's training context", limit,
                user_ctx_len ? "" : " (--option ctx_len=N runs beyond it)");
        minfer_close(m);
        return 1;
    }
    st = minfer_context_create(m, &ctx);
    if (st != MINFER_OK) {
        minfer_close(m);
        return fail_status(st, "bench");
    }
    /* The depth tokens, then the prompt (at least one token: without depth the decode needs its logits). */
    tokens = malloc(sizeof(int32_t) * (size_t)(depth + (n_prompt > 0 ? n_prompt : 1)));
    if (!tokens) {
        fprintf(stderr, "minfer: bench: out of memory\n");
        minfer_context_free(ctx);
        minfer_close(m);
        return 1;
    }
    {
        uint64_t x = 0x2545f4914f6cdd1dull;
        long j;
        for (j = 0; j < depth + (n_prompt > 0 ? n_prompt : 1); ++j) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tokens[j] = (int32_t)(x % (uint64_t)minfer_model_n_vocab(m));
        }
    }
    /* Warm-up, untimed, without the depth, at the test's prompt length (as llama-bench warms up): first-touch
     * of the mapped weights, thread start, and whatever a backend does on the first call of a shape (lazily
     * loaded GPU kernels, gemm_tune's timing of the GEMM candidates); its prefill rate is printed apart. */
    st = bench_once(ctx, tokens + depth, 0, (int)n_prompt, n_gen < 2 ? (int)n_gen : 2, &warm_pp, &warm_tg);
    for (r = 0; r < reps && st == MINFER_OK; ++r) {
        if (!g_quiet && isatty(STDERR_FILENO)) fprintf(stderr, "\rbench: repetition %d of %ld", r + 1, reps);
        st = bench_once(ctx, tokens, (int)depth, (int)n_prompt, (int)n_gen, &pp[r], &tg[r]);
    }
    if (!g_quiet && isatty(STDERR_FILENO)) fputc('\n', stderr);
    free(tokens);
    if (st != MINFER_OK) {
        minfer_context_free(ctx);
        minfer_close(m);
        return fail_status(st, "bench");
    }

    /* Device memory with the context alive, and the per-call dequantization cost of the two-pass path. */
    memset(&vram, 0, sizeof vram);
    minfer_model_vram(m, &vram);
    format_vram(&vram, vram_line, sizeof vram_line);
    if (strcmp(minfer_model_device(m), "cuda") == 0 && minfer_bench_dequant_sweep(m, 10, &sweep_ms) != MINFER_OK) sweep_ms = -1.0;
    minfer_get_option(m, "threads", threads, sizeof threads, NULL);
    if (bandwidth) read_bw = read_bandwidth(strcmp(threads, "0") == 0 ? (int)sysconf(_SC_NPROCESSORS_ONLN) : atoi(threads));
    if (strcmp(threads, "0") == 0) snprintf(threads, sizeof threads, "0 (physical cores)");
    snprintf(device, sizeof device, "%s", minfer_model_device(m));
    human_bytes(minfer_model_file_size(m), buf, sizeof buf);
    {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        peak_rss = (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
    }
    if (json) {
        /* One object: the model, the setup, each test's rates (mean, sd, every repetition), memory. */
        printf("{\"model\": ");
        json_string(minfer_model_name(m));
        printf(", \"file\": ");
        json_string(path);
        printf(", \"file_bytes\": %" PRIu64 ", \"params\": %" PRIu64 ", \"device\": \"%s\", \"threads\": \"%s\",",
               minfer_model_file_size(m), minfer_model_n_params(m), device, threads);
        printf(" \"peak_rss_bytes\": %" PRIu64 ", \"load_s\": %.3f, \"vram\": {\"weights\": %" PRIu64 ", \"w16_cache\": %" PRIu64
               ", \"kv_cache\": %" PRIu64 ", \"scratch\": %" PRIu64 "},", peak_rss, load_s, vram.weights, vram.w16_cache,
               vram.kv_cache, vram.scratch);
        if (sweep_ms >= 0) printf(" \"dequant_sweep_ms\": %.4f,", sweep_ms);
        if (bandwidth) printf(" \"host_read_bytes_per_s\": %.0f,", read_bw);
        printf(" \"prefill_path\": \"%s\", \"gemm\": \"%s\", \"warm_ms\": %.3f,", minfer_model_prefill_path(m), minfer_model_gemm(m),
               minfer_model_warm_ms(m));
        printf(" \"repetitions\": %ld, \"depth\": %ld,", reps, depth);
        if (n_prompt > 0) printf(" \"warmup_pp\": %.3f,", warm_pp);
        if (n_prompt > 0) {
            mean_sd(pp, (int)reps, &mean, &sd);
            printf(" \"pp_gflop_per_s\": %.3f,", prefill_flops(m, n_prompt, depth) * mean / (double)n_prompt / 1e9);
        }
        printf(" \"tests\": [");
        if (n_prompt > 0) json_test("pp", n_prompt, depth, pp, (int)reps);
        if (n_prompt > 0 && n_gen > 0) printf(", ");
        if (n_gen > 0) json_test("tg", n_gen, depth, tg, (int)reps);
        printf("], \"options\": {");
        for (k = 0; k < minfer_option_count(); ++k) {
            const char* name;
            char value[64];
            minfer_option_info(k, &name, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            if (minfer_get_option(m, name, value, sizeof value, NULL) == MINFER_OK) printf("%s\"%s\": \"%s\"", k ? ", " : "", name, value);
        }
        printf("}, \"build\": ");
        json_string(minfer_build_info());
        printf("}\n");
    } else {
        char rss[64];
        human_bytes(peak_rss, rss, sizeof rss);
        printf("| model | size | params | device | threads | test | t/s |\n");
        printf("|---|---|---|---|---|---|---|\n");
        if (n_prompt > 0) {
            mean_sd(pp, (int)reps, &mean, &sd);
            test_name(name, sizeof name, "pp", n_prompt, depth);
            printf("| %s | %s | %.2f B | %s | %s | %s | %.2f ± %.2f |\n", minfer_model_name(m), buf,
                   (double)minfer_model_n_params(m) / 1e9, device, threads, name, mean, sd);
        }
        if (n_gen > 0) {
            mean_sd(tg, (int)reps, &mean, &sd);
            test_name(name, sizeof name, "tg", n_gen, depth);
            printf("| %s | %s | %.2f B | %s | %s | %s | %.2f ± %.2f |\n", minfer_model_name(m), buf,
                   (double)minfer_model_n_params(m) / 1e9, device, threads, name, mean, sd);
        }
        if (n_prompt > 0) {
            mean_sd(pp, (int)reps, &mean, &sd);
            test_name(name, sizeof name, "pp", n_prompt, depth);
            printf("\nprefill: %.1f GFLOP/s (%.4g GFLOP per %s call: projections, causal attention, one output row)",
                   prefill_flops(m, n_prompt, depth) * mean / (double)n_prompt / 1e9, prefill_flops(m, n_prompt, depth) / 1e9, name);
            printf("\nfirst call (the untimed warm-up, from position 0): pp%ld %.2f t/s", n_prompt, warm_pp);
        }
        printf("\nload: %.2f s\nmemory: peak resident %s (the mapped weights count as they are touched)\n", load_s, rss);
        if (strcmp(device, "cuda") == 0) printf("vram: %s\n", vram_line);
        if (strcmp(device, "cuda") == 0)
            printf("prefill path: %s, gemm %s, warm pass %.1f ms\n", minfer_model_prefill_path(m), minfer_model_gemm(m), minfer_model_warm_ms(m));
        if (sweep_ms >= 0) printf("dequant sweep: %.3f ms (every layer matmul weight to f16 once: the per-call cost of the two-pass prefill)\n", sweep_ms);
        if (bandwidth) {
            printf("host read bandwidth: %.1f GB/s (1 GiB summed, best of 3)", read_bw / 1e9);
            if (n_gen > 0 && read_bw > 0 && strcmp(device, "cpu") == 0) {
                mean_sd(tg, (int)reps, &mean, &sd);
                printf("; decode reads %.1f GB/s of weights, %.0f%% of it", (double)minfer_model_file_size(m) * mean / 1e9,
                       100.0 * (double)minfer_model_file_size(m) * mean / read_bw);
            }
            printf("\n");
        }
        printf("options:");
        for (k = 0; k < minfer_option_count(); ++k) {
            const char* name;
            char value[64];
            minfer_option_info(k, &name, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            if (minfer_get_option(m, name, value, sizeof value, NULL) == MINFER_OK) printf(" %s=%s", name, value);
        }
        printf("\nbuild: %s; %ld repetitions\n", minfer_build_info(), reps);
    }
    minfer_context_free(ctx);
    minfer_close(m);
    return 0;
}
