#include "testutil.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what, const char *path) {
    fprintf(stderr, "testutil: %s %s failed\n", what, path);
    abort();
}

char *tu_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/tachyon-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl)) die("mkdtemp", tmpl);
    return strdup(tmpl);
}

void tu_write(const char *dir, const char *name, const void *data, size_t len) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) die("fopen", path);
    if (len && fwrite(data, 1, len, f) != len) die("fwrite", path);
    if (fclose(f) != 0) die("fclose", path);
}

void tu_write_text(const char *dir, const char *name, const char *text) {
    tu_write(dir, name, text, strlen(text));
}

char *tu_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) die("fread", path);
    buf[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

char *tu_copy_dir(const char *src) {
    char *dst = tu_tmpdir();
    DIR *d = opendir(src);
    if (!d) die("opendir", src);
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", src, e->d_name);
        struct stat st;
        if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) continue;
        size_t n;
        char *data = tu_read(path, &n);
        if (!data) die("read", path);
        tu_write(dst, e->d_name, data, n);
        free(data);
    }
    closedir(d);
    return dst;
}

void tu_safetensors_add(const char *dir, const char *file, const char *name, const char *dtype,
                        const int64_t *shape, int ndim, const void *data, size_t nbytes) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t len;
    unsigned char *bytes = (unsigned char *)tu_read(path, &len);
    if (!bytes || len < 8) die("read safetensors", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | bytes[i];
    if (hlen > len - 8) die("safetensors header of", path);
    char *htext = strndup((char *)bytes + 8, hlen);
    cJSON *hdr = cJSON_Parse(htext);
    if (!hdr) die("parse safetensors header of", path);
    size_t data_len = len - 8 - hlen;
    cJSON *t = cJSON_AddObjectToObject(hdr, name), *jshape = cJSON_AddArrayToObject(t, "shape");
    cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
    cJSON_AddStringToObject(t, "dtype", dtype);
    for (int i = 0; i < ndim; i++)
        cJSON_AddItemToArray(jshape, cJSON_CreateNumber((double)shape[i]));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)data_len));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(data_len + nbytes)));
    char *out = cJSON_PrintUnformatted(hdr);
    size_t nlen = strlen(out), padded = (nlen + 7) / 8 * 8; /* the data 8-aligned, as written */
    unsigned char *nb = malloc(8 + padded + data_len + nbytes);
    if (!nb) die("malloc for", path);
    for (int i = 0; i < 8; i++)
        nb[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(nb + 8, out, nlen);
    memset(nb + 8 + nlen, ' ', padded - nlen);
    memcpy(nb + 8 + padded, bytes + 8 + hlen, data_len);
    memcpy(nb + 8 + padded + data_len, data, nbytes);
    tu_write(dir, file, nb, 8 + padded + data_len + nbytes);
    free(nb);
    free(out);
    free(htext);
    free(bytes);
    cJSON_Delete(hdr);

    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *itext = tu_read(path, NULL);
    if (!itext) return;
    cJSON *index = cJSON_Parse(itext), *map = cJSON_GetObjectItem(index, "weight_map");
    if (!map) die("weight_map in", path);
    cJSON_AddStringToObject(map, name, file);
    char *iout = cJSON_Print(index);
    tu_write_text(dir, "model.safetensors.index.json", iout);
    free(iout);
    free(itext);
    cJSON_Delete(index);
}

void tu_rmrf(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            tu_rmrf(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

const char *tu_fixture(const char *name) {
    static char path[PATH_MAX];
    const char *base = getenv("TACHYON_FIXTURES");
    snprintf(path, sizeof path, "%s/%s", base && *base ? base : TACHYON_FIXTURES, name);
    return path;
}

static uint64_t rng_state = 0x1234567887654321ull;

uint32_t tu_rand32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

float tu_randf(void) {
    return (float)(tu_rand32() >> 8) / 8388608.0f - 1.0f;
}

float tu_unassociative(int rank, int i, int round) {
    uint32_t x = (uint32_t)(rank * 7919 + i * 104729 + round * 31337 + 12345);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    float mag = (float)(1u << (x % 24));
    return ((x >> 8) & 1 ? -1.0f : 1.0f) * mag * (1.0f + (float)(x % 1000) / 997.0f);
}

void tu_rand_seed(uint64_t seed) {
    rng_state = seed;
}

/* Whether name matches one of the comma-separated fnmatch patterns in list. */
static bool matches_any(const char *name, const char *list) {
    char pattern[128];
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        snprintf(pattern, sizeof pattern, "%.*s", (int)len, p);
        if (fnmatch(pattern, name, 0) == 0) return true;
        p += len + (p[len] == ',');
    }
    return false;
}

bool tu_test_selected(const char *name) {
    const char *only = getenv("TEST_FILTER"), *skip = getenv("TEST_SKIP");
    return (!only || matches_any(name, only)) && !(skip && matches_any(name, skip));
}
