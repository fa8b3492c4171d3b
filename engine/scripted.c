/*
 * scripted: replies written in advance, for tests (scripted.h).
 */
#include "scripted.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

typedef struct rule {
    char *when;
    size_t when_len;
    int32_t *ids;
    size_t n_ids;
} rule_t;

struct scripted {
    const tokenizer_t *tok;
    rule_t *rules;
    int n_rules;
};

void scripted_free(scripted_t *s) {
    if (!s) return;
    for (int i = 0; i < s->n_rules; i++) {
        free(s->rules[i].when);
        free(s->rules[i].ids);
    }
    free(s->rules);
    free(s);
}

int scripted_load(const tokenizer_t *tok, scripted_t **out, err_t *err) {
    *out = NULL;
    const char *path = getenv("TACHYON_SCRIPTED_OUTPUTS");
    if (!path || !*path || !tok) return 0;
    cJSON *j = json_parse_file(path, err);
    if (!j) return err_prefix(err, "%s (TACHYON_SCRIPTED_OUTPUTS)", path);
    scripted_t *s = calloc(1, sizeof *s);
    int n = cJSON_GetArraySize(j);
    if (!s || !cJSON_IsArray(j) || !(s->rules = calloc((size_t)(n ? n : 1), sizeof *s->rules))) {
        cJSON_Delete(j);
        scripted_free(s);
        return err_set(err, "%s (TACHYON_SCRIPTED_OUTPUTS): not a list of {\"when\", \"reply\"}",
                       path);
    }
    s->tok = tok;
    for (const cJSON *r = j->child; r; r = r->next) {
        const cJSON *when = cJSON_GetObjectItemCaseSensitive(r, "when");
        const cJSON *reply = cJSON_GetObjectItemCaseSensitive(r, "reply");
        rule_t *rule = &s->rules[s->n_rules++]; /* counted at once: freed with s on failure */
        if (!cJSON_IsString(when) || !cJSON_IsString(reply) ||
            !(rule->when = strdup(when->valuestring)) ||
            tok_encode(tok, reply->valuestring, json_strlen(reply), &rule->ids, &rule->n_ids, err) <
                0) {
            int bad = s->n_rules - 1;
            cJSON_Delete(j);
            scripted_free(s);
            return err_set(err,
                           "%s (TACHYON_SCRIPTED_OUTPUTS): rule %d needs \"when\" and "
                           "\"reply\" strings",
                           path, bad);
        }
        rule->when_len = strlen(rule->when);
    }
    cJSON_Delete(j);
    fprintf(stderr, "tachyon: scripted outputs from %s (%d rules): replies are not the model's\n",
            path, s->n_rules);
    *out = s;
    return 0;
}

const int32_t *scripted_match(const scripted_t *s, const int32_t *prompt, int n_prompt, int *n) {
    char *text;
    size_t len;
    err_t err;
    if (!s || tok_decode(s->tok, prompt, (size_t)n_prompt, false, &text, &len, &err) < 0)
        return NULL;
    const rule_t *hit = NULL;
    for (int i = 0; i < s->n_rules && !hit; i++)
        if (memmem(text, len, s->rules[i].when, s->rules[i].when_len)) hit = &s->rules[i];
    free(text);
    if (!hit) return NULL;
    *n = (int)hit->n_ids;
    return hit->ids;
}

int scripted_step_delay_us(void) {
    const char *ms = getenv("TACHYON_TEST_STEP_DELAY_MS");
    if (!ms) return 0;
    char *end;
    long v = strtol(ms, &end, 10);
    return *end || v <= 0 || v > 10000 ? 0 : (int)v * 1000;
}
