/* statedir: see statedir.h. */
#include "statedir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int statedir_mkdirs(const char *path, err_t *err) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return err_set(err, "%.200s...: path too long", path);
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        int rc = mkdir(dir, 0700);
        int e = errno;
        struct stat st;
        if (rc < 0 && !(e == EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)))
            return err_set(err, "%s: %s", dir, e == EEXIST ? "not a directory" : strerror(e));
        *p = c;
        if (c == '\0') return 0;
    }
}

int statedir_path(const char *leaf, char *buf, size_t size, err_t *err) {
    const char *state = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (state && state[0] == '/') {
        n = snprintf(buf, size, "%s/tachyon", state);
    } else {
        if (!home || home[0] == '\0')
            return err_set(err, "%s: neither XDG_STATE_HOME nor HOME is set", leaf);
        n = snprintf(buf, size, "%s/.local/state/tachyon", home);
    }
    if (n < 0 || (size_t)n + 1 + strlen(leaf) + 1 > size)
        return err_set(err, "%s: the state directory's path is too long", leaf);
    if (statedir_mkdirs(buf, err) < 0) return -1;
    snprintf(buf + n, size - (size_t)n, "/%s", leaf);
    return 0;
}
