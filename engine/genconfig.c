#include "genconfig.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_id(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 2147483647.0 &&
           v->valuedouble == floor(v->valuedouble);
}

/* An optional token id: absent or null is -1. */
static int get_id(const cJSON *json, const char *key, const char *file, int *out, err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    *out = -1;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!is_id(v)) return err_set(err, "%s: field \"%s\" must be a token id", file, key);
    *out = v->valueint;
    return 0;
}

/* An optional number in [lo, hi] (lo excluded when lo_open); absent or null leaves *has false. */
static int get_number(const cJSON *json, const char *key, const char *file, double lo, bool lo_open,
                      double hi, bool *has, double *out, err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    *has = false;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < lo || (lo_open && v->valuedouble == lo) ||
        v->valuedouble > hi)
        return err_set(err, "%s: field \"%s\" must be a number in %c%g, %g]", file, key,
                       lo_open ? '(' : '[', lo, hi);
    *has = true;
    *out = v->valuedouble;
    return 0;
}

static int get_int(const cJSON *json, const char *key, const char *file, int min, bool *has,
                   int *out, err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, key);
    *has = false;
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < min ||
        v->valuedouble > 2147483647.0)
        return err_set(err, "%s: field \"%s\" must be an integer >= %d", file, key, min);
    *has = true;
    *out = v->valueint;
    return 0;
}

static int get_eos(const cJSON *json, const char *file, genconfig_t *gc, err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(json, "eos_token_id");
    if (!v || cJSON_IsNull(v)) return 0;
    if (is_id(v)) {
        gc->eos_ids[gc->n_eos++] = v->valueint;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return err_set(err, "%s: field \"eos_token_id\" must be a token id or a list of ids", file);
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!is_id(e))
            return err_set(err, "%s: field \"eos_token_id\" must be a token id or a list of ids",
                           file);
        if (gc->n_eos == GENCONFIG_MAX_EOS)
            return err_set(err, "%s: more than %d eos_token_id values", file, GENCONFIG_MAX_EOS);
        gc->eos_ids[gc->n_eos++] = e->valueint;
    }
    return 0;
}

static void clear(genconfig_t *gc) {
    memset(gc, 0, sizeof *gc);
    gc->bos_token_id = gc->pad_token_id = -1;
}

int genconfig_parse(const char *text, const char *file, genconfig_t *out, err_t *err) {
    clear(out);
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithOpts(text, &end, true);
    if (!json)
        return err_set(err, "%s: invalid JSON near byte %ld", file, end ? (long)(end - text) : -1L);
    int rc = -1;
    if (!cJSON_IsObject(json)) {
        err_set(err, "%s: expected a JSON object", file);
        goto out;
    }
    out->found = true;
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(json, "do_sample");
    if (ds && !cJSON_IsNull(ds)) {
        if (!cJSON_IsBool(ds)) {
            err_set(err, "%s: field \"do_sample\" must be true or false", file);
            goto out;
        }
        out->has_do_sample = true;
        out->do_sample = cJSON_IsTrue(ds);
    }
    if (get_eos(json, file, out, err) < 0 ||
        get_id(json, "bos_token_id", file, &out->bos_token_id, err) < 0 ||
        get_id(json, "pad_token_id", file, &out->pad_token_id, err) < 0 ||
        get_number(json, "temperature", file, 0, false, 1e6, &out->has_temperature,
                   &out->temperature, err) < 0 ||
        get_number(json, "top_p", file, 0, true, 1, &out->has_top_p, &out->top_p, err) < 0 ||
        get_number(json, "min_p", file, 0, false, 1, &out->has_min_p, &out->min_p, err) < 0 ||
        get_number(json, "repetition_penalty", file, 0, true, 1e6, &out->has_repetition_penalty,
                   &out->repetition_penalty, err) < 0 ||
        get_int(json, "top_k", file, -1, &out->has_top_k, &out->top_k, err) < 0 ||
        get_int(json, "max_new_tokens", file, 1, &out->has_max_new_tokens, &out->max_new_tokens,
                err) < 0)
        goto out;
    rc = 0;
out:
    cJSON_Delete(json);
    if (rc < 0) clear(out);
    return rc;
}

static int read_eos_token(mdir_t *dir, genconfig_t *gc, err_t *err) {
    if (!mdir_has(dir, "tokenizer_config.json")) return 0;
    char *text;
    size_t len;
    if (mdir_read_text(dir, "tokenizer_config.json", &text, &len, err) < 0) return -1;
    cJSON *json = cJSON_ParseWithLength(text, len);
    free(text);
    if (!json) return err_set(err, "%s/tokenizer_config.json: invalid JSON", mdir_path(dir));
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(json, "eos_token");
    if (cJSON_IsObject(eos)) eos = cJSON_GetObjectItemCaseSensitive(eos, "content");
    if (cJSON_IsString(eos) && strlen(eos->valuestring) < sizeof gc->eos_token)
        snprintf(gc->eos_token, sizeof gc->eos_token, "%s", eos->valuestring);
    cJSON_Delete(json);
    return 0;
}

int genconfig_load(mdir_t *dir, genconfig_t *out, err_t *err) {
    clear(out);
    if (mdir_has(dir, "generation_config.json")) {
        char file[4200], *text;
        snprintf(file, sizeof file, "%s/generation_config.json", mdir_path(dir));
        if (mdir_read_text(dir, "generation_config.json", &text, NULL, err) < 0) return -1;
        int rc = genconfig_parse(text, file, out, err);
        free(text);
        if (rc < 0) return -1;
    }
    if (read_eos_token(dir, out, err) < 0) {
        clear(out);
        return -1;
    }
    return 0;
}

int genconfig_stop_ids(const genconfig_t *gc, int primary_eos, int *ids, int max) {
    int n = 0;
    if (primary_eos >= 0 && n < max) ids[n++] = primary_eos;
    for (int i = 0; i < gc->n_eos && n < max; i++) {
        bool dup = false;
        for (int k = 0; k < n; k++)
            dup |= ids[k] == gc->eos_ids[i];
        if (!dup) ids[n++] = gc->eos_ids[i];
    }
    return n;
}
