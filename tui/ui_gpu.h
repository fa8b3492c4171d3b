/*
 * ui_gpu: what the console shows of the machine. Per GPU, NVML's numbers (utilisation, memory
 * used/total, power/cap, temperature, SM and memory clocks), NVML being loaded with dlopen
 * (libnvidia-ml.so.1 from the driver; the build never links it, so a machine without a driver
 * runs the console with a "no GPU" panel and the reason); and always the process's own CPU %
 * and resident memory from /proc (what the CPU backend shows instead of a GPU).
 *
 *     ui_gpu_t *g = ui_gpu_create(getenv("TACHYON_NVML_LIB"));   // NULL: the driver's library
 *     ui_gpu_sampler_t *sp = ui_gpu_sampler_start(g, 1.0, &err); // a thread samples each second
 *     ui_gpu_set_devices(g, bus_ids, n);   // the engine's devices (engine_devices), rank order
 *     ui_gpu_sample_t s;
 *     unsigned seq = 0;
 *     if (ui_gpu_sampler_latest(sp, &s, &seq)) ...;   // the UI thread: a copy, never blocks
 *     if (s.n == 0) show s.why;        // no GPU: the process's numbers only
 *     ui_gpu_sampler_stop(sp);
 *     ui_gpu_destroy(g);
 *
 * Rows: the engine's devices first (rank 0, 1, ... : one row per TP rank), found by their PCI
 * bus ids, then the machine's other GPUs (rank -1); without devices (the CPU backend) every GPU
 * is the machine's. ui_gpu_sample may also be called directly (tests); a ui_gpu_t is locked, so
 * set_devices and sampling may come from different threads. The tests load a fake NVML
 * (tests/fake/fake_nvml.c) through the path argument.
 */
#ifndef TACHYON_UI_GPU_H
#define TACHYON_UI_GPU_H

#include <stdbool.h>

#include "err.h"

#define UI_GPU_MAX 16 /* GPUs shown */

typedef struct ui_gpu_dev {
    char name[64];
    int index;                   /* NVML's index of the GPU */
    int rank;                    /* the engine's rank on it (TP); -1: not one of the engine's */
    double util;                 /* %, time a kernel ran over the last sample period; NaN unknown */
    double mem_used, mem_total;  /* bytes; NaN unknown */
    double power_w, power_cap_w; /* W; NaN unknown */
    double temp_c;               /* degrees C; NaN unknown */
    double sm_mhz, mem_mhz;      /* clocks, MHz; NaN unknown */
} ui_gpu_dev_t;

typedef struct ui_gpu_sample {
    int n;        /* GPUs (0: none; why says why) */
    int n_total;  /* GPUs NVML counts (n is at most UI_GPU_MAX of them) */
    int n_engine; /* the first n_engine rows are the engine's devices, rank order (0: the engine
                     named none: every row is the machine's) */
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

/* The engine's devices by PCI bus id, rank order (n <= UI_GPU_MAX; copied); n 0: none. An id
 * NVML does not know is left out (the rows after keep their ranks). */
void ui_gpu_set_devices(ui_gpu_t *g, const char *const *pci_bus_ids, int n);

/* Reads every number now. A GPU whose query fails keeps NaN in that field. */
void ui_gpu_sample(ui_gpu_t *g, ui_gpu_sample_t *out);

/* A thread that samples g every period_s seconds (the first at once), so that NVML's calls
 * (milliseconds each on a busy driver) never run on the UI thread. Start it with the UI's
 * signals blocked. NULL with err set when the thread cannot start. */
typedef struct ui_gpu_sampler ui_gpu_sampler_t;
ui_gpu_sampler_t *ui_gpu_sampler_start(ui_gpu_t *g, double period_s, err_t *err);

/* The latest sample, copied into out when it is newer than *seq (then *seq is its number and the
 * result true); false, out untouched, when there is none newer. Takes the lock only for the
 * copy. */
bool ui_gpu_sampler_latest(ui_gpu_sampler_t *sp, ui_gpu_sample_t *out, unsigned *seq);

/* Stops and joins the thread; NULL is a no-op. Before ui_gpu_destroy. */
void ui_gpu_sampler_stop(ui_gpu_sampler_t *sp);

/* The mean utilisation and memory use (% of total) over the engine's GPUs of a sample (every GPU
 * when the engine named none); NaN without GPUs. */
double ui_gpu_mean_util(const ui_gpu_sample_t *s);
double ui_gpu_mean_mem_pct(const ui_gpu_sample_t *s);

#endif
