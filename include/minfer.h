/*
 * minfer.h - the public C interface of minfer, an inference engine for GGUF language models.
 *
 * Usage:
 *
 *     minfer_model* model = NULL;
 *     if (minfer_open("qwen2-0.5b-q8_0.gguf", &model) != MINFER_OK) {
 *         fprintf(stderr, "open: %s\n", minfer_last_error());
 *         return 1;
 *     }
 *     minfer_set_option(model, "threads", "8");          // runtime option, applies to this model
 *     minfer_context* ctx = NULL;
 *     minfer_context_create(model, &ctx);
 *     const int32_t prompt[] = {9707, 11, 1879};
 *     minfer_status st = minfer_prefill(ctx, prompt, 3);
 *     for (int i = 0; st == MINFER_OK && i < 32; ++i) {
 *         int32_t tok;
 *         st = minfer_decode(ctx, &tok);
 *     }
 *     if (st != MINFER_OK) fprintf(stderr, "%s: %s\n", minfer_status_string(st), minfer_last_error());
 *     minfer_context_free(ctx);
 *     minfer_close(model);
 *
 * Thread safety: every function may be called from any thread. A model is immutable after
 * minfer_open and may be shared by any number of threads and contexts; setting a runtime option on a
 * model is safe while other threads use it. A context holds mutable state (the KV cache) and is used by
 * one thread at a time: a second concurrent call on the same context returns MINFER_ERR_BUSY and
 * changes nothing. The exceptions are minfer_context_n_ctx, minfer_context_n_past and
 * minfer_context_stop_reason: they never fail and may be called at any time, also while another thread
 * prefills or decodes on that context (they then see the state before or after that call).
 * minfer_context_free must not race any other call on the context (it cannot answer BUSY: it frees).
 * Process-wide defaults (minfer_set_option with a NULL model), the log callback and the progress
 * callback are guarded by a lock; models opened afterwards see the new values.
 * minfer_last_error() is per thread.
 *
 * Errors: every function that can fail returns a minfer_status. MINFER_OK is 0; any other value is a
 * failure, and minfer_last_error() on the same thread then holds a message naming what went wrong (the
 * key, the tensor, the byte offset). Nothing in this library aborts, exits or throws across this
 * interface, and it reads no environment variable: behaviour is chosen with options only.
 * One hazard is outside its control: by default the model file is mapped into memory (option `mmap`),
 * and if it is truncated or rewritten in place on disk while the model is open, the next read of a page
 * that vanished raises SIGBUS, which kills the process. A service that cannot rule that out opens its
 * models with mmap=false, which copies the file into process memory at open. (Replacing the file by a
 * rename, as minfer_synth does, is safe either way.)
 *
 * Strings returned as `const char*` are owned by the library. Strings written into caller buffers
 * follow one convention: (buf, cap, len_out); *len_out receives the full length without the NUL; if cap
 * is too small the call writes nothing and returns MINFER_ERR_BUFFER_TOO_SMALL.
 */
#ifndef MINFER_H
#define MINFER_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(MINFER_BUILDING)
#    define MINFER_API __declspec(dllexport)
#  else
#    define MINFER_API
#  endif
#else
#  define MINFER_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- versions ------------------------------------------------------------------------------- */

#define MINFER_VERSION_MAJOR 0
#define MINFER_VERSION_MINOR 1
#define MINFER_VERSION_PATCH 0
#define MINFER_VERSION_STRING "0.1.0"
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define MINFER_VERSION_NUMBER (MINFER_VERSION_MAJOR * 10000 + MINFER_VERSION_MINOR * 100 + MINFER_VERSION_PATCH)

/* The version of the library actually loaded, as "MAJOR.MINOR.PATCH" and as a number. */
MINFER_API const char* minfer_version(void);
MINFER_API int32_t minfer_version_number(void);
/* One line describing the build: CUDA support and archs, compiler. */
MINFER_API const char* minfer_build_info(void);

/* ---- statuses ------------------------------------------------------------------------------- */

/* Values are explicit and never reused. */
typedef enum minfer_status {
    MINFER_OK = 0,
    MINFER_ERR_INVALID_ARGUMENT = 1, /* NULL pointer, bad token id, bad index, ... */
    MINFER_ERR_IO = 2,               /* the file cannot be opened, mapped or written */
    MINFER_ERR_BAD_MODEL = 3,        /* the file is not a valid GGUF model */
    MINFER_ERR_UNSUPPORTED = 4,      /* valid, but not supported by this build (type, arch, feature) */
    MINFER_ERR_OUT_OF_MEMORY = 5,    /* host or device memory exhausted; nothing was leaked */
    MINFER_ERR_DEVICE = 6,           /* a CUDA error; sticky errors poison the model handle */
    MINFER_ERR_UNKNOWN_OPTION = 7,   /* no option of that name */
    MINFER_ERR_OPTION_VALUE = 8,     /* the value does not parse as the option's type or is out of range */
    MINFER_ERR_OPTION_LOCKED = 9,    /* a load-time option set on an open model */
    MINFER_ERR_CONTEXT_FULL = 10,    /* the tokens do not fit in the context; nothing was appended */
    MINFER_ERR_BUSY = 11,            /* the context is in use by another thread */
    MINFER_ERR_NOT_FOUND = 12,       /* no such metadata key, tensor or option index */
    MINFER_ERR_WRONG_TYPE = 13,      /* the metadata value has another type than the one asked for */
    MINFER_ERR_BUFFER_TOO_SMALL = 14,/* the caller's buffer cannot hold the answer; *len_out says how much */
    MINFER_ERR_CANCELLED = 15,       /* a progress callback asked to stop */
    MINFER_ERR_INTERNAL = 16         /* a bug in minfer; please report the message */
} minfer_status;

/* "MINFER_OK", "MINFER_ERR_BAD_MODEL", ...; "MINFER_ERR_UNKNOWN_STATUS" for values not listed above. */
MINFER_API const char* minfer_status_string(minfer_status status);
/* The message of the most recent failure on the calling thread ("" if none). Valid until the next
 * failing call on this thread. */
MINFER_API const char* minfer_last_error(void);

/* ---- logging and progress ------------------------------------------------------------------- */

typedef enum minfer_log_level {
    MINFER_LOG_ERROR = 1,
    MINFER_LOG_WARN = 2,
    MINFER_LOG_INFO = 3,
    MINFER_LOG_DEBUG = 4
} minfer_log_level;

/* Receives one complete line (no trailing newline). Called from the thread doing the work. */
typedef void (*minfer_log_fn)(minfer_log_level level, const char* message, void* user_data);
/* Installs the process-wide log callback; NULL (the default) makes the library silent. Which levels
 * reach it is chosen by the `log_level` option. */
MINFER_API void minfer_set_log_callback(minfer_log_fn fn, void* user_data);

/* Reports long work: `stage` names it ("load", "synth", ...), `done` of `total` units are finished.
 * Return 0 to continue, non-zero to cancel (the call then returns MINFER_ERR_CANCELLED). */
typedef int (*minfer_progress_fn)(const char* stage, uint64_t done, uint64_t total, void* user_data);
/* Installs the process-wide progress callback; NULL (the default) disables reports. */
MINFER_API void minfer_set_progress_callback(minfer_progress_fn fn, void* user_data);

/* ---- handles -------------------------------------------------------------------------------- */

typedef struct minfer_model minfer_model;     /* immutable after open; share freely */
typedef struct minfer_context minfer_context; /* KV cache and sampler state; one thread at a time */

/* ---- options -------------------------------------------------------------------------------- */

/*
 * Options are typed key/value pairs given as strings. The table (see docs/options.md, generated from
 * it) lists each option's type, default, bounds and scope:
 *   load    - read once by minfer_open; setting it on an open model returns MINFER_ERR_OPTION_LOCKED.
 *   runtime - may be changed on an open model at any time; takes effect at the next call.
 *
 * minfer_set_option(NULL, key, value) sets the process-wide default used by models opened later.
 * minfer_set_option(model, key, value) sets it for that model only.
 * An unknown key, a value of the wrong type or out of range returns an error and changes nothing.
 */
MINFER_API minfer_status minfer_set_option(minfer_model* model, const char* key, const char* value);
/* The value in force, in canonical form ("true", "4096", "auto"); model NULL reads the defaults. */
MINFER_API minfer_status minfer_get_option(const minfer_model* model, const char* key, char* buf, size_t cap,
                                           size_t* len_out);

typedef enum minfer_option_type {
    MINFER_OPTION_BOOL = 1,  /* true|false|1|0|on|off|yes|no */
    MINFER_OPTION_INT = 2,   /* a decimal integer within [min, max] */
    MINFER_OPTION_ENUM = 3,  /* one of the '|'-separated choices */
    MINFER_OPTION_BYTES = 4  /* an integer byte count; suffixes K, M, G, KiB, MiB, GiB (powers of 1024) */
} minfer_option_type;

typedef enum minfer_option_scope {
    MINFER_OPTION_SCOPE_LOAD = 1,
    MINFER_OPTION_SCOPE_RUNTIME = 2
} minfer_option_scope;

MINFER_API size_t minfer_option_count(void);
/* Describes option `index` (0 .. count-1). Any out pointer may be NULL. For ENUM, *choices is
 * "a|b|c"; otherwise "". For INT and BYTES, *min_value / *max_value are the inclusive bounds as text;
 * otherwise "". */
MINFER_API minfer_status minfer_option_info(size_t index, const char** name, minfer_option_type* type,
                                            minfer_option_scope* scope, const char** default_value,
                                            const char** min_value, const char** max_value,
                                            const char** choices, const char** doc);

/* ---- models --------------------------------------------------------------------------------- */

/* Opens and validates a GGUF model with the process-wide option defaults. On failure *out is NULL.
 * A path that is not a regular file (a FIFO, a directory, a device) is refused with MINFER_ERR_IO
 * before it is opened, so the call never waits for a writer. */
MINFER_API minfer_status minfer_open(const char* path, minfer_model** out);
/* The same, with `n_options` key/value pairs applied on top of the defaults for this model only
 * (load-time and runtime options alike). Every pair is validated before anything is loaded. */
MINFER_API minfer_status minfer_open_with_options(const char* path, const char* const* keys,
                                                  const char* const* values, size_t n_options,
                                                  minfer_model** out);
/* Releases the caller's reference. Contexts still alive keep the model's memory until they are freed.
 * NULL is a no-op. */
MINFER_API void minfer_close(minfer_model* model);

/* Hyperparameters and metadata. These never fail on a valid model; on NULL they return 0 / "". */
MINFER_API const char* minfer_model_architecture(const minfer_model* model); /* "qwen2", "qwen3" */
MINFER_API const char* minfer_model_name(const minfer_model* model);         /* general.name or "" */
MINFER_API uint64_t minfer_model_n_params(const minfer_model* model);
MINFER_API uint64_t minfer_model_file_size(const minfer_model* model);
MINFER_API int32_t minfer_model_n_vocab(const minfer_model* model);
MINFER_API int32_t minfer_model_n_ctx_train(const minfer_model* model);
MINFER_API int32_t minfer_model_n_embd(const minfer_model* model);
MINFER_API int32_t minfer_model_n_layer(const minfer_model* model);
MINFER_API int32_t minfer_model_n_head(const minfer_model* model);
MINFER_API int32_t minfer_model_n_head_kv(const minfer_model* model);
MINFER_API int32_t minfer_model_head_dim(const minfer_model* model);
MINFER_API int32_t minfer_model_n_ff(const minfer_model* model);
MINFER_API double minfer_model_rope_freq_base(const minfer_model* model);
MINFER_API double minfer_model_rms_norm_eps(const minfer_model* model);
/* The backend the model runs on: "cpu" or "cuda" (the `device` option resolved at open). */
MINFER_API const char* minfer_model_device(const minfer_model* model);
/* 1 when the output projection shares the token embedding. */
MINFER_API int32_t minfer_model_tied_output(const minfer_model* model);

/* Device (GPU) memory of a model in bytes, by category; all zero on the CPU backend. The KV cache and
   scratch figures cover the model's contexts that are alive at the time of the call. */
typedef struct minfer_vram {
    uint64_t weights;   /* the uploaded weights (the weight registry) and device-side copies of some for decode */
    uint64_t w16_cache; /* the persistent f16 copy of quantized matmul weights */
    uint64_t kv_cache;  /* KV caches */
    uint64_t scratch;   /* activations, dequantization and attention scratch */
} minfer_vram;
MINFER_API minfer_status minfer_model_vram(const minfer_model* model, minfer_vram* out);

/* How prefill matmuls get f16 weights on the GPU, decided at open from the options w16_cache,
   w16_enable_bytes, fused_b and mmq (the log says why): "two_pass" (dequantized into a scratch on every
   call), "w16_cache" (a persistent f16 copy made at load), "fused" (dequantized inside the GEMM); "cpu"
   on the CPU backend. */
MINFER_API const char* minfer_model_prefill_path(const minfer_model* model);
/* The f16 GEMM of prefill on the GPU: "own" (minfer's tensor-core kernel) or "cublas"; "" on the CPU. */
MINFER_API const char* minfer_model_gemm(const minfer_model* model);
/* Milliseconds the warm pass of the f16 weight cache took at open; 0 without one. */
MINFER_API double minfer_model_warm_ms(const minfer_model* model);

/* Benchmark helper: the median time in milliseconds, over `reps` runs, of one dequantization of every
   per-layer matmul weight to f16 on the device: the work the two-pass prefill path repeats on every
   call. MINFER_ERR_UNSUPPORTED on the CPU backend. Allocates a scratch of the largest such weight for
   the duration of the call. */
MINFER_API minfer_status minfer_bench_dequant_sweep(minfer_model* model, int32_t reps, double* ms_out);

/* Tensor types are the GGUF type ids (0 = f32, 1 = f16, 8 = q8_0, 12 = q4_K, ...). */
MINFER_API const char* minfer_type_name(int32_t type); /* "q4_K"; "" for an unknown id */
/* The distinct tensor types in the file, ascending. Writes min(cap, n) ids; *n_out receives n. */
MINFER_API minfer_status minfer_model_tensor_types(const minfer_model* model, int32_t* types, size_t cap,
                                                   size_t* n_out);
MINFER_API size_t minfer_model_tensor_count(const minfer_model* model);
/* Describes tensor `index` in file order. dims has room for 4; unused entries are set to 1. Any out
 * pointer may be NULL. `offset` is from the start of the file. */
MINFER_API minfer_status minfer_model_tensor_info(const minfer_model* model, size_t index, const char** name,
                                                  int32_t* type, int32_t* n_dims, int64_t* dims,
                                                  uint64_t* offset, uint64_t* n_bytes);

/* GGUF metadata, by key. */
typedef enum minfer_meta_type {
    MINFER_META_UINT8 = 0,
    MINFER_META_INT8 = 1,
    MINFER_META_UINT16 = 2,
    MINFER_META_INT16 = 3,
    MINFER_META_UINT32 = 4,
    MINFER_META_INT32 = 5,
    MINFER_META_FLOAT32 = 6,
    MINFER_META_BOOL = 7,
    MINFER_META_STRING = 8,
    MINFER_META_ARRAY = 9,
    MINFER_META_UINT64 = 10,
    MINFER_META_INT64 = 11,
    MINFER_META_FLOAT64 = 12
} minfer_meta_type;

MINFER_API size_t minfer_model_meta_count(const minfer_model* model);
/* The key at `index` in file order, or NULL when out of range. */
MINFER_API const char* minfer_model_meta_key(const minfer_model* model, size_t index);
/* The value's type; for arrays also the element type and length (NULL pointers allowed). */
MINFER_API minfer_status minfer_model_meta_type(const minfer_model* model, const char* key,
                                                minfer_meta_type* type, minfer_meta_type* elem_type,
                                                uint64_t* array_len);
/* Integer (any integer type or bool; unsigned values above INT64_MAX are refused) and float (float32 or
 * float64) values. MINFER_ERR_NOT_FOUND / MINFER_ERR_WRONG_TYPE otherwise. */
MINFER_API minfer_status minfer_model_meta_int(const minfer_model* model, const char* key, int64_t* out);
MINFER_API minfer_status minfer_model_meta_float(const minfer_model* model, const char* key, double* out);
/* String values. Also renders any scalar as text (so every non-array key can be printed). */
MINFER_API minfer_status minfer_model_meta_string(const minfer_model* model, const char* key, char* buf,
                                                  size_t cap, size_t* len_out);

/* ---- contexts and inference ----------------------------------------------------------------- */

/* A context of `ctx_len` tokens (the option of that name, read when the context is created). */
MINFER_API minfer_status minfer_context_create(minfer_model* model, minfer_context** out);
/* NULL is a no-op. */
MINFER_API void minfer_context_free(minfer_context* ctx);
MINFER_API int32_t minfer_context_n_ctx(const minfer_context* ctx);
/* Tokens currently held in the KV cache. Any thread, at any time (see "Thread safety"). */
MINFER_API int32_t minfer_context_n_past(const minfer_context* ctx);

/* Appends `n` tokens (ids in [0, n_vocab)) to the context and computes the logits of the last one.
 * MINFER_ERR_CONTEXT_FULL when they do not fit, checked first: then no token is read, so `n` beyond
 * the buffer is refused safely. MINFER_ERR_INVALID_ARGUMENT for a bad id. On any error the context is
 * unchanged. */
MINFER_API minfer_status minfer_prefill(minfer_context* ctx, const int32_t* tokens, size_t n);
/* Picks the next token from the current logits with the context's sampler (greedy by default: the
 * highest logit, the lowest id on ties), appends it, computes the logits that follow it and returns it
 * in *token. Needs logits (a prefill or
 * decode before it); MINFER_ERR_CONTEXT_FULL when there is no room; MINFER_ERR_INVALID_ARGUMENT when
 * every token is banned (each logit is -INFINITY or NaN after the penalties and the logit bias). On any
 * error the context is unchanged, the sampler's generator included: the next decode draws what this one
 * would have drawn. */
MINFER_API minfer_status minfer_decode(minfer_context* ctx, int32_t* token);
/* Copies the logits of the last processed position (n_vocab floats) into out (cap floats).
 * MINFER_ERR_INVALID_ARGUMENT when there are none yet (after create, reset or truncate). */
MINFER_API minfer_status minfer_context_logits(minfer_context* ctx, float* out, size_t cap);
/* Empties the KV cache. */
MINFER_API minfer_status minfer_context_reset(minfer_context* ctx);
/* Keeps the first n_keep tokens of the KV cache (0 <= n_keep <= n_past); the logits are dropped until the
 * next prefill or decode. */
MINFER_API minfer_status minfer_context_truncate(minfer_context* ctx, int32_t n_keep);

/* ---- tokenizer ------------------------------------------------------------------------------ */

/*
 * The model's own vocabulary (byte-level BPE, `tokenizer.ggml.model` = gpt2, with the Qwen2
 * pre-tokenizer). A model whose tokenizer minfer does not implement still opens; these calls then
 * return MINFER_ERR_UNSUPPORTED naming it.
 */

/* Text (UTF-8, `len` bytes; invalid bytes are encoded as their byte tokens) -> token ids. With
 * parse_special, control tokens written in the text (e.g. "<|im_start|>") become their ids; without,
 * they are plain text. Writes the ids when n <= cap; *n_out receives n; MINFER_ERR_BUFFER_TOO_SMALL
 * (nothing written) when cap is smaller. */
MINFER_API minfer_status minfer_tokenize(const minfer_model* model, const char* text, size_t len, int32_t parse_special,
                                         int32_t* tokens, size_t cap, size_t* n_out);
/* The raw bytes of one token (a piece of a UTF-8 character is possible; special tokens give their
 * text). Buffer convention as above; the bytes are NUL-terminated. */
MINFER_API minfer_status minfer_token_to_piece(const minfer_model* model, int32_t token, char* buf, size_t cap,
                                               size_t* len_out);
/* The text of a token sequence: the pieces concatenated, with every invalid UTF-8 sequence replaced by
 * U+FFFD, exactly as the streaming decoder below emits it. */
MINFER_API minfer_status minfer_detokenize(const minfer_model* model, const int32_t* tokens, size_t n, char* buf,
                                           size_t cap, size_t* len_out);

typedef enum minfer_special_token {
    MINFER_TOKEN_BOS = 0,
    MINFER_TOKEN_EOS = 1,
    MINFER_TOKEN_EOT = 2,      /* end of turn (<|im_end|> for Qwen chat models) */
    MINFER_TOKEN_IM_START = 3,
    MINFER_TOKEN_IM_END = 4,
    MINFER_TOKEN_PAD = 5
} minfer_special_token;
/* The id of a special token, or -1 when the vocabulary has none. */
MINFER_API int32_t minfer_model_special_token(const minfer_model* model, minfer_special_token which);
/* 1 when generation should stop at this token (eos, end of turn, im_end, or another end-of-generation
 * control token of the vocabulary). */
MINFER_API int32_t minfer_token_is_eog(const minfer_model* model, int32_t token);

/* The model's `tokenizer.chat_template` (Jinja source, not evaluated); MINFER_ERR_NOT_FOUND when absent. */
MINFER_API minfer_status minfer_model_chat_template(const minfer_model* model, char* buf, size_t cap, size_t* len_out);
/* Formats messages as ChatML, the format of Qwen chat models, with no template engine:
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then "<|im_start|>assistant\n" when
 * add_assistant is non-zero. Roles and contents are UTF-8 strings. */
MINFER_API minfer_status minfer_chat_format(const char* const* roles, const char* const* contents, size_t n_messages,
                                            int32_t add_assistant, char* buf, size_t cap, size_t* len_out);

/* Streaming detokenizer: feed tokens one at a time, get text back only in whole UTF-8 characters, so a
 * character split over several tokens is never emitted in parts. Invalid sequences become U+FFFD. The
 * concatenation of every push and the final flush equals minfer_detokenize of the same tokens. */
typedef struct minfer_detokenizer minfer_detokenizer;
MINFER_API minfer_status minfer_detokenizer_create(const minfer_model* model, minfer_detokenizer** out);
/* Appends a token; writes the text that became complete (possibly none). Buffer convention as above;
 * on MINFER_ERR_BUFFER_TOO_SMALL the token is not consumed. */
MINFER_API minfer_status minfer_detokenizer_push(minfer_detokenizer* d, int32_t token, char* buf, size_t cap,
                                                 size_t* len_out);
/* Emits what is still held (an incomplete character becomes U+FFFD) and starts over. */
MINFER_API minfer_status minfer_detokenizer_flush(minfer_detokenizer* d, char* buf, size_t cap, size_t* len_out);
MINFER_API void minfer_detokenizer_free(minfer_detokenizer* d);

/* ---- sampling ------------------------------------------------------------------------------- */

/* Per-context sampling settings. `size` must be sizeof(minfer_sampler_params); fill the defaults with
 * minfer_sampler_params_init, then change what you need. The chain, in order: repetition, presence and
 * frequency penalties over the last `penalty_last_n` tokens of the context; logit bias; then, when
 * temperature > 0: top-k, top-p, min-p, temperature, and a draw from a generator seeded by `seed` (the
 * same seed and inputs give the same tokens on the same backend). temperature <= 0 is greedy. */
typedef struct minfer_sampler_params {
    uint32_t size;
    float temperature;       /* default 0.8; <= 0: greedy */
    int32_t top_k;           /* default 40; <= 0: off */
    float top_p;             /* default 0.95; >= 1: off */
    float min_p;             /* default 0.05; <= 0: off */
    float repeat_penalty;    /* default 1.0 (off): logits of recent tokens divided (if > 0) or multiplied */
    float presence_penalty;  /* default 0: subtracted once from the logit of each recent token */
    float frequency_penalty; /* default 0: subtracted per occurrence */
    int32_t penalty_last_n;  /* default 64; 0: penalties off; -1: the whole context */
    uint64_t seed;           /* default 42; every value, 0 included, is an ordinary seed */
} minfer_sampler_params;

MINFER_API void minfer_sampler_params_init(minfer_sampler_params* params);
/* Validates and applies; MINFER_ERR_INVALID_ARGUMENT (naming the field) changes nothing. Contexts
 * start greedy (temperature 0). Reseeds the generator. */
MINFER_API minfer_status minfer_context_set_sampler(minfer_context* ctx, const minfer_sampler_params* params);
/* Adds `bias` to the logit of `token` before sampling (-INFINITY bans it; with every token banned,
 * minfer_decode fails); a second call for the same token replaces it. */
MINFER_API minfer_status minfer_context_set_logit_bias(minfer_context* ctx, int32_t token, float bias);
MINFER_API minfer_status minfer_context_clear_logit_bias(minfer_context* ctx);
/* Stop strings: after each decode, the context checks whether the text generated since the last
 * prefill now contains one of them. Replaces the previous list; n = 0 clears it. */
MINFER_API minfer_status minfer_context_set_stop_strings(minfer_context* ctx, const char* const* stops, size_t n);

typedef enum minfer_stop_reason {
    MINFER_STOP_NONE = 0,
    MINFER_STOP_EOG = 1,    /* the last decoded token ends generation (minfer_token_is_eog) */
    MINFER_STOP_STRING = 2, /* the generated text now contains a stop string */
    MINFER_STOP_LENGTH = 3  /* batch sequences: max_tokens reached, or the sequence's positions are used up */
} minfer_stop_reason;
/* Why the last minfer_decode says generation should stop; MINFER_STOP_NONE after a prefill. Any
 * thread, at any time (see "Thread safety"). */
MINFER_API minfer_stop_reason minfer_context_stop_reason(const minfer_context* ctx);

/* ---- batches: many sequences in one forward pass ---------------------------------------------- */

/*
 * A batch serves many sequences of one model at once (continuous batching). Sequences join with their
 * prompt and settings (minfer_batch_add) and wait in a queue; each minfer_batch_step runs ONE forward pass
 * over every active sequence - a decode token of each running sequence plus prefill chunks of newly
 * admitted ones, within max_step_tokens - and reports each sequence's new token, the text it completes and
 * whether it finished. Each weight is read once per step for all sequences, so the aggregate speed grows
 * with the number of sequences. KV memory is one pool of pages shared by the sequences (kv_tokens
 * positions): many short and a few long sequences fit together. A sequence that needs memory when the pool
 * has none fails alone (its event carries MINFER_ERR_OUT_OF_MEMORY) and the others go on; a sequence is
 * admitted only when the free pages hold its prompt.
 *
 * Threads: minfer_batch_add, minfer_batch_cancel and minfer_batch_stats may be called from any thread at
 * any time, also while another thread steps. minfer_batch_step is called by one thread at a time (a
 * second concurrent call returns MINFER_ERR_BUSY); a service typically runs one stepping thread and adds
 * and cancels from its request handlers. minfer_batch_free must not race any other call on the batch.
 * A batch keeps its model alive; the single-context API keeps working alongside it.
 */
typedef struct minfer_batch minfer_batch;

typedef struct minfer_batch_params {
    uint32_t size;            /* sizeof(minfer_batch_params) */
    int32_t max_sequences;    /* default 64: sequences in a forward pass at once (1 .. 4096) */
    int32_t max_queue;        /* default 256 (>= 1): sequences waiting for a place; minfer_batch_add beyond: BUSY */
    int32_t max_step_tokens;  /* default 512: tokens per forward pass, >= max_sequences */
    int32_t n_ctx;            /* default 0: the model's ctx_len option; the most positions of one sequence (<= 4194304) */
    int64_t kv_tokens;        /* default 0: max(n_ctx, 256 * max_sequences); positions of the shared KV pool */
} minfer_batch_params;
MINFER_API void minfer_batch_params_init(minfer_batch_params* params);
/* Allocates the KV pool and scratch now (MINFER_ERR_OUT_OF_MEMORY when they do not fit). */
MINFER_API minfer_status minfer_batch_create(minfer_model* model, const minfer_batch_params* params, minfer_batch** out);
/* Ends every sequence without reporting them. NULL is a no-op. */
MINFER_API void minfer_batch_free(minfer_batch* batch);

typedef struct minfer_sequence_params {
    uint32_t size;                         /* sizeof(minfer_sequence_params) */
    const int32_t* prompt;                 /* the prompt's token ids (copied) */
    size_t n_prompt;                       /* >= 1, at most n_ctx */
    int32_t max_tokens;                    /* default 0: until the sequence's n_ctx positions are used */
    const minfer_sampler_params* sampler;  /* default NULL: greedy; else validated as by minfer_context_set_sampler */
    const char* const* stops;              /* stop strings (copied); the text stops before the first one found */
    size_t n_stops;
} minfer_sequence_params;
MINFER_API void minfer_sequence_params_init(minfer_sequence_params* params);
/* Queues a sequence; *id_out receives its id (never 0). MINFER_ERR_BUSY when the queue is full;
 * MINFER_ERR_INVALID_ARGUMENT for an empty prompt, a token outside the vocabulary, a prompt longer than
 * n_ctx or the pool, bad sampler settings or an empty stop string. Nothing is queued on error. */
MINFER_API minfer_status minfer_batch_add(minfer_batch* batch, const minfer_sequence_params* params, uint64_t* id_out);
/* Cancels a queued or running sequence; the next step frees its memory and reports it (finished,
 * MINFER_ERR_CANCELLED). MINFER_ERR_NOT_FOUND for an id that is unknown or already finished. */
MINFER_API minfer_status minfer_batch_cancel(minfer_batch* batch, uint64_t id);

typedef struct minfer_batch_event {
    uint64_t id;               /* the sequence */
    int32_t token;             /* the new token; -1 when the event has none (cancelled, failed) */
    int32_t finished;          /* 1: the sequence is over and its id is forgotten */
    minfer_stop_reason reason; /* when finished with MINFER_OK: EOG, STRING or LENGTH */
    minfer_status status;      /* MINFER_OK, or why the sequence ended: CANCELLED, OUT_OF_MEMORY, ... */
    const char* text;          /* UTF-8 text this token completes, whole characters only, NUL-terminated */
    size_t text_len;           /* (it may hold NUL bytes: use text_len); text that may start a stop string is
                                  held back and comes with a later event */
    const char* error;         /* the message when status != MINFER_OK, else "" */
} minfer_batch_event;
/* Runs one step and writes its events (at most cap; the rest come first at the next call, which then runs
 * no forward pass). When no sequence is queued or running it waits up to wait_ms milliseconds for one
 * (0: returns at once) and *n_out may be 0. Event strings are valid until the next call on the batch.
 * A failed forward pass fails the sequences in it (their events carry the status) and the step returns
 * MINFER_OK; the call itself fails only for bad arguments or MINFER_ERR_BUSY. */
MINFER_API minfer_status minfer_batch_step(minfer_batch* batch, int32_t wait_ms, minfer_batch_event* events, size_t cap,
                                           size_t* n_out);

typedef struct minfer_batch_stats {
    uint32_t size;                /* sizeof(minfer_batch_stats) */
    int32_t active;               /* sequences with a place in the forward passes */
    int32_t queued;               /* sequences waiting for one */
    int32_t last_step_tokens;     /* tokens in the last forward pass */
    int32_t last_step_sequences;  /* sequences in it */
    int32_t kv_pages;             /* pages of 16 positions in the KV pool */
    int32_t kv_pages_free;
    uint64_t steps;               /* forward passes run */
    uint64_t tokens_generated;    /* tokens sampled */
} minfer_batch_stats;
/* Any thread, any time. `out->size` must be set to sizeof(minfer_batch_stats). */
MINFER_API minfer_status minfer_batch_stats_get(const minfer_batch* batch, minfer_batch_stats* out);

/* ---- synthetic models ----------------------------------------------------------------------- */

/* Writes a GGUF model of a named shape with random weights (normal, std 0.02; norms near 1) and a
 * built-in byte-level tokenizer, for tests and benchmarks. `preset`: see minfer_synth_preset_name;
 * `mix`: the type of the matmul weights: "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
 * "q2_K" .. "q6_K", or "q4_K_M" (q4_K, with q6_K for the output and some attn_v/ffn_down); norms and
 * biases stay f32. The same seed gives the same file. */
MINFER_API minfer_status minfer_synth(const char* path, const char* preset, const char* mix, uint64_t seed);
/* As minfer_synth, but the tokenizer comes from a Hugging Face tokenizer.json (byte-level BPE with the
 * Qwen2 pre-tokenizer, as Qwen2/Qwen3 ship it) and optionally its tokenizer_config.json (NULL: none):
 * model.vocab by id plus added_tokens at their ids (special ones as control tokens, others as
 * user-defined), the merges, bos/eos/pad from the config (without one, eos is "<|endoftext|>") and the
 * config's chat_template. The vocabulary size is the larger of the preset's and the token count, padded
 * with unused tokens. MINFER_ERR_IO when a file cannot be read, MINFER_ERR_BAD_MODEL for invalid JSON or
 * an inconsistent vocabulary, MINFER_ERR_UNSUPPORTED for another tokenizer model, normalizer,
 * pre-tokenizer or decoder (the message names it). */
MINFER_API minfer_status minfer_synth_vocab(const char* path, const char* preset, const char* mix, uint64_t seed,
                                            const char* tokenizer_json, const char* tokenizer_config_json);
MINFER_API size_t minfer_synth_preset_count(void);
/* The name of preset `index`, or NULL when out of range. */
MINFER_API const char* minfer_synth_preset_name(size_t index);

#ifdef __cplusplus
}
#endif

#endif /* MINFER_H */
