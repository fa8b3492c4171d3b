/*
 * The safetensors reader (engine/safetensors.c) and the binding of a checkpoint to a model
 * (engine/weights.c). The input is one safetensors file, or a model.safetensors.index.json and
 * up to two shards ("a.safetensors", "b.safetensors" in the index's weight_map), the parts cut
 * by "\n#file\n". A single file is read from memory (st_add_file); one that is accepted, and
 * every sharded checkpoint, is written to a scratch directory and opened as a model directory
 * (st_open, then weights_load with a one-layer Qwen3 config of hidden size 8, which the seeds
 * match). Properties: every accepted tensor's data lies inside its file and its byte size is
 * its element count times its dtype's size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "model.h"
#include "safetensors.h"
#include "weights.h"

static const char CONFIG[] =
    "{\"model_type\": \"qwen3\", \"hidden_size\": 8, \"num_attention_heads\": 2, "
    "\"num_key_value_heads\": 1, \"head_dim\": 4, \"intermediate_size\": 16, \"vocab_size\": 16, "
    "\"num_hidden_layers\": 1, \"max_position_embeddings\": 64, \"tie_word_embeddings\": true, "
    "\"torch_dtype\": \"bfloat16\"}";

static const char *const SHARDS[] = {"a.safetensors", "b.safetensors"};

static void check_set(const st_set_t *st, const uint8_t *const *files, const size_t *lens,
                      int n_files) {
    for (int i = 0; i < st_count(st); i++) {
        const st_tensor_t *t = st_at(st, i);
        FZ_CHECK(t && t->name && st_find(st, t->name) == t, "tensor %d not found by name", i);
        FZ_CHECK(st_numel(t) >= 0 && (size_t)st_numel(t) * dtype_size(t->dtype) == t->nbytes,
                 "%s: %lld elements in %zu bytes", t->name, (long long)st_numel(t), t->nbytes);
        if (!files) continue;
        bool inside = false;
        for (int f = 0; f < n_files; f++)
            inside |= (const uint8_t *)t->data >= files[f] &&
                      (const uint8_t *)t->data + t->nbytes <= files[f] + lens[f];
        FZ_CHECK(inside, "%s: data outside its file", t->name);
    }
}

/* Opens the scratch directory as a model: the checkpoint, then its binding to CONFIG. */
static void open_dir(const char *dir) {
    mdir_t *md;
    err_t err;
    if (mdir_open(dir, &md, &err) < 0) abort();
    st_set_t *st;
    if (st_open(md, &st, &err) == 0) {
        check_set(st, NULL, NULL, 0);
        st_close(st);
    }
    model_config_t *cfg = malloc(sizeof *cfg);
    if (!cfg || model_config_parse(CONFIG, "config.json", cfg, &err) < 0) abort();
    model_weights_t *w;
    if (weights_load(md, cfg, &w, &err) == 0) {
        (void)weights_bytes(w);
        weights_destroy(w);
    }
    free(cfg);
    mdir_close(md);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_part_t parts[3];
    int n = fz_split(data, size, "\n#file\n", parts, 3);
    const char *dir = fz_scratch_dir();
    char path[8192];
    if (n == 1) {
        uint8_t *copy = malloc(size ? size : 1); /* exactly sized: ASan sees any overread */
        if (!copy) abort();
        if (size) memcpy(copy, data, size);
        st_set_t *st = st_create();
        err_t err;
        bool ok = st && st_add_file(st, "model.safetensors", copy, size, &err) == 0;
        if (ok) check_set(st, (const uint8_t *const[]){copy}, &size, 1);
        st_close(st);
        free(copy);
        if (!ok) return 0;
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        unlink(path);
        fz_write(dir, "model.safetensors", data, size);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path);
        fz_write(dir, "model.safetensors.index.json", parts[0].p, parts[0].n);
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, SHARDS[i]);
            unlink(path);
            if (i + 1 < n) fz_write(dir, SHARDS[i], parts[i + 1].p, parts[i + 1].n);
        }
    }
    open_dir(dir);
    return 0;
}
