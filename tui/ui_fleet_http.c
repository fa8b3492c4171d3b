/* ui_fleet's sampler: every replica's /metrics read at once with libcurl's multi interface on a
 * thread of its own, the rows updated under a lock for the UI thread to copy (ui_fleet.h). */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "ui_fleet.h"

#define BODY_MAX (16u << 20) /* bytes of a /metrics answer read at most (an MoE's is ~1 MiB) */
#define POLL_MS  100         /* how often the thread looks at the stop flag */

typedef struct target {
    char url[UI_FLEET_URL + 16]; /* the metrics URL */
    CURL *h;                     /* kept across rounds: its connection stays open */
    char *body;                  /* [cap] the answer so far */
    size_t len, cap;
    bool too_big;
} target_t;

struct ui_fleet_sampler {
    pthread_t thread;
    pthread_mutex_t mu;
    atomic_bool stop;
    double period_s;
    CURLM *multi;
    int n;
    target_t *t;          /* [n], the thread's own */
    ui_fleet_row_t *rows; /* [n], under mu */
    unsigned seq;         /* under mu: rounds done */
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    target_t *t = user;
    size_t n = size * nmemb;
    if (t->len + n + 1 > BODY_MAX) {
        t->too_big = true;
        return 0; /* ends the transfer with an error */
    }
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64 * 1024;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->body, cap);
        if (!p) return 0;
        t->body = p;
        t->cap = cap;
    }
    memcpy(t->body + t->len, data, n);
    t->len += n;
    return n;
}

/* Why a read failed, in the table's words. */
static void failure(CURLcode rc, long status, const target_t *t, char *why, size_t size) {
    if (t->too_big)
        snprintf(why, size, "answer over %u MiB", BODY_MAX >> 20);
    else if (rc == CURLE_COULDNT_CONNECT)
        snprintf(why, size, "connection refused");
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        snprintf(why, size, "timed out");
    else if (rc == CURLE_COULDNT_RESOLVE_HOST)
        snprintf(why, size, "unknown host");
    else if (rc != CURLE_OK)
        snprintf(why, size, "%s", curl_easy_strerror(rc));
    else
        snprintf(why, size, "HTTP %ld", status);
}

/* One round: every replica read at once; false when stopped in the middle. */
static bool round_trip(ui_fleet_sampler_t *sp) {
    long timeout_ms = sp->period_s > 1 ? (long)(sp->period_s * 1000) : 1000;
    for (int i = 0; i < sp->n; i++) {
        target_t *t = &sp->t[i];
        t->len = 0;
        t->too_big = false;
        curl_easy_setopt(t->h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(t->h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
        curl_multi_add_handle(sp->multi, t->h);
    }
    int running = sp->n;
    while (running > 0 && !atomic_load(&sp->stop)) {
        curl_multi_perform(sp->multi, &running);
        if (running > 0) curl_multi_poll(sp->multi, NULL, 0, POLL_MS, NULL);
    }
    bool stopped = running > 0;
    CURLcode result[UI_FLEET_MAX];
    for (int i = 0; i < sp->n; i++)
        result[i] = CURLE_OPERATION_TIMEDOUT;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(sp->multi, &left)))
        if (msg->msg == CURLMSG_DONE)
            for (int i = 0; i < sp->n; i++)
                if (sp->t[i].h == msg->easy_handle) result[i] = msg->data.result;
    for (int i = 0; i < sp->n; i++)
        curl_multi_remove_handle(sp->multi, sp->t[i].h);
    if (stopped) return false;

    ui_fleet_scrape_t s[UI_FLEET_MAX];
    bool ok[UI_FLEET_MAX];
    char why[UI_FLEET_MAX][96];
    for (int i = 0; i < sp->n; i++) {
        target_t *t = &sp->t[i];
        long status = 0;
        curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
        ok[i] = result[i] == CURLE_OK && status == 200;
        if (!ok[i])
            failure(result[i], status, t, why[i], sizeof why[i]);
        else if (!(ok[i] = ui_fleet_parse(t->body ? t->body : "", t->len, &s[i]) == 0))
            snprintf(why[i], sizeof why[i], "no vLLM metrics");
    }
    double now = engine_now();
    pthread_mutex_lock(&sp->mu);
    for (int i = 0; i < sp->n; i++)
        ui_fleet_row_update(&sp->rows[i], ok[i] ? &s[i] : NULL, why[i], now);
    sp->seq++;
    pthread_mutex_unlock(&sp->mu);
    return true;
}

static void *sampler_main(void *arg) {
    ui_fleet_sampler_t *sp = arg;
    pthread_setname_np(pthread_self(), "tachyon-fleet");
    while (!atomic_load(&sp->stop)) {
        double next = engine_now() + sp->period_s;
        if (!round_trip(sp)) break;
        /* the rest of the period in slices, so that a stop is seen within one */
        double left;
        while (!atomic_load(&sp->stop) && (left = next - engine_now()) > 0) {
            double slice = left < POLL_MS / 1e3 ? left : POLL_MS / 1e3;
            struct timespec ts = {0, (long)(slice * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

static void sampler_free(ui_fleet_sampler_t *sp) {
    for (int i = 0; sp->t && i < sp->n; i++) {
        if (sp->t[i].h) curl_easy_cleanup(sp->t[i].h);
        free(sp->t[i].body);
    }
    if (sp->multi) curl_multi_cleanup(sp->multi);
    free(sp->t);
    free(sp->rows);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

ui_fleet_sampler_t *ui_fleet_sampler_start(const char *const *urls, int n, double period_s,
                                           err_t *err) {
    if (n < 1 || n > UI_FLEET_MAX) {
        err_set(err, "between 1 and %d replicas can be watched, not %d", UI_FLEET_MAX, n);
        return NULL;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    ui_fleet_sampler_t *sp = calloc(1, sizeof *sp);
    if (!sp) {
        err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&sp->mu, NULL);
    atomic_init(&sp->stop, false);
    sp->period_s = period_s;
    sp->n = n;
    sp->t = calloc((size_t)n, sizeof *sp->t);
    sp->rows = calloc((size_t)n, sizeof *sp->rows);
    sp->multi = curl_multi_init();
    if (!sp->t || !sp->rows || !sp->multi) {
        sampler_free(sp);
        err_set(err, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        target_t *t = &sp->t[i];
        ui_fleet_row_init(&sp->rows[i], urls[i]);
        if (strlen(urls[i]) >= UI_FLEET_URL ||
            ui_fleet_metrics_url(urls[i], t->url, sizeof t->url) < 0) {
            sampler_free(sp);
            err_set(err, "the URL \"%.64s...\" is too long", urls[i]);
            return NULL;
        }
        if (!(t->h = curl_easy_init())) {
            sampler_free(sp);
            err_set(err, "cannot start libcurl");
            return NULL;
        }
        curl_easy_setopt(t->h, CURLOPT_URL, t->url);
        curl_easy_setopt(t->h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(t->h, CURLOPT_WRITEDATA, t);
        curl_easy_setopt(t->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(t->h, CURLOPT_USERAGENT, "tachyon-console");
    }
    if (pthread_create(&sp->thread, NULL, sampler_main, sp) != 0) {
        sampler_free(sp);
        err_set(err, "cannot start the fleet sampler thread");
        return NULL;
    }
    return sp;
}

bool ui_fleet_sampler_latest(ui_fleet_sampler_t *sp, ui_fleet_row_t *rows, int n, unsigned *seq) {
    pthread_mutex_lock(&sp->mu);
    bool newer = sp->seq != *seq;
    if (newer) {
        memcpy(rows, sp->rows, sizeof *rows * (size_t)(n < sp->n ? n : sp->n));
        *seq = sp->seq;
    }
    pthread_mutex_unlock(&sp->mu);
    return newer;
}

void ui_fleet_sampler_stop(ui_fleet_sampler_t *sp) {
    if (!sp) return;
    atomic_store(&sp->stop, true);
    pthread_join(sp->thread, NULL);
    sampler_free(sp);
}
