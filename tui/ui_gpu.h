/*
 * ui_gpu: what the console shows of the machine. Per GPU, NVML's numbers (utilisation, memory
 * used/total, power/cap, temperature, SM and memory clocks), NVML being loaded with dlopen
 * (libnvidia-ml.so.1 from the driver; the build never links it, so a machine without a driver
 * runs the console with a "no GPU" panel and the reason); and always the process's own CPU %
 * and resident memory from /proc (what the CPU backend shows instead of a GPU).
 *
 *     ui_gpu_t *g = ui_gpu_create(getenv("TACHYON_NVML_LIB"));   // NULL: the driver's library
 *     ui_gpu_sample_t s;
 *     ui_gpu_sample(g, &s);            // the UI thread, about once a second (never the engine's)
 *     if (s.n == 0) show s.why;        // no GPU: the process's numbers only
 *     ui_gpu_destroy(g);
 *
 * The tests load a fake NVML (tests/fake/fake_nvml.c) through the path argument.
 */
#ifndef TACHYON_UI_GPU_H
#define TACHYON_UI_GPU_H

#include <stdbool.h>

#define UI_GPU_MAX 16 /* GPUs shown */

typedef struct ui_gpu_dev {
    char name[64];
    double util;                 /* %, time a kernel ran over the last sample period; NaN unknown */
    double mem_used, mem_total;  /* bytes; NaN unknown */
    double power_w, power_cap_w; /* W; NaN unknown */
    double temp_c;               /* degrees C; NaN unknown */
    double sm_mhz, mem_mhz;      /* clocks, MHz; NaN unknown */
} ui_gpu_dev_t;

typedef struct ui_gpu_sample {
    int n;       /* GPUs (0: none; why says why) */
    int n_total; /* GPUs NVML counts (n is at most UI_GPU_MAX of them) */
    ui_gpu_dev_t dev[UI_GPU_MAX];
    char why[128];         /* n == 0: "NVML not found", "NVML: Driver Not Loaded", ... */
    double cpu_pct;        /* the process's CPU time since the previous sample (or since
                              ui_gpu_create), % of one core (top's way); NaN unreadable */
    int n_cpus;            /* cores online */
    double rss, mem_total; /* bytes: the process's resident set, the machine's memory */
} ui_gpu_sample_t;

typedef struct ui_gpu ui_gpu_t;

/* Loads NVML from nvml_path (NULL or "": libnvidia-ml.so.1) and initialises it; without it the
 * monitor still samples the process. NULL only when out of memory. */
ui_gpu_t *ui_gpu_create(const char *nvml_path);
void ui_gpu_destroy(ui_gpu_t *g); /* NULL is a no-op; shuts NVML down and unloads it */

/* Reads every number now. A GPU whose query fails keeps NaN in that field. */
void ui_gpu_sample(ui_gpu_t *g, ui_gpu_sample_t *out);

/* The mean utilisation and memory use (% of total) over the GPUs of a sample; NaN without GPUs. */
double ui_gpu_mean_util(const ui_gpu_sample_t *s);
double ui_gpu_mean_mem_pct(const ui_gpu_sample_t *s);

#endif
