/* results: see results.h. */
#include "results.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "statedir.h"

typedef struct run {
    bench_result_t *r;
    char *path; /* "" when the run could not be saved */
} run_t;

struct results {
    char *dir;
    run_t *runs; /* [n], capacity cap */
    int n, cap;
};

results_t *results_create(const char *dir, err_t *err) {
    if (statedir_mkdirs(dir, err) < 0) return NULL;
    results_t *rs = calloc(1, sizeof *rs);
    if (!rs || !(rs->dir = strdup(dir))) {
        free(rs);
        err_set(err, "results: out of memory");
        return NULL;
    }
    return rs;
}

void results_destroy(results_t *rs) {
    if (!rs) return;
    for (int i = 0; i < rs->n; i++) {
        bench_result_destroy(rs->runs[i].r);
        free(rs->runs[i].path);
    }
    free(rs->runs);
    free(rs->dir);
    free(rs);
}

const char *results_dir(const results_t *rs) {
    return rs->dir;
}

int results_default_dir(char *buf, size_t size, err_t *err) {
    return statedir_path("results", buf, size, err);
}

/* Lists and comparisons need the metrics, not every request's timings. */
static void drop_records(bench_result_t *r) {
    for (int i = 0; i < r->n_records; i++)
        free(r->records[i].itl);
    free(r->records);
    r->records = NULL;
    r->n_records = 0;
}

/* Appends r with its path (copied); takes r. -1 when out of memory (r is freed). */
static int append(results_t *rs, bench_result_t *r, const char *path) {
    if (rs->n == rs->cap) {
        int cap = rs->cap ? 2 * rs->cap : 16;
        run_t *p = realloc(rs->runs, (size_t)cap * sizeof *p);
        if (!p) goto oom;
        rs->runs = p;
        rs->cap = cap;
    }
    char *copy = strdup(path);
    if (!copy) goto oom;
    drop_records(r);
    rs->runs[rs->n++] = (run_t){r, copy};
    return 0;
oom:
    bench_result_destroy(r);
    return -1;
}

/* By name without ".json", so that DATE-PROFILE.json (the first run of a second) comes before
 * DATE-PROFILE-2.json: '-' sorts before '.'. */
static int by_name(const void *a, const void *b) {
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t nx = strlen(x) - 5, ny = strlen(y) - 5;
    int c = strncmp(x, y, nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

static bool is_json_name(const char *name) {
    size_t n = strlen(name);
    return name[0] != '.' && n > 5 && !strcmp(name + n - 5, ".json");
}

/* The *.json names of dir, sorted (malloc'd array of malloc'd names); -1 when unreadable. */
static int json_names(const char *dir, char ***out, int *n_out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_json_name(e->d_name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, (size_t)cap * sizeof *p);
            if (!p) break;
            names = p;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    *out = names;
    *n_out = n;
    return 0;
}

int results_load(results_t *rs, char *note, size_t size) {
    snprintf(note, size, "%s", "");
    char **names;
    int n;
    if (json_names(rs->dir, &names, &n) < 0) {
        snprintf(note, size, "cannot read the results directory %s", rs->dir);
        return 0;
    }
    int loaded = 0, unreadable = 0, empty = 0;
    char first[600] = "";
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", rs->dir, names[i]);
        free(names[i]);
        bench_result_t *r = NULL;
        bench_err_t berr = {{0}};
        if (bench_result_load_json(path, &r, &berr) < 0) {
            if (!unreadable++) snprintf(first, sizeof first, "%.590s", berr.msg);
            continue;
        }
        if (r->metrics.completed == 0) {
            empty++;
            bench_result_destroy(r);
            continue;
        }
        if (append(rs, r, path) == 0) loaded++;
    }
    free(names);
    if (!loaded && !unreadable && !empty) return 0;
    int k = snprintf(note, size, "%d benchmark run%s loaded from %s (/results lists them)", loaded,
                     loaded == 1 ? "" : "s", rs->dir);
    if (k < 0 || (size_t)k >= size) return loaded;
    if (empty)
        k += snprintf(note + k, size - (size_t)k, "; %d without a successful request skipped",
                      empty);
    if (unreadable && (size_t)k < size)
        snprintf(note + k, size - (size_t)k, "; %d unreadable skipped (%s)", unreadable, first);
    return loaded;
}

int results_add(results_t *rs, bench_result_t *r, err_t *err) {
    if (r->metrics.completed == 0) {
        bench_result_destroy(r);
        return 0;
    }
    /* DATE-PROFILE.json; runs finishing in the same second get -2, -3, ... */
    const char *profile = r->options.profile[0] ? r->options.profile : "custom";
    char path[4096];
    snprintf(path, sizeof path, "%.3900s/%.31s-%.63s.json", rs->dir, r->date, profile);
    for (int k = 2; access(path, F_OK) == 0 && k < 1000; k++)
        snprintf(path, sizeof path, "%.3900s/%.31s-%.63s-%d.json", rs->dir, r->date, profile, k);
    bench_err_t berr = {{0}};
    if (bench_result_save_json(r, path, &berr) < 0) {
        err_set(err, "%s", berr.msg);
        path[0] = '\0';
    }
    if (append(rs, r, path) < 0) return err_set(err, "results: out of memory");
    return rs->n;
}

int results_count(const results_t *rs) {
    return rs->n;
}

const bench_result_t *results_get(const results_t *rs, int k) {
    return k >= 1 && k <= rs->n ? rs->runs[k - 1].r : NULL;
}

const char *results_path(const results_t *rs, int k) {
    return k >= 1 && k <= rs->n ? rs->runs[k - 1].path : NULL;
}

void results_flags_text(const bench_result_t *r, const flag_values_t *baseline, char *buf,
                        size_t size) {
    snprintf(buf, size, "%s", r->server_flags_json[0] ? "defaults" : "(flags unknown)");
    cJSON *j = cJSON_Parse(r->server_flags_json);
    if (!j) return;
    size_t used = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
        const flag_def_t *f = it->string ? flags_find(it->string) : NULL;
        const char *value = cJSON_GetStringValue(it);
        if (!f || !value) continue;
        flag_values_t v = *baseline;
        err_t err;
        if (flags_set(f, value, &v, &err) == 0 && !flags_differ(f, &v, baseline)) continue;
        int n = snprintf(buf + used, size - used, "%s%s=%s", used ? " " : "", f->name, value);
        if (n < 0 || (size_t)n >= size - used) break;
        used += (size_t)n;
    }
    cJSON_Delete(j);
}

void results_list(const results_t *rs, const flag_values_t *baseline, FILE *f) {
    fprintf(f, "  #  date             profile   prompts  ok    out tok/s  TTFT p50 ms  flags\n");
    for (int i = 0; i < rs->n; i++) {
        const bench_result_t *r = rs->runs[i].r;
        char flags[256];
        results_flags_text(r, baseline, flags, sizeof flags);
        fprintf(f, "%3d  %-15s  %-8s  %7d  %-4d  %9.1f  %11.1f  %s%s\n", i + 1, r->date,
                r->options.profile[0] ? r->options.profile : "-", r->options.num_prompts,
                r->metrics.completed, r->metrics.output_throughput, r->metrics.ttft.median, flags,
                r->stopped ? " (stopped)" : "");
    }
}

static bool complete(const bench_result_t *r) {
    return !r->stopped && r->metrics.completed > 0;
}

/* The default pair: the newest complete run (*run, an index) and the newest complete run of its
 * profile before it (*base). */
static int default_pair(const results_t *rs, int *base, int *run, err_t *err) {
    int k = rs->n - 1;
    while (k >= 0 && !complete(rs->runs[k].r))
        k--;
    if (k < 0)
        return err_set(err, "no complete benchmark run to compare yet: /bench PROFILE runs one");
    const char *profile = rs->runs[k].r->options.profile;
    for (int j = k - 1; j >= 0; j--) {
        const bench_result_t *r = rs->runs[j].r;
        if (complete(r) && !strcmp(r->options.profile, profile)) {
            *base = j;
            *run = k;
            return 0;
        }
    }
    return err_set(err,
                   "/compare needs two complete runs of one profile and run #%d (%s) is the only "
                   "one: /bench %s again (e.g. after a /set), or name runs: /compare A B",
                   k + 1, profile[0] ? profile : "custom", profile[0] ? profile : "PROFILE");
}

/* Run number ("3", "#3") or result file (a path, or a name in the directory) arg. A file is
 * loaded into *loaded (the caller frees it). */
static const bench_result_t *resolve(const results_t *rs, const char *arg, bench_result_t **loaded,
                                     char *label, size_t label_size, err_t *err) {
    const char *s = arg[0] == '#' ? arg + 1 : arg;
    char *end;
    long k = strtol(s, &end, 10);
    if (*s && !*end) {
        snprintf(label, label_size, "#%ld", k);
        if (k >= 1 && k <= rs->n) return rs->runs[k - 1].r;
        err_set(err, "no run %s: /results lists runs 1..%d", arg, rs->n);
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s", arg);
    if (access(path, R_OK) != 0 && !strchr(arg, '/'))
        snprintf(path, sizeof path, "%.3000s/%.1000s", rs->dir, arg);
    bench_err_t berr = {{0}};
    if (bench_result_load_json(path, loaded, &berr) < 0) {
        err_set(err,
                "\"%.200s\" is neither a run number (/results lists them) nor a result file: %s",
                arg, berr.msg);
        return NULL;
    }
    const char *slash = strrchr(path, '/');
    snprintf(label, label_size, "%.60s", slash ? slash + 1 : path);
    if ((*loaded)->metrics.completed == 0) {
        err_set(err, "%s has no successful request: nothing to compare", path);
        return NULL;
    }
    return *loaded;
}

void results_set_free(results_set_t *set) {
    for (int i = 0; set->loaded && i < set->n; i++)
        bench_result_destroy(set->loaded[i]);
    free(set->loaded);
    free(set->r);
    free(set->label);
    memset(set, 0, sizeof *set);
}

int results_pick(const results_t *rs, int argc, char *const *argv, results_set_t *set, err_t *err) {
    memset(set, 0, sizeof *set);
    if (argc == 1) return err_set(err, "usage: /compare [A B...] (run numbers or result files)");
    int n = argc ? argc : 2;
    set->r = calloc((size_t)n, sizeof *set->r);
    set->loaded = calloc((size_t)n, sizeof *set->loaded);
    set->label = calloc((size_t)n, sizeof *set->label);
    if (!set->r || !set->loaded || !set->label) {
        results_set_free(set);
        return err_set(err, "results: out of memory");
    }
    set->n = n;
    if (argc == 0) {
        int k[2] = {0, 0};
        if (default_pair(rs, &k[0], &k[1], err) < 0) {
            results_set_free(set);
            return -1;
        }
        for (int i = 0; i < 2; i++) {
            set->r[i] = rs->runs[k[i]].r;
            snprintf(set->label[i], sizeof set->label[i], "#%d", k[i] + 1);
        }
        return 0;
    }
    for (int i = 0; i < argc; i++)
        if (!(set->r[i] = resolve(rs, argv[i], &set->loaded[i], set->label[i], sizeof set->label[i],
                                  err))) {
            results_set_free(set);
            return -1;
        }
    return 0;
}

int results_compare(const results_t *rs, int argc, char *const *argv, FILE *f, err_t *err) {
    results_set_t set;
    if (results_pick(rs, argc, argv, &set, err) < 0) return -1;
    bench_compare_print(f, set.r[0], set.r + 1, set.n - 1);
    results_set_free(&set);
    return 0;
}
