/*
 * minfer - command line for the minfer inference engine. C99 against include/minfer.h only.
 *
 *   minfer run [-m MODEL.gguf] [-p TEXT] [-n N] [sampling flags]   (embedded default model without -m)
 *   minfer chat [-m MODEL.gguf]
 *   minfer tokenize -m MODEL.gguf --prompt TEXT [--parse-special]
 *   minfer info MODEL.gguf [--meta] [--tensors]
 *   minfer synth --preset NAME [--mix MIX] [--seed N] [--vocab tokenizer.json] -o OUT.gguf
 *   minfer bench -m MODEL.gguf [-p 512] [-n 128] [-r 3] [-d 0] [--option KEY=VALUE]...
 *   minfer options [--markdown]
 *   minfer version
 *
 * Errors print the status name and the library's message on stderr and exit 1; usage errors exit 2.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- main ------------------------------------------------------------------------------------ */

static const char* const MAIN_HELP =
    "usage: minfer COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  run                 prompt -> streamed text (an embedded default model when no -m is given)\n"
    "  chat                interactive ChatML conversation\n"
    "  tokenize            text -> token ids\n"
    "  info MODEL.gguf     validate a model and describe it\n"
    "  synth               write a synthetic Qwen2/Qwen3 model with random weights\n"
    "  bench -m MODEL      prefill and decode speed in tokens per second\n"
    "  options             list the library's options\n"
    "  version             print the library version and build\n"
    "\n"
    "'minfer COMMAND --help' describes each command.\n";

static int dispatch(const char* cmd, int argc, char** argv) {
    if (is_help(cmd)) {
        fputs(MAIN_HELP, stdout);
        return 0;
    }
    if (strcmp(cmd, "run") == 0) return cmd_run(argc, argv);
    if (strcmp(cmd, "chat") == 0) return cmd_chat(argc, argv);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc, argv);
    if (strcmp(cmd, "info") == 0) return cmd_info(argc, argv);
    if (strcmp(cmd, "synth") == 0) return cmd_synth(argc, argv);
    if (strcmp(cmd, "options") == 0) return cmd_options(argc, argv);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc, argv);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("%s\n", minfer_build_info());
        return 0;
    }
    fprintf(stderr, "minfer: unknown command '%s'\n\n", cmd);
    fputs(MAIN_HELP, stderr);
    return 2;
}

int main(int argc, char** argv) {
    int rc;
    if (argc < 2) {
        fputs(MAIN_HELP, stderr);
        return 2;
    }
    rc = dispatch(argv[1], argc - 2, argv + 2);
    /* Output that could not be written (a full disk) fails the command. The reason is known only when
     * this last flush fails; an earlier failed write leaves just the stream's error flag. */
    {
        const int err = fflush(stdout) != 0 ? errno : 0;
        if (err != 0 || ferror(stdout)) {
            fprintf(stderr, "minfer: cannot write the output%s%s\n", err ? ": " : "", err ? strerror(err) : "");
            if (rc == 0) rc = 1;
        }
    }
    return rc;
}
