/* ui_gpu: NVML through dlopen and the process's /proc numbers (see ui_gpu.h). NVML's few types
 * are declared here as the driver's nvml.h has them (a stable C ABI), so that the build needs
 * neither the header nor the library. */
#include "ui_gpu.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvml_ret_t; /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef void *nvml_dev_t;
typedef struct {
    unsigned int gpu, memory; /* % */
} nvml_util_t;
typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvml_mem_t;

enum { NVML_TEMPERATURE_GPU = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };

struct ui_gpu {
    pthread_mutex_t mu; /* sampling and set_devices */
    void *lib;
    bool up; /* nvmlInit succeeded */
    char why[128];
    nvml_ret_t (*init)(void);
    nvml_ret_t (*shutdown)(void);
    const char *(*error_string)(nvml_ret_t);
    nvml_ret_t (*count)(unsigned int *);
    nvml_ret_t (*handle)(unsigned int, nvml_dev_t *);
    nvml_ret_t (*name)(nvml_dev_t, char *, unsigned int);
    nvml_ret_t (*util)(nvml_dev_t, nvml_util_t *);
    nvml_ret_t (*mem)(nvml_dev_t, nvml_mem_t *);
    nvml_ret_t (*power)(nvml_dev_t, unsigned int *);     /* mW */
    nvml_ret_t (*power_cap)(nvml_dev_t, unsigned int *); /* mW */
    nvml_ret_t (*temp)(nvml_dev_t, int, unsigned int *);
    nvml_ret_t (*clock)(nvml_dev_t, int, unsigned int *);
    nvml_ret_t (*by_bus_id)(const char *, nvml_dev_t *); /* optional: the engine's devices */
    nvml_ret_t (*index)(nvml_dev_t, unsigned int *);     /* optional */
    /* the engine's devices, rank order */
    char bus_ids[UI_GPU_MAX][32];
    int n_devices;
    /* the previous CPU reading */
    double cpu_s, wall_s;
};

/* dlsym into *slot (void * to function pointer: POSIX allows it); false when missing. */
static bool sym(ui_gpu_t *g, void *slot, const char *name) {
    void *p = dlsym(g->lib, name);
    memcpy(slot, &p, sizeof p);
    if (!p) snprintf(g->why, sizeof g->why, "NVML has no %s", name);
    return p != NULL;
}

static void nvml_open(ui_gpu_t *g, const char *path) {
    if (!path || !*path) path = "libnvidia-ml.so.1";
    if (!(g->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        snprintf(g->why, sizeof g->why, "no NVML (%s not found: no NVIDIA driver)", path);
        return;
    }
    if (!sym(g, &g->init, "nvmlInit_v2") || !sym(g, &g->shutdown, "nvmlShutdown") ||
        !sym(g, &g->error_string, "nvmlErrorString") ||
        !sym(g, &g->count, "nvmlDeviceGetCount_v2") ||
        !sym(g, &g->handle, "nvmlDeviceGetHandleByIndex_v2") ||
        !sym(g, &g->name, "nvmlDeviceGetName") ||
        !sym(g, &g->util, "nvmlDeviceGetUtilizationRates") ||
        !sym(g, &g->mem, "nvmlDeviceGetMemoryInfo") ||
        !sym(g, &g->power, "nvmlDeviceGetPowerUsage") ||
        !sym(g, &g->power_cap, "nvmlDeviceGetEnforcedPowerLimit") ||
        !sym(g, &g->temp, "nvmlDeviceGetTemperature") ||
        !sym(g, &g->clock, "nvmlDeviceGetClockInfo"))
        return;
    /* optional: without them every GPU shows as the machine's */
    void *p = dlsym(g->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    memcpy(&g->by_bus_id, &p, sizeof p);
    p = dlsym(g->lib, "nvmlDeviceGetIndex");
    memcpy(&g->index, &p, sizeof p);
    nvml_ret_t rc = g->init();
    if (rc) {
        const char *msg = g->error_string(rc);
        snprintf(g->why, sizeof g->why, "NVML: %s", msg ? msg : "cannot initialise");
        return;
    }
    g->up = true;
}

static double proc_cpu_s(void);
static double mono_s(void);

ui_gpu_t *ui_gpu_create(const char *nvml_path) {
    ui_gpu_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    pthread_mutex_init(&g->mu, NULL);
    nvml_open(g, nvml_path);
    g->cpu_s = proc_cpu_s(); /* the first sample's CPU % is since now */
    g->wall_s = mono_s();
    return g;
}

void ui_gpu_destroy(ui_gpu_t *g) {
    if (!g) return;
    if (g->up) g->shutdown();
    if (g->lib) dlclose(g->lib);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* The process's user + system CPU seconds (/proc/self/stat fields 14 and 15); NaN unreadable. */
static double proc_cpu_s(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return NAN;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ut, st;
    if (!p ||
        sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return NAN;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double proc_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return NAN;
    unsigned long long size, rss;
    int ok = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    return ok == 2 ? (double)rss * (double)sysconf(_SC_PAGESIZE) : NAN;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sample_dev(ui_gpu_t *g, nvml_dev_t h, ui_gpu_dev_t *d) {
    unsigned int v;
    nvml_util_t u;
    nvml_mem_t m;
    if (g->name(h, d->name, sizeof d->name)) snprintf(d->name, sizeof d->name, "GPU");
    d->util = g->util(h, &u) ? NAN : u.gpu;
    if (g->mem(h, &m)) {
        d->mem_used = d->mem_total = NAN;
    } else {
        d->mem_used = (double)m.used;
        d->mem_total = (double)m.total;
    }
    d->power_w = g->power(h, &v) ? NAN : v / 1e3;
    d->power_cap_w = g->power_cap(h, &v) ? NAN : v / 1e3;
    d->temp_c = g->temp(h, NVML_TEMPERATURE_GPU, &v) ? NAN : v;
    d->sm_mhz = g->clock(h, NVML_CLOCK_SM, &v) ? NAN : v;
    d->mem_mhz = g->clock(h, NVML_CLOCK_MEM, &v) ? NAN : v;
}

void ui_gpu_set_devices(ui_gpu_t *g, const char *const *pci_bus_ids, int n) {
    pthread_mutex_lock(&g->mu);
    g->n_devices = 0;
    for (int i = 0; i < n && i < UI_GPU_MAX; i++)
        snprintf(g->bus_ids[g->n_devices++], sizeof g->bus_ids[0], "%s", pci_bus_ids[i]);
    pthread_mutex_unlock(&g->mu);
}

/* The handles of the engine's devices (rank order, those NVML finds), then the machine's other
 * GPUs; returns how many fill rows (at most UI_GPU_MAX), *n_engine of them the engine's. */
static int order_devices(ui_gpu_t *g, unsigned int count, nvml_dev_t *h, unsigned int *idx,
                         int *rank, int *n_engine) {
    int n = 0;
    *n_engine = 0;
    for (int r = 0; r < g->n_devices && g->by_bus_id && g->index && n < UI_GPU_MAX; r++) {
        nvml_dev_t d;
        unsigned int i;
        if (g->by_bus_id(g->bus_ids[r], &d) || g->index(d, &i)) continue;
        h[n] = d, idx[n] = i, rank[n++] = r;
    }
    *n_engine = n;
    for (unsigned int i = 0; i < count && n < UI_GPU_MAX; i++) {
        bool mine = false;
        for (int k = 0; k < *n_engine; k++)
            mine |= idx[k] == i;
        if (mine || g->handle(i, &h[n])) continue;
        idx[n] = i, rank[n++] = -1;
    }
    return n;
}

void ui_gpu_sample(ui_gpu_t *g, ui_gpu_sample_t *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&g->mu);
    snprintf(out->why, sizeof out->why, "%s", g->why);
    unsigned int count = 0;
    if (g->up) {
        nvml_ret_t rc = g->count(&count);
        if (rc) {
            snprintf(out->why, sizeof out->why, "NVML: %s", g->error_string(rc));
            count = 0;
        } else if (count == 0) {
            snprintf(out->why, sizeof out->why, "NVML sees no GPU");
        }
    }
    out->n_total = (int)count;
    if (count) {
        nvml_dev_t h[UI_GPU_MAX];
        unsigned int idx[UI_GPU_MAX];
        int rank[UI_GPU_MAX];
        out->n = order_devices(g, count, h, idx, rank, &out->n_engine);
        for (int i = 0; i < out->n; i++) {
            sample_dev(g, h[i], &out->dev[i]);
            out->dev[i].index = (int)idx[i];
            out->dev[i].rank = rank[i];
        }
    }
    double cpu = proc_cpu_s(), wall = mono_s();
    out->cpu_pct = NAN;
    if (!isnan(cpu) && !isnan(g->cpu_s) && wall > g->wall_s)
        out->cpu_pct = 100.0 * (cpu - g->cpu_s) / (wall - g->wall_s);
    g->cpu_s = cpu;
    g->wall_s = wall;
    pthread_mutex_unlock(&g->mu);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    out->n_cpus = ncpu > 0 ? (int)ncpu : 1;
    out->rss = proc_rss();
    out->mem_total = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

// ---------------------------------------------------------------------------------------------
// The sampler thread

struct ui_gpu_sampler {
    ui_gpu_t *g;
    double period_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the thread to stop */
    bool stop;
    unsigned seq; /* samples taken */
    ui_gpu_sample_t latest, scratch;
};

static void *sampler_main(void *arg) {
    ui_gpu_sampler_t *sp = arg;
    pthread_setname_np(pthread_self(), "tachyon-nvml");
    pthread_mutex_lock(&sp->mu);
    while (!sp->stop) {
        pthread_mutex_unlock(&sp->mu);
        ui_gpu_sample(sp->g, &sp->scratch); /* the slow part, unlocked */
        pthread_mutex_lock(&sp->mu);
        sp->latest = sp->scratch;
        sp->seq++;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double end = (double)ts.tv_sec + ts.tv_nsec / 1e9 + sp->period_s;
        ts.tv_sec = (time_t)end;
        ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
        while (!sp->stop && pthread_cond_timedwait(&sp->cv, &sp->mu, &ts) == 0) {
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return NULL;
}

ui_gpu_sampler_t *ui_gpu_sampler_start(ui_gpu_t *g, double period_s, err_t *err) {
    ui_gpu_sampler_t *sp = calloc(1, sizeof *sp);
    if (!sp) {
        err_set(err, "out of memory");
        return NULL;
    }
    sp->g = g;
    sp->period_s = period_s;
    pthread_mutex_init(&sp->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sp->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&sp->thread, NULL, sampler_main, sp) != 0) {
        pthread_cond_destroy(&sp->cv);
        pthread_mutex_destroy(&sp->mu);
        free(sp);
        err_set(err, "cannot start the GPU sampler thread");
        return NULL;
    }
    return sp;
}

bool ui_gpu_sampler_latest(ui_gpu_sampler_t *sp, ui_gpu_sample_t *out, unsigned *seq) {
    pthread_mutex_lock(&sp->mu);
    bool newer = sp->seq != *seq && sp->seq > 0;
    if (newer) {
        *out = sp->latest;
        *seq = sp->seq;
    }
    pthread_mutex_unlock(&sp->mu);
    return newer;
}

void ui_gpu_sampler_stop(ui_gpu_sampler_t *sp) {
    if (!sp) return;
    pthread_mutex_lock(&sp->mu);
    sp->stop = true;
    pthread_cond_signal(&sp->cv);
    pthread_mutex_unlock(&sp->mu);
    pthread_join(sp->thread, NULL);
    pthread_cond_destroy(&sp->cv);
    pthread_mutex_destroy(&sp->mu);
    free(sp);
}

/* The rows the means cover: the engine's, or every one when it named none. */
static int mean_rows(const ui_gpu_sample_t *s) {
    return s->n_engine > 0 ? s->n_engine : s->n;
}

double ui_gpu_mean_util(const ui_gpu_sample_t *s) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < mean_rows(s); i++)
        if (!isnan(s->dev[i].util)) sum += s->dev[i].util, n++;
    return n ? sum / n : NAN;
}

double ui_gpu_mean_mem_pct(const ui_gpu_sample_t *s) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < mean_rows(s); i++)
        if (s->dev[i].mem_total > 0) sum += 100.0 * s->dev[i].mem_used / s->dev[i].mem_total, n++;
    return n ? sum / n : NAN;
}
