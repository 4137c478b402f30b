/* Shared pieces of the minfer command line (C99, public header only). */
#ifndef MINFER_CLI_H
#define MINFER_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "minfer.h"

#define MAX_OPTIONS 32

extern int g_quiet;

/* Prints "minfer: WHAT: STATUS: message" on stderr; returns 1 (the exit code of a failed command). The
 * message is the one cli_error recorded last, if any (once), else the library's minfer_last_error(). */
int fail_status(minfer_status st, const char* what);
/* For a status the command line makes itself (a file it could not write, memory it could not get):
 * records the message fail_status prints for it, and returns st. */
minfer_status cli_error(minfer_status st, const char* fmt, ...);
/* Parses a non-negative decimal integer of 64 bits (no sign, no spaces, no overflow); 0 when it is not one. */
int parse_u64(const char* s, uint64_t* out);
/* Prints a usage error for subcommand CMD; returns 2. */
int usage_error(const char* cmd, const char* msg);
/* Progress on stderr when it is a terminal (unless --quiet), log lines on stderr. */
void setup_reporting(void);
void human_bytes(uint64_t n, char* buf, size_t cap);
/* "weights 4.4 GiB, f16 cache 0 B, KV cache 224.0 MiB, scratch 1.2 GiB, total 5.8 GiB" */
void format_vram(const minfer_vram* v, char* buf, size_t cap);
int is_help(const char* arg);
/* Splits "key=value" in place into the option arrays. Returns 0, 1 for a malformed pair, 2 when full. */
int split_option(char* pair, const char** keys, const char** values, size_t* n);
double now_seconds(void);
/* Reads a whole file; NULL on error (errno set). *len receives its size. The caller frees. */
char* read_file(const char* path, size_t* len);

int cmd_info(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_options(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);

#endif
