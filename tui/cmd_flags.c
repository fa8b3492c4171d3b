/* `tachyon flags`: the engine flag table, as the command line, the console and the admin
 * endpoint know it. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_flags(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: tachyon flags\n\nLists every engine flag: name, type, how a change "
               "applies (live, rebuild, reload), default and help.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: tachyon flags\n");
        return 2;
    }
    flag_values_t v;
    flags_init(&v);
    printf("%-28s %-6s %-8s %-10s %s\n", "flag", "type", "applies", "default", "what");
    for (int i = 0; i < flags_count(); i++) {
        const flag_def_t *f = flags_at(i);
        char def[64];
        flags_format(f, &v, def, sizeof def);
        printf("--%-26s %-6s %-8s %-10s %s", f->name, flag_type_name(f->type),
               flag_apply_name(f->apply), def, f->help);
        if (f->type == FLAG_ENUM) {
            printf(" (");
            for (const char *const *c = f->choices; *c; c++)
                printf("%s%s", c == f->choices ? "" : ", ", *c);
            printf(")");
        }
        printf("\n");
    }
    return 0;
}
