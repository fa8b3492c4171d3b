/*
 * safetensors: files built here byte by byte (u64 header length, JSON header, data), written to
 * temporary model directories and opened with st_open; every malformed variant must fail with a
 * message naming the file and the problem. The fixture checkpoints are opened when present.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"
#include "testutil.h"

/* ---- building files ---- */

typedef struct bytes {
    unsigned char *p;
    size_t len;
} bytes_t;

/* A safetensors file: the header text padded with spaces to a multiple of 8 (as the Python
 * writer does, which keeps the data aligned), then `data`. */
static bytes_t st_bytes(const char *header, const void *data, size_t data_len) {
    size_t hlen = strlen(header);
    size_t padded = (hlen + 7) / 8 * 8;
    bytes_t b = {malloc(8 + padded + data_len), 8 + padded + data_len};
    assert_non_null(b.p);
    for (int i = 0; i < 8; i++)
        b.p[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(b.p + 8, header, hlen);
    memset(b.p + 8 + hlen, ' ', padded - hlen);
    if (data_len) memcpy(b.p + 8 + padded, data, data_len);
    return b;
}

typedef struct spec {
    const char *name;
    const char *dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} spec_t;

/* A well-formed file holding the tensors back to back, with a __metadata__ entry. */
static bytes_t st_build(const spec_t *specs, int n) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += specs[i].nbytes;
    unsigned char *data = malloc(total + 1);
    assert_non_null(data);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, specs[i].name);
        cJSON_AddStringToObject(e, "dtype", specs[i].dtype);
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < specs[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)specs[i].shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + specs[i].nbytes)));
        if (specs[i].nbytes) memcpy(data + off, specs[i].data, specs[i].nbytes);
        off += specs[i].nbytes;
    }
    char *header = cJSON_PrintUnformatted(root);
    bytes_t b = st_bytes(header, data, total);
    free(header);
    free(data);
    cJSON_Delete(root);
    return b;
}

static void write_bytes(const char *dir, const char *name, bytes_t b) {
    tu_write(dir, name, b.p, b.len);
    free(b.p);
}

/* Opens dir, which must fail; checks the message holds every phrase (NULL-terminated) and
 * returns it for further checks. */
static const char *open_fails(const char *dir, ...) {
    static err_t err;
    memset(&err, 0, sizeof err);
    mdir_t *md;
    assert_int_equal(mdir_open(dir, &md, &err), 0);
    st_set_t *set = (st_set_t *)1;
    int rc = st_open(md, &set, &err);
    mdir_close(md);
    assert_true(rc < 0);
    assert_null(set);
    print_message("    message: %s\n", err.msg);
    va_list ap;
    va_start(ap, dir);
    for (const char *phrase; (phrase = va_arg(ap, const char *));)
        if (!strstr(err.msg, phrase)) fail_msg("no \"%s\" in: %s", phrase, err.msg);
    va_end(ap);
    return err.msg;
}

static char *path_of(const char *dir, const char *name) {
    char *s = malloc(strlen(dir) + strlen(name) + 2);
    assert_non_null(s);
    sprintf(s, "%s/%s", dir, name);
    return s;
}

/* ---- good files ---- */

static const float w_f32[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, -7.0f};
static const uint16_t w_bf16[4] = {0x3f80, 0xc000, 0x7f80, 0x0001};
static const uint8_t w_e4m3[4] = {0x38, 0xfe, 0x01, 0x7e};
static const int64_t w_i64 = -123456789012345;

static const spec_t good_specs[] = {
    {"model.embed_tokens.weight", "F32", 2, {2, 3}, w_f32, sizeof w_f32},
    {"model.norm.weight", "BF16", 1, {4}, w_bf16, sizeof w_bf16},
    {"model.layers.0.mlp.up_proj.weight", "F8_E4M3", 2, {2, 2}, w_e4m3, sizeof w_e4m3},
    {"step", "I64", 0, {0}, &w_i64, sizeof w_i64},
    {"empty", "F32", 1, {0}, NULL, 0},
    {"empty2d", "BF16", 2, {3, 0}, NULL, 0},
};
#define N_GOOD ((int)(sizeof good_specs / sizeof good_specs[0]))

static void check_good(const st_set_t *set, const char *file, int first) {
    for (int i = 0; i < N_GOOD; i++) {
        const spec_t *s = &good_specs[i];
        const st_tensor_t *t = st_find(set, s->name);
        assert_non_null(t);
        assert_ptr_equal(t, st_at(set, first + i));
        assert_string_equal(t->name, s->name);
        assert_string_equal(t->file, file);
        assert_string_equal(dtype_name(t->dtype), s->dtype);
        assert_int_equal(t->ndim, s->ndim);
        int64_t numel = 1;
        for (int d = 0; d < s->ndim; d++) {
            assert_int_equal(t->shape[d], s->shape[d]);
            numel *= s->shape[d];
        }
        assert_int_equal(st_numel(t), numel);
        assert_int_equal(t->nbytes, s->nbytes);
        assert_non_null(t->data);
        if (s->nbytes) assert_memory_equal(t->data, s->data, s->nbytes);
    }
}

static void test_single_file(void **state) {
    char *dir = tu_tmpdir();
    write_bytes(dir, "model.safetensors", st_build(good_specs, N_GOOD));
    err_t err = {0};
    mdir_t *md;
    st_set_t *set;
    assert_int_equal(mdir_open(dir, &md, &err), 0);
    if (st_open(md, &set, &err) < 0) fail_msg("%s", err.msg);
    char *file = path_of(dir, "model.safetensors");
    assert_int_equal(st_count(set), N_GOOD);
    check_good(set, file, 0);
    assert_null(st_find(set, "__metadata__"));
    assert_null(st_find(set, "model.norm"));
    assert_null(st_find(set, ""));
    assert_null(st_at(set, N_GOOD));
    assert_null(st_at(set, -1));

    const st_tensor_t *t = st_find(set, "model.embed_tokens.weight");
    float back[6];
    dtype_to_f32(t->dtype, t->data, back, 6);
    assert_memory_equal(back, w_f32, sizeof w_f32);
    t = st_find(set, "model.layers.0.mlp.up_proj.weight");
    dtype_to_f32(t->dtype, t->data, back, 4);
    assert_true(back[0] == 1.0f && back[1] == -448.0f && back[2] == 0x1p-9f && back[3] == 448.0f);

    st_close(set);
    mdir_close(md);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

/* Shards hold tensors in two halves; the index is preferred over a stray model.safetensors. */
static void test_sharded(void **state) {
    char *dir = tu_tmpdir();
    write_bytes(dir, "model-00001-of-00002.safetensors", st_build(good_specs, 3));
    write_bytes(dir, "model-00002-of-00002.safetensors", st_build(good_specs + 3, N_GOOD - 3));
    tu_write_text(dir, "model.safetensors", "not read");
    tu_write_text(dir, "model.safetensors.index.json",
                  "{\"metadata\": {\"total_size\": 60}, \"weight_map\": {"
                  "\"empty\": \"model-00002-of-00002.safetensors\","
                  "\"empty2d\": \"model-00002-of-00002.safetensors\","
                  "\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.layers.0.mlp.up_proj.weight\": \"model-00001-of-00002.safetensors\","
                  "\"model.norm.weight\": \"model-00001-of-00002.safetensors\","
                  "\"step\": \"model-00002-of-00002.safetensors\"}}");
    err_t err = {0};
    mdir_t *md;
    st_set_t *set;
    assert_int_equal(mdir_open(dir, &md, &err), 0);
    if (st_open(md, &set, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(st_count(set), N_GOOD);
    char *f1 = path_of(dir, "model-00001-of-00002.safetensors");
    char *f2 = path_of(dir, "model-00002-of-00002.safetensors");
    for (int i = 0; i < N_GOOD; i++)
        assert_string_equal(st_find(set, good_specs[i].name)->file, i < 3 ? f1 : f2);
    st_close(set);
    mdir_close(md);
    free(f1);
    free(f2);
    tu_rmrf(dir);
    free(dir);
}

/* A shard may hold tensors the index does not list. */
static void test_sharded_extra_tensor(void **state) {
    char *dir = tu_tmpdir();
    write_bytes(dir, "a.safetensors", st_build(good_specs, N_GOOD));
    tu_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"step\": \"a.safetensors\"}}");
    err_t err = {0};
    mdir_t *md;
    st_set_t *set;
    assert_int_equal(mdir_open(dir, &md, &err), 0);
    if (st_open(md, &set, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(st_count(set), N_GOOD);
    st_close(set);
    mdir_close(md);
    tu_rmrf(dir);
    free(dir);
}

/* Enough names to grow the hash table many times; every one found, absent ones not. */
static void test_many_tensors(void **state) {
    enum { N = 5000 };
    static char names[N][48];
    static spec_t specs[N];
    static uint16_t vals[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "model.layers.%d.mlp.experts.%d.weight", i / 128,
                 i % 128);
        vals[i] = (uint16_t)i;
        specs[i] = (spec_t){names[i], "BF16", 1, {1}, &vals[i], 2};
    }
    bytes_t b = st_build(specs, N);
    st_set_t *set = st_create();
    err_t err = {0};
    if (st_add_file(set, "big", b.p, b.len, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(st_count(set), N);
    for (int i = 0; i < N; i++) {
        const st_tensor_t *t = st_find(set, names[i]);
        assert_non_null(t);
        uint16_t v;
        memcpy(&v, t->data, 2);
        assert_int_equal(v, i);
    }
    assert_null(st_find(set, "model.layers.0.mlp.experts.128.weight"));
    assert_null(st_find(set, "model.layers.39.mlp.experts.8.weight"));
    st_close(set);
    free(b.p);
}

/* A file that fails leaves the set as it was: its tensors are gone, earlier ones still found. */
static void test_failed_file_rolls_back(void **state) {
    bytes_t a = st_build(good_specs, 2);
    static const float x = 1.0f;
    const spec_t extra[] = {
        {"new.a", "F32", 1, {1}, &x, 4},
        {"new.b", "F32", 1, {1}, &x, 4},
        {"model.norm.weight", "F32", 1, {1}, &x, 4},
    };
    bytes_t b = st_build(extra, 3);
    st_set_t *set = st_create();
    err_t err = {0};
    assert_int_equal(st_add_file(set, "a.safetensors", a.p, a.len, &err), 0);
    assert_true(st_add_file(set, "b.safetensors", b.p, b.len, &err) < 0);
    assert_non_null(strstr(err.msg, "b.safetensors: duplicate tensor model.norm.weight (also in "
                                    "a.safetensors)"));
    assert_int_equal(st_count(set), 2);
    assert_null(st_find(set, "new.a"));
    assert_null(st_find(set, "new.b"));
    assert_string_equal(st_find(set, "model.norm.weight")->file, "a.safetensors");
    assert_string_equal(st_find(set, "model.embed_tokens.weight")->file, "a.safetensors");
    st_close(set);
    st_close(NULL);
    free(a.p);
    free(b.p);
}

/* ---- malformed single files ---- */

/* One bad header, written with ' for " to stay readable; the file is the header plus `data_len`
 * zero bytes. */
typedef struct bad_case {
    const char *name;
    const char *header;
    size_t data_len;
    const char *phrase1, *phrase2;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"invalid_json", "{'w': {'dtype': 'F32',", 0, "header is not valid JSON", "error at byte"},
    {"json_trailing_garbage", "{} {}", 0, "header is not valid JSON", "at byte 3"},
    {"header_not_object", "[1, 2]", 0, "header is not a JSON object", NULL},
    {"entry_not_object", "{'w': 3}", 0, "tensor w: entry is not a JSON object", NULL},
    {"missing_dtype", "{'w': {'shape': [1], 'data_offsets': [0, 4]}}", 4, "tensor w: no \"dtype\"",
     NULL},
    {"missing_shape", "{'w': {'dtype': 'F32', 'data_offsets': [0, 4]}}", 4,
     "tensor w: no \"shape\"", NULL},
    {"missing_data_offsets", "{'w': {'dtype': 'F32', 'shape': [1]}}", 4,
     "tensor w: no \"data_offsets\"", NULL},
    {"unknown_dtype", "{'w': {'dtype': 'Q4_K', 'shape': [1], 'data_offsets': [0, 4]}}", 4,
     "tensor w: unknown dtype \"Q4_K\"", NULL},
    {"dtype_not_string", "{'w': {'dtype': 7, 'shape': [1], 'data_offsets': [0, 4]}}", 4,
     "tensor w: dtype 7 is not a string", NULL},
    {"shape_negative", "{'w': {'dtype': 'F32', 'shape': [2, -1], 'data_offsets': [0, 4]}}", 4,
     "tensor w: shape [2,-1] has a dimension that is not a non-negative integer", NULL},
    {"shape_fraction", "{'w': {'dtype': 'F32', 'shape': [1.5], 'data_offsets': [0, 4]}}", 4,
     "tensor w: shape [1.5] has a dimension that is not a non-negative integer", NULL},
    {"shape_string", "{'w': {'dtype': 'F32', 'shape': ['1'], 'data_offsets': [0, 4]}}", 4,
     "not a non-negative integer", NULL},
    {"shape_not_list", "{'w': {'dtype': 'F32', 'shape': 1, 'data_offsets': [0, 4]}}", 4,
     "tensor w: shape 1 is not a list", NULL},
    {"shape_too_many_dims",
     "{'w': {'dtype': 'F32', 'shape': [1,1,1,1,1,1,1,1,1], 'data_offsets': [0, 4]}}", 4,
     "tensor w: shape has 9 dimensions, more than 8", NULL},
    {"shape_overflow",
     "{'w': {'dtype': 'F32', 'shape': [4294967296, 4294967296], 'data_offsets': [0, 4]}}", 4,
     "tensor w: shape [4294967296,4294967296] of F32 is too large", NULL},
    /* numel is 0, but a partial product overflows int64. */
    {"shape_overflow_before_zero",
     "{'w': {'dtype': 'U8', 'shape': [4611686018427387904, 3, 0], 'data_offsets': [0, 0]}}", 0,
     "is too large (its byte size overflows)", NULL},
    {"shape_dim_beyond_int64", "{'w': {'dtype': 'U8', 'shape': [1e19], 'data_offsets': [0, 0]}}", 0,
     "is too large", NULL},
    {"offsets_one_number", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4]}}", 4,
     "tensor w: data_offsets [4] is not two non-negative integers", NULL},
    {"offsets_three_numbers", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4, 8]}}", 8,
     "data_offsets [0,4,8] is not two non-negative integers", NULL},
    {"offsets_negative", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [-4, 0]}}", 4,
     "data_offsets [-4,0] is not two non-negative integers", NULL},
    {"offsets_fraction", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4.5]}}", 8,
     "data_offsets [0,4.5] is not two non-negative integers", NULL},
    {"offsets_not_list", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': 4}}", 4,
     "data_offsets 4 is not two non-negative integers", NULL},
    {"offsets_huge", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 1e30]}}", 4,
     "is not two non-negative integers", NULL},
    {"offsets_reversed", "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [4, 0]}}", 4,
     "tensor w: data_offsets [4, 0] begin after they end", NULL},
    {"offsets_beyond_data", "{'w': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}", 4,
     "tensor w: data_offsets [0, 8] end beyond the data section (4 bytes after the header",
     "file truncated?"},
    /* begin + size would wrap around 2^64. */
    {"offsets_near_2_64",
     "{'w': {'dtype': 'F32', 'shape': [1], "
     "'data_offsets': [18446744073709547520, 18446744073709549568]}}",
     4, "end beyond the data section", "file truncated?"},
    {"size_mismatch", "{'w': {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [0, 16]}}", 24,
     "tensor w: data_offsets [0, 16] hold 16 bytes but shape [2, 3] of F32 needs 24", NULL},
    {"scalar_size_mismatch", "{'w': {'dtype': 'F64', 'shape': [], 'data_offsets': [0, 4]}}", 8,
     "hold 4 bytes but shape [] of F64 needs 8", NULL},
    {"overlap",
     "{'a': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},"
     " 'b': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}",
     12, "tensors a [0, 8) and b [4, 12) overlap", NULL},
    {"overlap_nested",
     "{'big': {'dtype': 'U8', 'shape': [100], 'data_offsets': [0, 100]},"
     " 'x': {'dtype': 'U8', 'shape': [10], 'data_offsets': [10, 20]},"
     " 'y': {'dtype': 'U8', 'shape': [10], 'data_offsets': [50, 60]}}",
     100, "tensors big [0, 100) and x [10, 20) overlap", NULL},
    {"overlap_same_range",
     "{'c': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]},"
     " 'd': {'dtype': 'I32', 'shape': [1], 'data_offsets': [0, 4]}}",
     4, "tensors c [0, 4) and d [0, 4) overlap", NULL},
    {"duplicate_in_header",
     "{'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]},"
     " 'w': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]}}",
     4, "tensor w appears twice in the header", NULL},
};
#define N_BAD ((int)(sizeof bad_cases / sizeof bad_cases[0]))

static void run_bad_case(void **state) {
    const bad_case_t *c = *state;
    char *dir = tu_tmpdir();
    size_t hlen = strlen(c->header);
    bytes_t b = {calloc(1, 8 + hlen + c->data_len), 8 + hlen + c->data_len};
    assert_non_null(b.p);
    for (int i = 0; i < 8; i++)
        b.p[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    for (size_t i = 0; i < hlen; i++)
        b.p[8 + i] = c->header[i] == '\'' ? '"' : (unsigned char)c->header[i];
    write_bytes(dir, "model.safetensors", b);
    char *file = path_of(dir, "model.safetensors");
    const char *msg = open_fails(dir, c->phrase1, c->phrase2, (const char *)NULL);
    if (strncmp(msg, file, strlen(file)) != 0) fail_msg("message does not start with %s", file);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

static void test_file_too_short(void **state) {
    char *dir = tu_tmpdir();
    tu_write(dir, "model.safetensors", "\x02\0\0\0\0", 5);
    char *file = path_of(dir, "model.safetensors");
    open_fails(dir, file, "file is 5 bytes, too short for the 8-byte header length",
               (const char *)NULL);
    tu_write(dir, "model.safetensors", "", 0);
    open_fails(dir, file, "file is 0 bytes", (const char *)NULL);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

static void test_header_length_beyond_file(void **state) {
    char *dir = tu_tmpdir();
    char *file = path_of(dir, "model.safetensors");
    unsigned char b[20] = {0xe8, 0x03}; /* 1000 */
    memcpy(b + 8, "{}          ", 12);
    tu_write(dir, "model.safetensors", b, sizeof b);
    open_fails(dir, file, "header length 1000 is beyond the end of the file (20 bytes)",
               (const char *)NULL);
    memset(b, 0xff, 8); /* 2^64 - 1: must not wrap around */
    tu_write(dir, "model.safetensors", b, sizeof b);
    open_fails(dir, file, "header length 18446744073709551615 is beyond the end of the file",
               (const char *)NULL);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

/* cJSON stops at a NUL; the header must still be rejected, not read as "{}". */
static void test_header_nul_byte(void **state) {
    char *dir = tu_tmpdir();
    tu_write(dir, "model.safetensors", "\x08\0\0\0\0\0\0\0{}\0     ", 16);
    char *file = path_of(dir, "model.safetensors");
    open_fails(dir, file, "header is not valid JSON (error at byte 2 of the 8-byte header)",
               (const char *)NULL);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

/* Past the safetensors library's 100 MB header limit the header is not even copied. */
static void test_header_too_large(void **state) {
    size_t hlen = 100000001, len = 8 + hlen;
    unsigned char *p = calloc(1, len); /* untouched zero pages: no real memory */
    assert_non_null(p);
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    st_set_t *set = st_create();
    err_t err = {0};
    assert_true(st_add_file(set, "huge.safetensors", p, len, &err) < 0);
    assert_string_equal(err.msg, "huge.safetensors: header length 100000001 is over the "
                                 "100000000-byte limit");
    assert_int_equal(st_count(set), 0);
    st_close(set);
    free(p);
}

/* No tensors at all is a valid file. */
static void test_empty_header(void **state) {
    bytes_t b = st_bytes("{\"__metadata__\": {\"format\": \"pt\"}}", NULL, 0);
    st_set_t *set = st_create();
    err_t err = {0};
    assert_int_equal(st_add_file(set, "e.safetensors", b.p, b.len, &err), 0);
    assert_int_equal(st_count(set), 0);
    assert_null(st_find(set, "__metadata__"));
    st_close(set);
    free(b.p);
}

/* A good file cut short shows as data beyond the data section. */
static void test_truncated_file(void **state) {
    char *dir = tu_tmpdir();
    bytes_t b = st_build(good_specs, 3);
    b.len -= 3;
    write_bytes(dir, "model.safetensors", b);
    char *file = path_of(dir, "model.safetensors");
    open_fails(dir, file, "tensor model.layers.0.mlp.up_proj.weight: data_offsets [32, 36]",
               "file truncated?", (const char *)NULL);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

static void test_no_checkpoint(void **state) {
    char *dir = tu_tmpdir();
    tu_write_text(dir, "config.json", "{}");
    char want[4096];
    snprintf(want, sizeof want, "%s: no model.safetensors or model.safetensors.index.json", dir);
    const char *msg = open_fails(dir, want, (const char *)NULL);
    assert_string_equal(msg, want);
    tu_rmrf(dir);
    free(dir);
}

/* ---- malformed indexes ---- */

/* Two good shards (a: first 3 specs, b: the rest) and the given index text. */
static char *sharded_dir(const char *index) {
    char *dir = tu_tmpdir();
    write_bytes(dir, "a.safetensors", st_build(good_specs, 3));
    write_bytes(dir, "b.safetensors", st_build(good_specs + 3, N_GOOD - 3));
    tu_write_text(dir, "model.safetensors.index.json", index);
    return dir;
}

static void index_fails(const char *index, const char *phrase1, const char *phrase2) {
    char *dir = sharded_dir(index);
    char *file = path_of(dir, "model.safetensors.index.json");
    const char *msg = open_fails(dir, phrase1, phrase2, (const char *)NULL);
    if (strncmp(msg, file, strlen(file)) != 0) fail_msg("message does not start with %s", file);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

static void test_index_invalid_json(void **state) {
    index_fails("{\"weight_map\": {\"step\": \"a.safetensors\"", "not valid JSON", "error at byte");
}

static void test_index_no_weight_map(void **state) {
    index_fails("{\"metadata\": {}}", "no \"weight_map\" object", NULL);
    index_fails("{\"weight_map\": [\"a.safetensors\"]}", "no \"weight_map\" object", NULL);
    index_fails("[]", "no \"weight_map\" object", NULL);
    index_fails("{\"weight_map\": {}}", "weight_map is empty", NULL);
    index_fails("{\"weight_map\": {\"step\": 1}}", "weight_map entry step is not a file name",
                NULL);
}

static void test_index_missing_shard(void **state) {
    index_fails("{\"weight_map\": {\"step\": \"b.safetensors\", \"x\": \"c.safetensors\"}}",
                "model.safetensors.index.json lists shard c.safetensors",
                "c.safetensors: cannot open");
}

static void test_index_tensor_absent(void **state) {
    index_fails("{\"weight_map\": {\"step\": \"b.safetensors\", \"lm_head.weight\": "
                "\"b.safetensors\"}}",
                "tensor lm_head.weight listed in index for file b.safetensors but not found in "
                "b.safetensors",
                NULL);
}

static void test_index_tensor_in_other_shard(void **state) {
    index_fails("{\"weight_map\": {\"step\": \"a.safetensors\", \"model.norm.weight\": "
                "\"b.safetensors\"}}",
                "tensor step listed in index for file a.safetensors but not found in "
                "a.safetensors (it is in ",
                "/b.safetensors)");
}

/* The same name in two shards: the second shard's message names both. */
static void test_index_duplicate_across_shards(void **state) {
    char *dir = tu_tmpdir();
    write_bytes(dir, "a.safetensors", st_build(good_specs, 3));
    write_bytes(dir, "b.safetensors", st_build(good_specs + 1, 3));
    tu_write_text(dir, "model.safetensors.index.json",
                  "{\"weight_map\": {\"step\": \"b.safetensors\", \"model.norm.weight\": "
                  "\"a.safetensors\"}}");
    char *a = path_of(dir, "a.safetensors"), *b = path_of(dir, "b.safetensors");
    char want[8192];
    snprintf(want, sizeof want, "%s: duplicate tensor model.norm.weight (also in %s)", b, a);
    const char *msg = open_fails(dir, want, (const char *)NULL);
    assert_string_equal(msg, want);
    free(a);
    free(b);
    tu_rmrf(dir);
    free(dir);
}

/* A broken shard is reported under its own name. */
static void test_index_bad_shard(void **state) {
    char *dir = sharded_dir("{\"weight_map\": {\"step\": \"b.safetensors\"}}");
    bytes_t b = st_build(good_specs + 3, N_GOOD - 3);
    b.len -= 1;
    write_bytes(dir, "b.safetensors", b);
    char *file = path_of(dir, "b.safetensors");
    const char *msg = open_fails(dir, "tensor step: data_offsets [0, 8] end beyond",
                                 "file truncated?", (const char *)NULL);
    if (strncmp(msg, file, strlen(file)) != 0) fail_msg("message does not start with %s", file);
    free(file);
    tu_rmrf(dir);
    free(dir);
}

/* ---- fixtures ---- */

/* Opens a fixture model directory, or skips the test while the fixture is not generated yet. */
static st_set_t *open_fixture(const char *name, const char *probe, mdir_t **md) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tu_fixture(name), probe);
    struct stat sb;
    if (stat(path, &sb) < 0 || sb.st_size == 0) {
        print_message("    %s not generated yet\n", path);
        skip();
    }
    err_t err = {0};
    st_set_t *set;
    assert_int_equal(mdir_open(tu_fixture(name), md, &err), 0);
    if (st_open(*md, &set, &err) < 0) fail_msg("%s", err.msg);
    return set;
}

static int64_t config_int(const char *dir, const char *key) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", tu_fixture(dir));
    char *text = tu_read(path, NULL);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    assert_true(cJSON_IsNumber(v));
    int64_t n = (int64_t)v->valuedouble;
    cJSON_Delete(root);
    free(text);
    return n;
}

static void check_shape2(const st_tensor_t *t, int64_t rows, int64_t cols) {
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], rows);
    assert_int_equal(t->shape[1], cols);
}

static void test_fixture_tiny_qwen3(void **state) {
    mdir_t *md;
    st_set_t *set = open_fixture("tiny-qwen3", "model.safetensors", &md);
    int64_t vocab = config_int("tiny-qwen3", "vocab_size");
    int64_t hidden = config_int("tiny-qwen3", "hidden_size");
    int64_t inter = config_int("tiny-qwen3", "intermediate_size");
    int64_t layers = config_int("tiny-qwen3", "num_hidden_layers");
    const st_tensor_t *emb = st_find(set, "model.embed_tokens.weight");
    check_shape2(emb, vocab, hidden);
    assert_true(dtype_is_float(emb->dtype));
    const st_tensor_t *norm = st_find(set, "model.norm.weight");
    assert_non_null(norm);
    assert_int_equal(norm->ndim, 1);
    assert_int_equal(norm->shape[0], hidden);
    char name[128];
    snprintf(name, sizeof name, "model.layers.%lld.mlp.down_proj.weight", (long long)layers - 1);
    check_shape2(st_find(set, name), hidden, inter);
    snprintf(name, sizeof name, "model.layers.%lld.mlp.down_proj.weight", (long long)layers);
    assert_null(st_find(set, name));
    assert_null(st_find(set, "lm_head.weight")); /* tied embeddings */

    st_close(set);
    mdir_close(md);
}

/* The binary embeds tests/fixtures/tiny-qwen3 as it was at build time; it reads the same. */
static void test_embedded_model(void **state) {
    err_t err = {0};
    mdir_t *emd;
    assert_int_equal(mdir_open(MDIR_EMBEDDED, &emd, &err), 0);
    const void *bytes;
    size_t len;
    assert_int_equal(mdir_map(emd, "model.safetensors", &bytes, &len, &err), 0);
    if (len == 0) {
        mdir_close(emd);
        print_message("    the embedded model.safetensors is empty (fixture not generated yet)\n");
        skip();
    }
    st_set_t *eset;
    if (st_open(emd, &eset, &err) < 0) fail_msg("%s", err.msg);
    mdir_t *md;
    st_set_t *set;
    assert_int_equal(mdir_open(TACHYON_FIXTURES "/tiny-qwen3", &md, &err), 0);
    if (st_open(md, &set, &err) < 0) fail_msg("%s", err.msg);
    assert_true(st_count(eset) > 0);
    assert_int_equal(st_count(eset), st_count(set));
    for (int i = 0; i < st_count(set); i++) {
        const st_tensor_t *t = st_at(set, i), *e = st_find(eset, t->name);
        assert_non_null(e);
        assert_int_equal(e->dtype, t->dtype);
        assert_int_equal(e->nbytes, t->nbytes);
        assert_memory_equal(e->data, t->data, t->nbytes);
    }
    st_close(set);
    mdir_close(md);
    st_close(eset);
    mdir_close(emd);
}

/* Every FP8 weight has a block scale of shape [ceil(N/128), ceil(K/128)] (models.md 2.2). */
static void test_fixture_tiny_qwen3_fp8(void **state) {
    mdir_t *md;
    st_set_t *set = open_fixture("tiny-qwen3-fp8", "model.safetensors.index.json", &md);
    int64_t hidden = config_int("tiny-qwen3-fp8", "hidden_size");
    int64_t inter = config_int("tiny-qwen3-fp8", "intermediate_size");

    const st_tensor_t *w = st_find(set, "model.layers.0.mlp.gate_proj.weight");
    check_shape2(w, inter, hidden);
    assert_int_equal(w->dtype, DT_F8_E4M3);
    const st_tensor_t *s = st_find(set, "model.layers.0.mlp.gate_proj.weight_scale_inv");
    check_shape2(s, (inter + 127) / 128, (hidden + 127) / 128);
    assert_int_equal(s->dtype, DT_BF16);
    int64_t vocab = config_int("tiny-qwen3-fp8", "vocab_size");
    const st_tensor_t *emb = st_find(set, "model.embed_tokens.weight");
    check_shape2(emb, vocab, hidden);
    assert_int_equal(emb->dtype, DT_BF16);
    const st_tensor_t *head = st_find(set, "lm_head.weight"); /* untied, not quantized */
    check_shape2(head, vocab, hidden);
    assert_int_equal(head->dtype, DT_BF16);
    assert_int_equal(st_find(set, "model.norm.weight")->dtype, DT_BF16);
    /* Two shards, each opened: the embedding and the head live in different ones. */
    assert_string_not_equal(emb->file, head->file);

    int scales = 0;
    for (int i = 0; i < st_count(set); i++) {
        const st_tensor_t *t = st_at(set, i);
        const char *suffix = strstr(t->name, ".weight_scale_inv");
        if (!suffix || suffix[strlen(".weight_scale_inv")]) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s.weight", (int)(suffix - t->name), t->name);
        const st_tensor_t *q = st_find(set, name);
        assert_non_null(q);
        assert_int_equal(q->dtype, DT_F8_E4M3);
        check_shape2(t, (q->shape[0] + 127) / 128, (q->shape[1] + 127) / 128);
        scales++;
    }
    assert_true(scales >= 7); /* q, k, v, o, gate, up, down of at least one layer */
    st_close(set);
    mdir_close(md);
}

int main(void) {
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_single_file),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_sharded_extra_tensor),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_failed_file_rolls_back),
        cmocka_unit_test(test_file_too_short),
        cmocka_unit_test(test_header_length_beyond_file),
        cmocka_unit_test(test_header_nul_byte),
        cmocka_unit_test(test_header_too_large),
        cmocka_unit_test(test_empty_header),
        cmocka_unit_test(test_truncated_file),
        cmocka_unit_test(test_no_checkpoint),
        cmocka_unit_test(test_index_invalid_json),
        cmocka_unit_test(test_index_no_weight_map),
        cmocka_unit_test(test_index_missing_shard),
        cmocka_unit_test(test_index_tensor_absent),
        cmocka_unit_test(test_index_tensor_in_other_shard),
        cmocka_unit_test(test_index_duplicate_across_shards),
        cmocka_unit_test(test_index_bad_shard),
        cmocka_unit_test(test_fixture_tiny_qwen3),
        cmocka_unit_test(test_fixture_tiny_qwen3_fp8),
        cmocka_unit_test(test_embedded_model),
    };
    enum { N_FIXED = sizeof fixed / sizeof fixed[0] };
    static struct CMUnitTest tests[N_FIXED + N_BAD];
    memcpy(tests, fixed, sizeof fixed);
    for (int i = 0; i < N_BAD; i++)
        tests[N_FIXED + i] =
            (struct CMUnitTest){bad_cases[i].name, run_bad_case, NULL, NULL, (void *)&bad_cases[i]};
    return _cmocka_run_group_tests("safetensors", tests, N_FIXED + N_BAD, NULL, NULL);
}
