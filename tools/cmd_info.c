/* minfer command line: `minfer info`, validate and describe a model. */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

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

int cmd_info(int argc, char** argv) {
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
        if (strcmp(minfer_model_device(m), "cuda") == 0) {
            minfer_vram vram;
            char line[256];
            if (minfer_model_vram(m, &vram) == MINFER_OK) {
                format_vram(&vram, line, sizeof line);
                printf("vram:           %s\n", line);
            }
        }
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
