#include "safetensors.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_INDEX  "model.safetensors.index.json"
#define ST_SINGLE "model.safetensors"

/* The safetensors library refuses larger headers; so do we, before copying one. */
#define ST_MAX_HEADER 100000000ull

/* Offsets are 64-bit and index the mapping directly. */
_Static_assert(sizeof(size_t) >= sizeof(uint64_t), "a 64-bit size_t is required");

struct st_set {
    st_tensor_t *tensors; /* in the order added; names owned */
    int n, cap;
    int *slots; /* open addressing by name: tensor index, -1 when empty; power-of-two size */
    size_t n_slots;
    char **files; /* names given to st_add_file, owned; st_tensor_t.file points here */
    int n_files, cap_files;
};

int st_files(const st_set_t *set) {
    return set->n_files;
}

st_set_t *st_create(void) {
    return calloc(1, sizeof(st_set_t));
}

void st_close(st_set_t *set) {
    if (!set) return;
    for (int i = 0; i < set->n; i++)
        free((char *)set->tensors[i].name);
    for (int i = 0; i < set->n_files; i++)
        free(set->files[i]);
    free(set->tensors);
    free(set->slots);
    free(set->files);
    free(set);
}

int st_count(const st_set_t *set) {
    return set->n;
}

const st_tensor_t *st_at(const st_set_t *set, int i) {
    return i >= 0 && i < set->n ? &set->tensors[i] : NULL;
}

int64_t st_numel(const st_tensor_t *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ---- name index ---- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The slot holding `name`, or the empty slot where it would go. The table is never full. */
static size_t find_slot(const st_set_t *set, const char *name) {
    size_t mask = set->n_slots - 1;
    size_t i = (size_t)fnv1a(name) & mask;
    while (set->slots[i] >= 0 && strcmp(set->tensors[set->slots[i]].name, name) != 0)
        i = (i + 1) & mask;
    return i;
}

const st_tensor_t *st_find(const st_set_t *set, const char *name) {
    if (set->n_slots == 0) return NULL;
    int k = set->slots[find_slot(set, name)];
    return k >= 0 ? &set->tensors[k] : NULL;
}

/* Rebuilds the index over tensors [0, n) with room for `want` names at load <= 1/2. Never
 * allocates when the table is already big enough, so shrinking the set cannot fail. */
static int reindex(st_set_t *set, size_t want) {
    size_t size = 16;
    while (size < 2 * want)
        size *= 2;
    if (size > set->n_slots) {
        int *slots = malloc(size * sizeof *slots);
        if (!slots) return -1;
        free(set->slots);
        set->slots = slots;
        set->n_slots = size;
    }
    memset(set->slots, 0xff, set->n_slots * sizeof *set->slots);
    for (int k = 0; k < set->n; k++)
        set->slots[find_slot(set, set->tensors[k].name)] = k;
    return 0;
}

/* ---- one file ---- */

/* A JSON number that is a non-negative integer representable in 64 bits. Beyond 2^53 a double is
 * no longer exact, but such values exceed any file and fail the size checks anyway. */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < 0x1p64) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

/* The JSON text of v for a message, in buf. */
static const char *json_text(const cJSON *v, char *buf, size_t size) {
    char *s = cJSON_PrintUnformatted(v);
    snprintf(buf, size, "%s", s ? s : "?");
    free(s);
    return buf;
}

static const char *shape_text(const int64_t *shape, int ndim, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used +=
            (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

/* Fills t (all but name and file) from one header entry; data is the data section. */
static int parse_entry(const char *file, const char *name, const cJSON *e,
                       const unsigned char *data, uint64_t data_len, size_t file_len,
                       st_tensor_t *t, err_t *err) {
    char text[256];
    if (!cJSON_IsObject(e))
        return err_set(err, "%s: tensor %s: entry is not a JSON object", file, name);
    const cJSON *jdtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *jshape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *joffs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!jdtype) return err_set(err, "%s: tensor %s: no \"dtype\"", file, name);
    if (!jshape) return err_set(err, "%s: tensor %s: no \"shape\"", file, name);
    if (!joffs) return err_set(err, "%s: tensor %s: no \"data_offsets\"", file, name);

    if (!cJSON_IsString(jdtype))
        return err_set(err, "%s: tensor %s: dtype %s is not a string", file, name,
                       json_text(jdtype, text, sizeof text));
    int dt = dtype_from_name(jdtype->valuestring);
    if (dt < 0)
        return err_set(err, "%s: tensor %s: unknown dtype \"%s\"", file, name, jdtype->valuestring);
    t->dtype = (dtype_t)dt;

    if (!cJSON_IsArray(jshape))
        return err_set(err, "%s: tensor %s: shape %s is not a list", file, name,
                       json_text(jshape, text, sizeof text));
    int ndim = cJSON_GetArraySize(jshape);
    if (ndim > ST_MAX_DIMS)
        return err_set(err, "%s: tensor %s: shape has %d dimensions, more than %d", file, name,
                       ndim, ST_MAX_DIMS);
    t->ndim = ndim;
    /* Every partial product of the shape fits in int64 (st_numel multiplies left to right), and
     * so does the byte size. */
    int64_t numel = 1, nbytes = 0;
    bool overflow = false;
    int d = 0;
    for (const cJSON *j = jshape->child; j; j = j->next, d++) {
        uint64_t dim;
        if (json_u64(j, &dim) < 0)
            return err_set(err,
                           "%s: tensor %s: shape %s has a dimension that is not a "
                           "non-negative integer",
                           file, name, json_text(jshape, text, sizeof text));
        overflow |= dim > INT64_MAX;
        t->shape[d] = overflow ? 0 : (int64_t)dim;
        overflow |= __builtin_mul_overflow(numel, t->shape[d], &numel);
    }
    overflow |= __builtin_mul_overflow(numel, (int64_t)dtype_size(t->dtype), &nbytes);
    if (overflow)
        return err_set(err, "%s: tensor %s: shape %s of %s is too large (its byte size overflows)",
                       file, name, json_text(jshape, text, sizeof text), dtype_name(t->dtype));

    uint64_t begin, end;
    if (!cJSON_IsArray(joffs) || cJSON_GetArraySize(joffs) != 2 ||
        json_u64(cJSON_GetArrayItem(joffs, 0), &begin) < 0 ||
        json_u64(cJSON_GetArrayItem(joffs, 1), &end) < 0)
        return err_set(err, "%s: tensor %s: data_offsets %s is not two non-negative integers", file,
                       name, json_text(joffs, text, sizeof text));
    if (begin > end)
        return err_set(err, "%s: tensor %s: data_offsets [%llu, %llu] begin after they end", file,
                       name, (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return err_set(err,
                       "%s: tensor %s: data_offsets [%llu, %llu] end beyond the data section "
                       "(%llu bytes after the header; the file is %zu bytes): file truncated?",
                       file, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_len, file_len);
    if (end - begin != (uint64_t)nbytes)
        return err_set(err,
                       "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes but shape %s "
                       "of %s needs %llu",
                       file, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)(end - begin),
                       shape_text(t->shape, t->ndim, text, sizeof text), dtype_name(t->dtype),
                       (unsigned long long)nbytes);
    t->data = data + begin;
    t->nbytes = (size_t)nbytes;
    return 0;
}

typedef struct range {
    uint64_t begin, end;
    int k; /* tensor index */
} range_t;

static int by_begin(const void *a, const void *b) {
    const range_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->k - y->k; /* header order, so that messages do not depend on qsort */
}

/* Tensors [first, n) all come from the data section at `data`: no two may share a byte. */
static int check_overlap(const st_set_t *set, int first, const char *file,
                         const unsigned char *data, err_t *err) {
    int count = set->n - first;
    if (count < 2) return 0;
    range_t *r = malloc((size_t)count * sizeof *r);
    if (!r) return err_set(err, "%s: out of memory", file);
    int m = 0;
    for (int k = first; k < set->n; k++) {
        const st_tensor_t *t = &set->tensors[k];
        if (t->nbytes == 0) continue; /* an empty range overlaps nothing */
        uint64_t begin = (uint64_t)((const unsigned char *)t->data - data);
        r[m++] = (range_t){begin, begin + t->nbytes, k};
    }
    qsort(r, (size_t)m, sizeof *r, by_begin);
    /* Sorted by begin, if two ranges overlap then so do two neighbours: the range right after
     * the first of them starts inside it. */
    for (int i = 1; i < m; i++) {
        if (r[i].begin < r[i - 1].end) {
            const range_t a = r[i - 1], b = r[i];
            free(r);
            return err_set(err, "%s: tensors %s [%llu, %llu) and %s [%llu, %llu) overlap", file,
                           set->tensors[a.k].name, (unsigned long long)a.begin,
                           (unsigned long long)a.end, set->tensors[b.k].name,
                           (unsigned long long)b.begin, (unsigned long long)b.end);
        }
    }
    free(r);
    return 0;
}

/* Parses JSON text of exactly len bytes; on failure *pos is the byte where parsing stopped. */
static cJSON *parse_json(const char *text, size_t len, size_t *pos) {
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        *pos = (size_t)(nul - text);
        return NULL;
    }
    const char *end = text;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    *pos = end ? (size_t)(end - text) : 0;
    return root;
}

/* Drops the tensors and files added after a failure so the set stays as it was. */
static void roll_back(st_set_t *set, int n_tensors, int n_files) {
    for (int k = n_tensors; k < set->n; k++)
        free((char *)set->tensors[k].name);
    set->n = n_tensors;
    for (int i = n_files; i < set->n_files; i++)
        free(set->files[i]);
    set->n_files = n_files;
    if (set->n_slots) reindex(set, (size_t)set->n);
}

static int add_entries(st_set_t *set, const char *file, const cJSON *root,
                       const unsigned char *data, uint64_t data_len, size_t len, err_t *err) {
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *name = e->string;
        if (strcmp(name, "__metadata__") == 0) continue;
        st_tensor_t t = {0};
        if (parse_entry(file, name, e, data, data_len, len, &t, err) < 0) return -1;
        const st_tensor_t *dup = st_find(set, name);
        if (dup) {
            if (dup->file == file)
                return err_set(err, "%s: tensor %s appears twice in the header", file, name);
            return err_set(err, "%s: duplicate tensor %s (also in %s)", file, name, dup->file);
        }
        if (set->n == set->cap) {
            int cap = set->cap ? 2 * set->cap : 64;
            st_tensor_t *grown = realloc(set->tensors, (size_t)cap * sizeof *grown);
            if (!grown) return err_set(err, "%s: out of memory", file);
            set->tensors = grown;
            set->cap = cap;
        }
        if (2 * ((size_t)set->n + 1) > set->n_slots && reindex(set, (size_t)set->n + 1) < 0)
            return err_set(err, "%s: out of memory", file);
        if (!(t.name = strdup(name))) return err_set(err, "%s: out of memory", file);
        t.file = file;
        set->tensors[set->n] = t;
        set->slots[find_slot(set, name)] = set->n;
        set->n++;
    }
    return 0;
}

int st_add_file(st_set_t *set, const char *file, const void *bytes, size_t len, err_t *err) {
    const unsigned char *p = bytes;
    if (len < 8)
        return err_set(err, "%s: file is %zu bytes, too short for the 8-byte header length", file,
                       len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > len - 8)
        return err_set(err, "%s: header length %llu is beyond the end of the file (%zu bytes)",
                       file, (unsigned long long)hlen, len);
    if (hlen > ST_MAX_HEADER)
        return err_set(err, "%s: header length %llu is over the %llu-byte limit", file,
                       (unsigned long long)hlen, ST_MAX_HEADER);

    /* The header in the mapping is not NUL-terminated: parse a terminated copy. */
    char *text = malloc((size_t)hlen + 1);
    if (!text) return err_set(err, "%s: out of memory", file);
    memcpy(text, p + 8, (size_t)hlen);
    text[hlen] = '\0';
    size_t pos;
    cJSON *root = parse_json(text, (size_t)hlen, &pos);
    free(text);
    if (!root)
        return err_set(err,
                       "%s: header is not valid JSON (error at byte %zu of the %llu-byte "
                       "header)",
                       file, pos, (unsigned long long)hlen);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return err_set(err, "%s: header is not a JSON object", file);
    }

    int n0 = set->n, f0 = set->n_files;
    char *name = NULL;
    if (set->n_files == set->cap_files) {
        int cap = set->cap_files ? 2 * set->cap_files : 8;
        char **grown = realloc(set->files, (size_t)cap * sizeof *grown);
        if (grown) {
            set->files = grown;
            set->cap_files = cap;
        }
    }
    if (set->n_files == set->cap_files || !(name = strdup(file))) {
        cJSON_Delete(root);
        return err_set(err, "%s: out of memory", file);
    }
    set->files[set->n_files++] = name;

    const unsigned char *data = p + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    int rc = add_entries(set, name, root, data, data_len, len, err);
    if (rc == 0) rc = check_overlap(set, n0, name, data, err);
    if (rc < 0) roll_back(set, n0, f0);
    cJSON_Delete(root);
    return rc;
}

/* ---- a model directory ---- */

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s/%s", dir, name);
    return s;
}

/* Maps dir/name and adds its tensors; messages name the file by its full path. */
static int open_file(st_set_t *set, mdir_t *dir, const char *name, err_t *err) {
    const void *data;
    size_t len;
    if (mdir_map(dir, name, &data, &len, err) < 0) return -1;
    char *path = join(mdir_path(dir), name);
    if (!path) return err_set(err, "out of memory");
    int rc = st_add_file(set, path, data, len, err);
    free(path);
    return rc;
}

/* True when `file` (as given to st_add_file by open_file) is dir/shard. */
static bool is_shard(const char *file, const char *dir, const char *shard) {
    size_t n = strlen(dir);
    return strncmp(file, dir, n) == 0 && file[n] == '/' && strcmp(file + n + 1, shard) == 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int open_index(st_set_t *set, mdir_t *dir, const char *index, err_t *err) {
    char *text;
    size_t len;
    if (mdir_read_text(dir, ST_INDEX, &text, &len, err) < 0) return -1;
    size_t pos;
    cJSON *root = parse_json(text, len, &pos);
    free(text);
    if (!root) return err_set(err, "%s: not valid JSON (error at byte %zu)", index, pos);

    int rc = -1;
    const char **shards = NULL;
    const cJSON *map =
        cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        err_set(err, "%s: no \"weight_map\" object (tensor name -> shard file)", index);
        goto done;
    }
    int n = cJSON_GetArraySize(map);
    if (n == 0) {
        err_set(err, "%s: weight_map is empty", index);
        goto done;
    }
    shards = malloc((size_t)n * sizeof *shards);
    if (!shards) {
        err_set(err, "out of memory");
        goto done;
    }
    int n_shards = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            err_set(err, "%s: weight_map entry %s is not a file name", index, e->string);
            goto done;
        }
        shards[n_shards++] = e->valuestring;
    }
    /* Many tensors per shard: open each distinct one once, in name order. */
    qsort(shards, (size_t)n_shards, sizeof *shards, by_name);
    int distinct = 0;
    for (int i = 0; i < n_shards; i++)
        if (distinct == 0 || strcmp(shards[distinct - 1], shards[i]) != 0)
            shards[distinct++] = shards[i];
    for (int i = 0; i < distinct; i++) {
        if (open_file(set, dir, shards[i], err) < 0) {
            if (!mdir_has(dir, shards[i])) err_prefix(err, "%s lists shard %s", index, shards[i]);
            goto done;
        }
    }
    for (const cJSON *e = map->child; e; e = e->next) {
        const st_tensor_t *t = st_find(set, e->string);
        if (!t || !is_shard(t->file, mdir_path(dir), e->valuestring)) {
            err_set(err, "%s: tensor %s listed in index for file %s but not found in %s%s%s%s",
                    index, e->string, e->valuestring, e->valuestring, t ? " (it is in " : "",
                    t ? t->file : "", t ? ")" : "");
            goto done;
        }
    }
    rc = 0;
done:
    free(shards);
    cJSON_Delete(root);
    return rc;
}

int st_open(mdir_t *dir, st_set_t **out, err_t *err) {
    *out = NULL;
    st_set_t *set = st_create();
    if (!set) return err_set(err, "out of memory");
    int rc;
    if (mdir_has(dir, ST_INDEX)) {
        char *index = join(mdir_path(dir), ST_INDEX);
        rc = index ? open_index(set, dir, index, err) : err_set(err, "out of memory");
        free(index);
    } else if (mdir_has(dir, ST_SINGLE)) {
        rc = open_file(set, dir, ST_SINGLE, err);
    } else {
        rc = err_set(err, "%s: no model.safetensors or model.safetensors.index.json",
                     mdir_path(dir));
    }
    if (rc < 0) {
        st_close(set);
        return -1;
    }
    *out = set;
    return 0;
}
