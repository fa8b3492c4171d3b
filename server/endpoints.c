/*
 * endpoints: the small endpoints that read the engine or change its flags: /v1/models,
 * /metrics, /admin/flags (server_int.h).
 */
#include "server_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// Small endpoints

enum MHD_Result srv_models(req_t *r) {
    http_server_t *s = r->srv;
    jbuf_t b;
    jb_init(&b);
    int mml = oai_max_model_len(s->eng);
    jb_lit(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < s->n_names; i++) {
        jb_lit(&b, i ? ",{\"id\":" : "{\"id\":");
        jb_cstr(&b, s->names[i]);
        jb_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"tachyon\",\"root\":",
                  s->started);
        jb_cstr(&b, s->root);
        jb_printf(&b,
                  ",\"parent\":null,\"max_model_len\":%d,\"permission\":[{\"id\":\"modelperm-"
                  "%016llx\",\"object\":\"model_permission\",\"created\":%lld,"
                  "\"allow_create_engine\":false,\"allow_sampling\":true,\"allow_logprobs\":true,"
                  "\"allow_search_indices\":false,\"allow_view\":true,\"allow_fine_tuning\":false,"
                  "\"organization\":\"*\",\"group\":null,\"is_blocking\":false}]}",
                  mml, (unsigned long long)(s->oai.id_seed + (uint64_t)i), s->started);
    }
    jb_lit(&b, "]}");
    enum MHD_Result rc = srv_reply_json(r, 200, &b);
    jb_free(&b);
    return rc;
}

enum MHD_Result srv_metrics(req_t *r) {
    http_server_t *s = r->srv;
    int n = engine_replicas(s->eng);
    if (n > STATS_MERGE_MAX) n = STATS_MERGE_MAX;
    stats_snapshot_t *snap = malloc((size_t)n * sizeof *snap);
    if (!snap) return srv_fail(r, 500, NULL, "out of memory");
    const stats_snapshot_t *snaps[STATS_MERGE_MAX];
    for (int i = 0; i < n; i++) {
        engine_replica_stats(s->eng, i, &snap[i]);
        snaps[i] = &snap[i];
    }
    char bs[32] = "16", dtype[32] = "auto", pc[8] = "true";
    err_t err;
    engine_flag_get(s->eng, "block-size", bs, sizeof bs, &err);
    engine_flag_get(s->eng, "kv-cache-dtype", dtype, sizeof dtype, &err);
    engine_flag_get(s->eng, "enable-prefix-caching", pc, sizeof pc, &err);
    metrics_info_t info = {
        .model_name = s->names[0],
        .block_size = atoi(bs),
        .kv_cache_dtype = dtype,
        .prefix_caching = !strcmp(pc, "true"),
        .requests_in_flight = http_in_flight(s),
    };
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (di) info.connections = di->num_connections;
    jbuf_t b;
    jb_init(&b);
    metrics_render(s->metrics, snaps, n, &info, &b);
    free(snap);
    enum MHD_Result rc =
        b.oom ? MHD_NO
              : srv_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len, false);
    jb_free(&b);
    return rc;
}

static void flag_json(http_server_t *s, const flag_def_t *f, jbuf_t *b) {
    char value[MAX_FLAG_VALUE] = "";
    err_t err;
    engine_flag_get(s->eng, f->name, value, sizeof value, &err);
    jb_lit(b, "{\"name\":");
    jb_cstr(b, f->name);
    jb_lit(b, ",\"value\":");
    jb_cstr(b, value);
    jb_lit(b, ",\"default\":");
    jb_cstr(b, f->def);
    jb_printf(b, ",\"type\":\"%s\",\"apply\":\"%s\"", flag_type_name(f->type),
              flag_apply_name(f->apply));
    if (f->type == FLAG_INT || f->type == FLAG_FLOAT || f->type == FLAG_SIZE) {
        jb_lit(b, ",\"min\":");
        jb_double(b, f->min);
        jb_lit(b, ",\"max\":");
        jb_double(b, f->max);
    }
    if (f->type == FLAG_ENUM && f->choices) {
        jb_lit(b, ",\"choices\":[");
        for (int i = 0; f->choices[i]; i++) {
            if (i) jb_raw(b, ",", 1);
            jb_cstr(b, f->choices[i]);
        }
        jb_raw(b, "]", 1);
    }
    jb_lit(b, ",\"help\":");
    jb_cstr(b, f->help);
    jb_raw(b, "}", 1);
}

enum MHD_Result srv_flags_list(req_t *r) {
    jbuf_t b;
    jb_init(&b);
    jb_lit(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < flags_count(); i++) {
        if (i) jb_raw(&b, ",", 1);
        flag_json(r->srv, flags_at(i), &b);
    }
    jb_lit(&b, "]}");
    enum MHD_Result rc = srv_reply_json(r, 200, &b);
    jb_free(&b);
    return rc;
}

enum MHD_Result srv_flag_get(req_t *r) {
    const flag_def_t *f = flags_find(r->flag);
    if (!f) return srv_fail(r, 404, "name", "unknown flag \"%s\"", r->flag);
    jbuf_t b;
    jb_init(&b);
    flag_json(r->srv, f, &b);
    enum MHD_Result rc = srv_reply_json(r, 200, &b);
    jb_free(&b);
    return rc;
}

/* The engine thread answers a rebuild-flag change (engine_flag_done_fn). */
static void flag_answered(void *ctx, int rc, const char *msg) {
    req_t *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->flag_rc = rc;
    if (rc < 0) err_set(&r->flag_err, "%s", msg);
    r->flag_done = true;
    r->news = true;
    srv_resume_locked(r);
    pthread_cond_broadcast(&r->flag_cv);
    pthread_mutex_unlock(&r->mu);
}

static enum MHD_Result flag_reply(req_t *r) {
    jbuf_t b;
    jb_init(&b);
    flag_json(r->srv, flags_find(r->flag), &b);
    enum MHD_Result rc = srv_reply_json(r, 200, &b);
    jb_free(&b);
    return rc;
}

/* POST/PUT /admin/flags/NAME {"value": ...}: a rebuild flag drains the engine, so the change is
 * queued (engine_flag_set_async) and the connection waits suspended for the answer. */
enum MHD_Result srv_flag_set(req_t *r) {
    const flag_def_t *f = flags_find(r->flag);
    if (!f) return srv_fail(r, 404, "name", "unknown flag \"%s\"", r->flag);
    if (!jb_utf8_valid(r->body.p ? r->body.p : "", r->body.len))
        return srv_fail(r, 400, NULL, "the request body is not valid UTF-8");
    err_t err;
    cJSON *o = json_parse(r->body.p ? r->body.p : "", r->body.len, &err);
    if (!o) return srv_fail(r, 400, NULL, "JSON decode error: %s", err.msg);
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "value") : NULL;
    const char *text = NULL;
    if (cJSON_IsString(v))
        text = v->valuestring;
    else if (cJSON_IsNumber(v))
        text = v->valuestring; /* json_parse keeps the spelling */
    else if (cJSON_IsBool(v))
        text = cJSON_IsTrue(v) ? "true" : "false";
    else if (cJSON_IsNull(v))
        text = "unset";
    if (!text || strlen(text) >= sizeof r->flag_value) {
        cJSON_Delete(o);
        return srv_fail(r, 400, "value", "the body must be {\"value\": <string, number or bool>}");
    }
    snprintf(r->flag_value, sizeof r->flag_value, "%s", text);
    cJSON_Delete(o);
    snprintf(r->flag, sizeof r->flag, "%s", f->name);
    r->flag_running = true; /* before the answer can come */
    int rc = engine_flag_set_async(r->srv->eng, r->flag, r->flag_value, flag_answered, r, &err);
    if (rc != 0) {
        r->flag_running = false;
        return rc < 0 ? srv_fail(r, 400, "value", "%s", err.msg) : flag_reply(r);
    }
    srv_list_add(r->srv, r);
    return MHD_YES;
}

enum MHD_Result srv_flag_set_wait(req_t *r) {
    for (;;) {
        pthread_mutex_lock(&r->mu);
        r->news = false;
        bool done = r->flag_done;
        if (!done && !atomic_load(&r->srv->stopping)) {
            r->suspended = true;
            MHD_suspend_connection(r->conn);
        }
        pthread_mutex_unlock(&r->mu);
        if (!done) return atomic_load(&r->srv->stopping) ? MHD_NO : MHD_YES;
        r->flag_running = false;
        srv_list_remove(r->srv, r);
        if (r->flag_rc < 0) return srv_fail(r, 400, "value", "%s", r->flag_err.msg);
        return flag_reply(r);
    }
}
