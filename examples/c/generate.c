/* Streams a completion through the C ABI, checking the status of every call; on a failure it prints the
 * status name and the library's message and exits with the status (MINFER_ERR_BAD_MODEL is 3, ...).
 *   cc -std=c99 -I include examples/c/generate.c BUILD/libminfer.a -lstdc++ -lm -lpthread -o generate
 *   ./generate MODEL.gguf ["Once upon a time"] [32] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer.h"

static minfer_status report(minfer_status st, const char* what) { /* the message is per thread: read it now */
    if (st != MINFER_OK) fprintf(stderr, "%s: %s: %s\n", what, minfer_status_string(st), minfer_last_error());
    return st;
}

static minfer_status out_of_memory(const char* what) {
    fprintf(stderr, "%s: out of memory\n", what);
    return MINFER_ERR_OUT_OF_MEMORY;
}

/* The prompt's tokens in a malloc'ed array: the count first (MINFER_ERR_BUFFER_TOO_SMALL), then the ids. */
static minfer_status tokenize(const minfer_model* model, const char* text, int32_t** out, size_t* n) {
    minfer_status st = minfer_tokenize(model, text, strlen(text), 0, NULL, 0, n);
    if (st == MINFER_ERR_BUFFER_TOO_SMALL) {
        if (!(*out = malloc(*n * sizeof **out))) return out_of_memory("tokenize");
        st = minfer_tokenize(model, text, strlen(text), 0, *out, *n, n);
    }
    return report(st, "tokenize");
}

/* Prints the text a token completes (token < 0: what is held back), growing the buffer when asked to. */
static minfer_status emit(minfer_detokenizer* d, int32_t token) {
    char small[64], *buf = small;
    size_t len = 0, cap = sizeof small;
    minfer_status st;
    while ((st = token >= 0 ? minfer_detokenizer_push(d, token, buf, cap, &len) : minfer_detokenizer_flush(d, buf, cap, &len))
           == MINFER_ERR_BUFFER_TOO_SMALL && buf == small)
        if (!(buf = malloc(cap = len + 1))) return out_of_memory("detokenize");
    if (st == MINFER_OK) fwrite(buf, 1, len, stdout), fflush(stdout);
    if (buf != small) free(buf);
    return report(st, "detokenize");
}

int main(int argc, char** argv) {
    long i, n = argc > 3 ? strtol(argv[3], NULL, 10) : 32;
    minfer_model* model = NULL;
    minfer_context* ctx = NULL;
    minfer_detokenizer* d = NULL;
    int32_t *tokens = NULL, tok;
    size_t n_tokens = 0;
    minfer_status st;
    if (argc < 2) return fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [N]\n", argv[0]), 2;
    st = report(minfer_open(argv[1], &model), "open");
    if (!st) st = report(minfer_context_create(model, &ctx), "context");
    if (!st) st = report(minfer_detokenizer_create(model, &d), "detokenizer");
    if (!st) st = tokenize(model, argc > 2 ? argv[2] : "Once upon a time", &tokens, &n_tokens);
    if (!st) st = report(minfer_prefill(ctx, tokens, n_tokens), "prefill");
    for (i = 0; !st && i < n; ++i) {
        if ((st = report(minfer_decode(ctx, &tok), "decode")) || minfer_context_stop_reason(ctx) == MINFER_STOP_EOG) break;
        st = emit(d, tok);
    }
    if (!st && !(st = emit(d, -1))) printf("\n");
    free(tokens);
    minfer_detokenizer_free(d);
    minfer_context_free(ctx);
    minfer_close(model);
    return (int)st;
}
