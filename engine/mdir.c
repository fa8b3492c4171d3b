#include "mdir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embedded.h"

typedef struct mapping {
    char *name;
    const void *data;
    size_t len;
    bool is_mmap; /* munmap on close (false for embedded data and empty files) */
} mapping_t;

struct mdir {
    char *path;
    bool embedded;
    mapping_t *maps;
    int n_maps, cap_maps;
};

int mdir_open(const char *path, mdir_t **out, err_t *err) {
    *out = NULL;
    bool embedded = strcmp(path, MDIR_EMBEDDED) == 0;
    if (!embedded) {
        struct stat st;
        if (stat(path, &st) < 0)
            return err_set(err, "%s: cannot open model directory: %s", path, strerror(errno));
        if (!S_ISDIR(st.st_mode))
            return err_set(err,
                           "%s: not a directory (give the model directory, the one holding "
                           "config.json)",
                           path);
    }
    mdir_t *dir = calloc(1, sizeof *dir);
    if (!dir || !(dir->path = strdup(path))) {
        free(dir);
        return err_set(err, "out of memory");
    }
    dir->embedded = embedded;
    *out = dir;
    return 0;
}

void mdir_close(mdir_t *dir) {
    if (!dir) return;
    for (int i = 0; i < dir->n_maps; i++) {
        if (dir->maps[i].is_mmap) munmap((void *)dir->maps[i].data, dir->maps[i].len);
        free(dir->maps[i].name);
    }
    free(dir->maps);
    free(dir->path);
    free(dir);
}

const char *mdir_path(const mdir_t *dir) {
    return dir->path;
}

static const embedded_file_t *find_embedded(const char *name) {
    for (const embedded_file_t *f = embedded_model_files; f->name; f++)
        if (strcmp(f->name, name) == 0) return f;
    return NULL;
}

static void join(char *buf, size_t size, const mdir_t *dir, const char *name) {
    snprintf(buf, size, "%s/%s", dir->path, name);
}

bool mdir_has(const mdir_t *dir, const char *name) {
    if (dir->embedded) return find_embedded(name) != NULL;
    char full[4096];
    join(full, sizeof full, dir, name);
    return access(full, R_OK) == 0;
}

static int remember(mdir_t *dir, const char *name, const void *data, size_t len, bool is_mmap,
                    err_t *err) {
    if (dir->n_maps == dir->cap_maps) {
        int cap = dir->cap_maps ? 2 * dir->cap_maps : 8;
        mapping_t *maps = realloc(dir->maps, cap * sizeof *maps);
        if (!maps) return err_set(err, "out of memory");
        dir->maps = maps;
        dir->cap_maps = cap;
    }
    char *copy = strdup(name);
    if (!copy) return err_set(err, "out of memory");
    dir->maps[dir->n_maps++] = (mapping_t){copy, data, len, is_mmap};
    return 0;
}

int mdir_map(mdir_t *dir, const char *name, const void **data, size_t *len, err_t *err) {
    for (int i = 0; i < dir->n_maps; i++) {
        if (strcmp(dir->maps[i].name, name) == 0) {
            *data = dir->maps[i].data;
            *len = dir->maps[i].len;
            return 0;
        }
    }
    if (dir->embedded) {
        const embedded_file_t *f = find_embedded(name);
        if (!f) return err_set(err, "embedded model has no file %s", name);
        *data = f->data;
        *len = f->len;
        return remember(dir, name, f->data, f->len, false, err);
    }
    char full[4096];
    join(full, sizeof full, dir, name);
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, "%s: cannot open: %s", full, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return err_set(err, "%s: cannot stat: %s", full, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, "%s: not a regular file", full);
    }
    size_t size = (size_t)st.st_size;
    const void *p = "";
    bool is_mmap = false;
    if (size > 0) {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return err_set(err, "%s: cannot mmap: %s", full, strerror(e));
        }
        is_mmap = true;
    }
    close(fd);
    if (remember(dir, name, p, size, is_mmap, err) < 0) {
        if (is_mmap) munmap((void *)p, size);
        return -1;
    }
    *data = p;
    *len = size;
    return 0;
}

int mdir_read_text(mdir_t *dir, const char *name, char **text, size_t *len, err_t *err) {
    const void *data;
    size_t n;
    if (mdir_map(dir, name, &data, &n, err) < 0) return -1;
    char *copy = malloc(n + 1);
    if (!copy) return err_set(err, "out of memory reading %s", name);
    memcpy(copy, data, n);
    copy[n] = '\0';
    *text = copy;
    if (len) *len = n;
    return 0;
}
