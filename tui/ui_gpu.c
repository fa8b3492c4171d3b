/* ui_gpu: NVML through dlopen and the process's /proc numbers (see ui_gpu.h). NVML's few types
 * are declared here as the driver's nvml.h has them (a stable C ABI), so that the build needs
 * neither the header nor the library. */
#include "ui_gpu.h"

#include <dlfcn.h>
#include <math.h>
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
    nvml_open(g, nvml_path);
    g->cpu_s = proc_cpu_s(); /* the first sample's CPU % is since now */
    g->wall_s = mono_s();
    return g;
}

void ui_gpu_destroy(ui_gpu_t *g) {
    if (!g) return;
    if (g->up) g->shutdown();
    if (g->lib) dlclose(g->lib);
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

void ui_gpu_sample(ui_gpu_t *g, ui_gpu_sample_t *out) {
    memset(out, 0, sizeof *out);
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
    for (unsigned int i = 0; i < count && out->n < UI_GPU_MAX; i++) {
        nvml_dev_t h;
        if (g->handle(i, &h)) continue;
        sample_dev(g, h, &out->dev[out->n++]);
    }
    double cpu = proc_cpu_s(), wall = mono_s();
    out->cpu_pct = NAN;
    if (!isnan(cpu) && !isnan(g->cpu_s) && wall > g->wall_s)
        out->cpu_pct = 100.0 * (cpu - g->cpu_s) / (wall - g->wall_s);
    g->cpu_s = cpu;
    g->wall_s = wall;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    out->n_cpus = ncpu > 0 ? (int)ncpu : 1;
    out->rss = proc_rss();
    out->mem_total = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
}

double ui_gpu_mean_util(const ui_gpu_sample_t *s) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (!isnan(s->dev[i].util)) sum += s->dev[i].util, n++;
    return n ? sum / n : NAN;
}

double ui_gpu_mean_mem_pct(const ui_gpu_sample_t *s) {
    double sum = 0;
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (s->dev[i].mem_total > 0) sum += 100.0 * s->dev[i].mem_used / s->dev[i].mem_total, n++;
    return n ? sum / n : NAN;
}
