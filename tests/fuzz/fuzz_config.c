/*
 * fuzz_config - tcgpud's configuration parser (tools/tcgpud/config.c,
 * libinih underneath) on hostile files. A file either parses, and then
 * every project can be asked about its members, or is refused with a
 * message that names the file and a line ("fuzz.ini:N: ...").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tcgpud/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct tcgpud_config c;
    char err[512] = "";
    const char *groups[] = { "users", "ml" };
    char *text = malloc(size + 1);
    int r;

    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';            /* the parser reads a C string: stop at the first NUL */
    r = tcgpud_config_parse(&c, text, "fuzz.ini", err, sizeof(err));
    if (r == 0) {
        for (int i = 0; i < c.nprojects; i++)
            tcgpud_project_has_member(&c.projects[i], "alice", groups, 2);
    } else if (strncmp(err, "fuzz.ini:", 9)) {
        fprintf(stderr, "fuzz_config: a refusal without file and line: '%s'\n", err);
        abort();
    }
    tcgpud_config_free(&c);
    free(text);
    return 0;
}
