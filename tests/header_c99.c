/* Compiled as C99 with -Wall -Wextra -pedantic -Werror: the header must stay plain C. Also checks that
 * the runtime version matches the macros the program was compiled with. */
#include "minfer.h"

#include <stdio.h>
#include <string.h>

int main(void) {
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", MINFER_VERSION_MAJOR, MINFER_VERSION_MINOR, MINFER_VERSION_PATCH);
    if (strcmp(minfer_version(), MINFER_VERSION_STRING) != 0 || strcmp(expect, MINFER_VERSION_STRING) != 0) {
        fprintf(stderr, "version mismatch: runtime %s, header %s, parts %s\n", minfer_version(), MINFER_VERSION_STRING, expect);
        return 1;
    }
    if (minfer_version_number() != MINFER_VERSION_NUMBER) {
        fprintf(stderr, "version number mismatch: %d vs %d\n", (int)minfer_version_number(), MINFER_VERSION_NUMBER);
        return 1;
    }
    /* Closing NULL handles is a no-op. */
    minfer_close(NULL);
    minfer_context_free(NULL);
    if (strcmp(minfer_status_string(MINFER_ERR_BAD_MODEL), "MINFER_ERR_BAD_MODEL") != 0) return 1;
    printf("header_c99: ok (%s)\n", minfer_build_info());
    return 0;
}
