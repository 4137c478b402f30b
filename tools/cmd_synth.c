/* minfer command line: `minfer synth`, synthetic models. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- synth ----------------------------------------------------------------------------------- */

static const char* const SYNTH_HELP =
    "usage: minfer synth --preset NAME [--mix MIX] [--seed N] [--vocab tokenizer.json\n"
    "                    [--vocab-config tokenizer_config.json]] -o OUT.gguf [--quiet]\n"
    "       minfer synth --list\n"
    "\n"
    "Writes a Qwen2/Qwen3 GGUF model of a named shape with random weights (normal, std 0.02; norms near 1)\n"
    "and a built-in byte-level vocabulary. MIX is the type of every matmul weight: f32, f16 (default),\n"
    "bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K; or q4_K_M: q4_K with q6_K for the\n"
    "output and for attn_v/ffn_down in some layers, as common files do. Norms and biases stay f32; K-quant\n"
    "rows that are not whole 256-element super-blocks fall back to q4_0/q5_0/q5_1/q8_0 as converters do.\n"
    "The same seed gives the same file. --list prints the presets.\n"
    "--vocab takes the tokenizer section from a Hugging Face tokenizer.json (byte-level BPE with the Qwen2\n"
    "pre-tokenizer) instead of the built-in byte vocabulary; the vocabulary size grows to fit it;\n"
    "--vocab-config adds the special tokens and chat template of its tokenizer_config.json.\n";

int cmd_synth(int argc, char** argv) {
    const char *preset = NULL, *mix = "f16", *out = NULL, *vocab = NULL, *vocab_config = NULL;
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
        } else if (strcmp(a, "--preset") == 0 || strcmp(a, "--mix") == 0 || strcmp(a, "--seed") == 0 || strcmp(a, "-o") == 0 ||
                   strcmp(a, "--vocab") == 0 || strcmp(a, "--vocab-config") == 0) {
            if (!val) return usage_error("synth", "a flag is missing its value");
            if (strcmp(a, "--preset") == 0) {
                preset = val;
            } else if (strcmp(a, "--mix") == 0) {
                mix = val;
            } else if (strcmp(a, "-o") == 0) {
                out = val;
            } else if (strcmp(a, "--vocab") == 0) {
                vocab = val;
            } else if (strcmp(a, "--vocab-config") == 0) {
                vocab_config = val;
            } else {
                if (!parse_u64(val, &seed)) return usage_error("synth", "--seed expects a non-negative integer of 64 bits");
            }
            ++i;
        } else {
            return usage_error("synth", "unknown argument");
        }
    }
    if (!preset) return usage_error("synth", "--preset is required");
    if (!out) return usage_error("synth", "-o OUT.gguf is required");
    setup_reporting();
    if (vocab_config && !vocab) return usage_error("synth", "--vocab-config needs --vocab");
    st = vocab ? minfer_synth_vocab(out, preset, mix, seed, vocab, vocab_config) : minfer_synth(out, preset, mix, seed);
    if (st != MINFER_OK) return fail_status(st, "synth");
    if (!g_quiet) fprintf(stderr, "wrote %s (preset %s, mix %s, seed %" PRIu64 "; random weights)\n", out, preset, mix, seed);
    return 0;
}
