/* A C99 program that uses only include/minfer.h: writes a tiny synthetic model, opens it, prefills a
 * prompt and decodes 32 tokens, handling every status. Linked statically against libminfer.a. */
#include <stdio.h>
#include <stdlib.h>

#include "minfer.h"

static int check(minfer_status st, const char* what) {
    if (st == MINFER_OK) return 0;
    fprintf(stderr, "%s: %s: %s\n", what, minfer_status_string(st), minfer_last_error());
    return 1;
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "c_generate.gguf";
    const char* keys[] = {"device", "ctx_len"};
    const char* values[] = {"cpu", "64"};
    const int32_t prompt[] = {72, 101, 108, 108, 111};
    minfer_model* model = NULL;
    minfer_context* ctx = NULL;
    int i, failed = 0;
    if (check(minfer_synth(path, "qwen3-tiny", "q4_K_M", 5), "synth")) return 1;
    if (check(minfer_open_with_options(path, keys, values, 2, &model), "open")) return 1;
    if (check(minfer_context_create(model, &ctx), "context")) {
        minfer_close(model);
        return 1;
    }
    failed = check(minfer_prefill(ctx, prompt, sizeof prompt / sizeof prompt[0]), "prefill");
    for (i = 0; i < 32 && !failed; ++i) {
        int32_t tok = -1;
        failed = check(minfer_decode(ctx, &tok), "decode");
        if (!failed && (tok < 0 || tok >= minfer_model_n_vocab(model))) {
            fprintf(stderr, "decode: token %d outside the vocabulary\n", (int)tok);
            failed = 1;
        }
        if (!failed) printf("%d ", (int)tok);
    }
    printf("\n");
    if (!failed && minfer_context_n_past(ctx) != 5 + 32) {
        fprintf(stderr, "n_past = %d, expected 37\n", (int)minfer_context_n_past(ctx));
        failed = 1;
    }
    minfer_context_free(ctx);
    minfer_close(model);
    if (!failed) printf("c_generate: 32 tokens decoded\n");
    return failed;
}
