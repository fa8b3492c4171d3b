/* sampling: parameter defaults and validation with vLLM's rules and messages. */
#include "sampling.h"

#include <stdlib.h>
#include <string.h>

/* vLLM: temperatures below _SAMPLING_EPS are greedy; positive ones below _MAX_TEMP are raised
 * to it, since dividing logits by them overflows. */
#define SAMPLING_EPS      1e-5f
#define SAMPLING_MIN_TEMP 1e-2f

void sampling_params_init(sampling_params_t *p) {
    memset(p, 0, sizeof *p);
    p->n = 1;
    p->temperature = SAMPLING_UNSET_F;
    p->top_k = SAMPLING_UNSET_I;
    p->top_p = SAMPLING_UNSET_F;
    p->min_p = SAMPLING_UNSET_F;
    p->presence_penalty = SAMPLING_UNSET_F;
    p->frequency_penalty = SAMPLING_UNSET_F;
    p->repetition_penalty = SAMPLING_UNSET_F;
    p->max_tokens = SAMPLING_UNSET_I;
    p->min_tokens = SAMPLING_UNSET_I;
    p->logprobs = -1;
    p->skip_special_tokens = true;
}

void sampling_params_free(sampling_params_t *p) {
    for (int i = 0; i < p->n_stop && i < SAMPLING_MAX_STOP; i++) {
        free(p->stop[i]);
        p->stop[i] = NULL;
    }
    p->n_stop = 0;
}

int sampling_params_copy(sampling_params_t *dst, const sampling_params_t *src, err_t *err) {
    *dst = *src;
    dst->n_stop = 0;
    memset(dst->stop, 0, sizeof dst->stop);
    for (int i = 0; i < src->n_stop && i < SAMPLING_MAX_STOP; i++) {
        dst->stop[i] = strdup(src->stop[i] ? src->stop[i] : "");
        if (!dst->stop[i]) {
            sampling_params_free(dst);
            return err_set(err, "sampling: out of memory copying stop strings");
        }
        dst->n_stop = i + 1;
    }
    return 0;
}

int sampling_params_add_stop(sampling_params_t *p, const char *stop, err_t *err) {
    if (!stop || !stop[0]) return err_set(err, "stop cannot contain an empty string");
    if (p->n_stop >= SAMPLING_MAX_STOP)
        return err_set(err, "stop: at most %d strings are allowed", SAMPLING_MAX_STOP);
    char *s = strdup(stop);
    if (!s) return err_set(err, "sampling: out of memory adding a stop string");
    p->stop[p->n_stop++] = s;
    return 0;
}

static float pick_f(float v, const sampling_params_t *d, size_t off, float builtin) {
    if (!isnan(v)) return v;
    float dv = d ? *(const float *)((const char *)d + off) : SAMPLING_UNSET_F;
    return isnan(dv) ? builtin : dv;
}

static int pick_i(int v, const sampling_params_t *d, size_t off, int builtin) {
    if (v != SAMPLING_UNSET_I) return v;
    int dv = d ? *(const int *)((const char *)d + off) : SAMPLING_UNSET_I;
    return dv == SAMPLING_UNSET_I ? builtin : dv;
}

#define PICK_F(field, builtin)                                                                     \
    p->field = pick_f(p->field, defaults, offsetof(sampling_params_t, field), builtin)
#define PICK_I(field, builtin)                                                                     \
    p->field = pick_i(p->field, defaults, offsetof(sampling_params_t, field), builtin)

static bool in_range(float v, float lo, float hi) {
    return v >= lo && v <= hi; /* false for NaN */
}

int sampling_params_resolve(sampling_params_t *p, const sampling_params_t *defaults, err_t *err) {
    PICK_F(temperature, 1.0f);
    PICK_I(top_k, 0);
    PICK_F(top_p, 1.0f);
    PICK_F(min_p, 0.0f);
    PICK_F(presence_penalty, 0.0f);
    PICK_F(frequency_penalty, 0.0f);
    PICK_F(repetition_penalty, 1.0f);
    PICK_I(max_tokens, SAMPLING_UNSET_I);
    PICK_I(min_tokens, 0);

    if (p->temperature > 0.0f && p->temperature < SAMPLING_MIN_TEMP)
        p->temperature = SAMPLING_MIN_TEMP;

    /* In vLLM's order, so that the first broken field is the one named. */
    if (p->n < 1 || p->n > SAMPLING_MAX_N)
        return err_set(err, "n must be in [1, %d], got %d", SAMPLING_MAX_N, p->n);
    if (!in_range(p->presence_penalty, -2.0f, 2.0f))
        return err_set(err, "presence_penalty must be in [-2, 2], got %g",
                       (double)p->presence_penalty);
    if (!in_range(p->frequency_penalty, -2.0f, 2.0f))
        return err_set(err, "frequency_penalty must be in [-2, 2], got %g",
                       (double)p->frequency_penalty);
    if (!isfinite(p->repetition_penalty) || p->repetition_penalty <= 0.0f)
        return err_set(err, "repetition_penalty must be a finite number greater than zero, got %g",
                       (double)p->repetition_penalty);
    if (!in_range(p->temperature, 0.0f, 2.0f))
        return err_set(err, "temperature must be in [0, 2], got %g", (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return err_set(err, "top_p must be in (0, 1], got %g", (double)p->top_p);
    if (p->top_k < 0)
        return err_set(err, "top_k must be 0 (disable), or at least 1, got %d", p->top_k);
    if (!in_range(p->min_p, 0.0f, 1.0f))
        return err_set(err, "min_p must be in [0, 1], got %g", (double)p->min_p);
    if (p->max_tokens != SAMPLING_UNSET_I && p->max_tokens < 1)
        return err_set(err, "max_tokens must be at least 1, got %d", p->max_tokens);
    if (p->min_tokens < 0)
        return err_set(err, "min_tokens must be greater than or equal to 0, got %d", p->min_tokens);
    if (p->max_tokens != SAMPLING_UNSET_I && p->min_tokens > p->max_tokens)
        return err_set(err, "min_tokens must be less than or equal to max_tokens=%d, got %d",
                       p->max_tokens, p->min_tokens);
    if (p->logprobs < -1 || p->logprobs > SAMPLING_MAX_LOGPROBS)
        return err_set(err, "logprobs must be in [0, %d] (or -1 for none), got %d",
                       SAMPLING_MAX_LOGPROBS, p->logprobs);
    if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > SAMPLING_MAX_STOP_IDS)
        return err_set(err, "stop_token_ids: at most %d ids are allowed, got %d",
                       SAMPLING_MAX_STOP_IDS, p->n_stop_token_ids);
    int kept = 0;
    for (int i = 0; i < p->n_stop_token_ids; i++) {
        int32_t id = p->stop_token_ids[i];
        if (id < 0) return err_set(err, "stop_token_ids must be non-negative, got %d", id);
        bool dup = false;
        for (int j = 0; j < kept && !dup; j++)
            dup = p->stop_token_ids[j] == id;
        if (!dup) p->stop_token_ids[kept++] = id;
    }
    p->n_stop_token_ids = kept;
    if (p->n_stop < 0 || p->n_stop > SAMPLING_MAX_STOP)
        return err_set(err, "stop: at most %d strings are allowed, got %d", SAMPLING_MAX_STOP,
                       p->n_stop);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return err_set(err, "stop cannot contain an empty string");

    if (p->temperature < SAMPLING_EPS) {
        p->top_p = 1.0f;
        p->top_k = 0;
        p->min_p = 0.0f;
        if (p->n > 1) return err_set(err, "n must be 1 when using greedy sampling, got %d", p->n);
    }
    return 0;
}
