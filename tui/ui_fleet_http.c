/* ui_fleet's HTTP side: every replica's /metrics read at once with libcurl's multi interface (a
 * reader), once on the calling thread (ui_fleet_read) or every period on a sampler thread whose
 * rows the UI thread copies under a lock (ui_fleet.h). */
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

/* The replicas' handles, read together. */
typedef struct reader {
    CURLM *multi;
    int n;
    target_t *t;     /* [n] */
    long timeout_ms; /* of each read */
} reader_t;

struct ui_fleet_sampler {
    pthread_t thread;
    pthread_mutex_t mu;
    atomic_bool stop;
    double period_s;
    reader_t rd;          /* the thread's own */
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

static void reader_free(reader_t *rd) {
    for (int i = 0; rd->t && i < rd->n; i++) {
        if (rd->t[i].h) curl_easy_cleanup(rd->t[i].h);
        free(rd->t[i].body);
    }
    if (rd->multi) curl_multi_cleanup(rd->multi);
    free(rd->t);
    memset(rd, 0, sizeof *rd);
}

static int reader_init(reader_t *rd, const char *const *urls, int n, double timeout_s, err_t *err) {
    memset(rd, 0, sizeof *rd);
    if (n < 1 || n > UI_FLEET_MAX)
        return err_set(err, "between 1 and %d replicas can be watched, not %d", UI_FLEET_MAX, n);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rd->n = n;
    rd->timeout_ms = timeout_s > 1 ? (long)(timeout_s * 1000) : 1000;
    rd->t = calloc((size_t)n, sizeof *rd->t);
    rd->multi = curl_multi_init();
    if (!rd->t || !rd->multi) {
        reader_free(rd);
        return err_set(err, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        target_t *t = &rd->t[i];
        if (strlen(urls[i]) >= UI_FLEET_URL ||
            ui_fleet_metrics_url(urls[i], t->url, sizeof t->url) < 0) {
            reader_free(rd);
            return err_set(err, "the URL \"%.64s...\" is too long", urls[i]);
        }
        if (!(t->h = curl_easy_init())) {
            reader_free(rd);
            return err_set(err, "cannot start libcurl");
        }
        curl_easy_setopt(t->h, CURLOPT_URL, t->url);
        curl_easy_setopt(t->h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(t->h, CURLOPT_WRITEDATA, t);
        curl_easy_setopt(t->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(t->h, CURLOPT_USERAGENT, "tachyon-console");
        curl_easy_setopt(t->h, CURLOPT_TIMEOUT_MS, rd->timeout_ms);
        curl_easy_setopt(t->h, CURLOPT_CONNECTTIMEOUT_MS, rd->timeout_ms);
    }
    return 0;
}

/* One round: every replica read at once, the outcomes applied to rows[0, n) (under mu when it
 * is not NULL). False, rows untouched, when stop was set in the middle. */
static bool reader_round(reader_t *rd, const atomic_bool *stop, ui_fleet_row_t *rows,
                         pthread_mutex_t *mu) {
    for (int i = 0; i < rd->n; i++) {
        rd->t[i].len = 0;
        rd->t[i].too_big = false;
        curl_multi_add_handle(rd->multi, rd->t[i].h);
    }
    int running = rd->n;
    while (running > 0 && !(stop && atomic_load(stop))) {
        curl_multi_perform(rd->multi, &running);
        if (running > 0) curl_multi_poll(rd->multi, NULL, 0, POLL_MS, NULL);
    }
    bool stopped = running > 0;
    CURLcode result[UI_FLEET_MAX];
    for (int i = 0; i < rd->n; i++)
        result[i] = CURLE_OPERATION_TIMEDOUT;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(rd->multi, &left)))
        if (msg->msg == CURLMSG_DONE)
            for (int i = 0; i < rd->n; i++)
                if (rd->t[i].h == msg->easy_handle) result[i] = msg->data.result;
    for (int i = 0; i < rd->n; i++)
        curl_multi_remove_handle(rd->multi, rd->t[i].h);
    if (stopped) return false;

    ui_fleet_scrape_t s[UI_FLEET_MAX];
    bool ok[UI_FLEET_MAX];
    char why[UI_FLEET_MAX][96];
    for (int i = 0; i < rd->n; i++) {
        target_t *t = &rd->t[i];
        long status = 0;
        curl_easy_getinfo(t->h, CURLINFO_RESPONSE_CODE, &status);
        ok[i] = result[i] == CURLE_OK && status == 200;
        if (!ok[i])
            failure(result[i], status, t, why[i], sizeof why[i]);
        else if (!(ok[i] = ui_fleet_parse(t->body ? t->body : "", t->len, &s[i]) == 0))
            snprintf(why[i], sizeof why[i], "no vLLM metrics");
    }
    double now = engine_now();
    if (mu) pthread_mutex_lock(mu);
    for (int i = 0; i < rd->n; i++)
        ui_fleet_row_update(&rows[i], ok[i] ? &s[i] : NULL, why[i], now);
    if (mu) pthread_mutex_unlock(mu);
    return true;
}

int ui_fleet_read(ui_fleet_row_t *rows, int n, double timeout_s, err_t *err) {
    const char *urls[UI_FLEET_MAX];
    for (int i = 0; i < n && i < UI_FLEET_MAX; i++)
        urls[i] = rows[i].url;
    reader_t rd;
    if (reader_init(&rd, urls, n, timeout_s, err) < 0) return -1;
    reader_round(&rd, NULL, rows, NULL);
    reader_free(&rd);
    return 0;
}

static void *sampler_main(void *arg) {
    ui_fleet_sampler_t *sp = arg;
    pthread_setname_np(pthread_self(), "tachyon-fleet");
    while (!atomic_load(&sp->stop)) {
        double next = engine_now() + sp->period_s;
        if (!reader_round(&sp->rd, &sp->stop, sp->rows, &sp->mu)) break;
        pthread_mutex_lock(&sp->mu);
        sp->seq++;
        pthread_mutex_unlock(&sp->mu);
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
    reader_free(&sp->rd);
    free(sp->rows);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

ui_fleet_sampler_t *ui_fleet_sampler_start(const char *const *urls, int n, double period_s,
                                           err_t *err) {
    ui_fleet_sampler_t *sp = calloc(1, sizeof *sp);
    if (!sp) {
        err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&sp->mu, NULL);
    atomic_init(&sp->stop, false);
    sp->period_s = period_s;
    if (reader_init(&sp->rd, urls, n, period_s, err) < 0) {
        sampler_free(sp);
        return NULL;
    }
    if (!(sp->rows = calloc((size_t)n, sizeof *sp->rows))) {
        sampler_free(sp);
        err_set(err, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        ui_fleet_row_init(&sp->rows[i], urls[i]);
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
        memcpy(rows, sp->rows, sizeof *rows * (size_t)(n < sp->rd.n ? n : sp->rd.n));
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
