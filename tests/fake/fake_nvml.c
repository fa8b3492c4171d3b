/* A fake NVML for the console's tests: the few entry points ui_gpu.c loads, with made-up GPUs.
 * FAKE_NVML_GPUS (default 2) sets how many; FAKE_NVML_FAIL=1 makes nvmlInit_v2 fail as on a
 * machine whose driver is not loaded. GPU i reads: util (40 + 10 i + 5 k) % 100 at the k-th
 * utilisation query, 30 + i GiB used of 80 GiB, 350 + i W of 700 W, 61 + i C, SM 1980 MHz,
 * memory 2619 MHz, name "Fake H100 <i>", PCI bus id 00000000:<10 + i, hex>:00.0 (found by
 * nvmlDeviceGetHandleByPciBusId_v2 in that form or with a 4-digit domain, as CUDA writes it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned int gpu, memory;
} fake_util_t;
typedef struct {
    unsigned long long total, free, used;
} fake_mem_t;

static unsigned int queries;

int nvmlInit_v2(void) {
    const char *f = getenv("FAKE_NVML_FAIL");
    return f && *f == '1' ? 9 /* NVML_ERROR_DRIVER_NOT_LOADED */ : 0;
}

int nvmlShutdown(void) {
    return 0;
}

const char *nvmlErrorString(int rc) {
    return rc == 9 ? "Driver Not Loaded" : rc ? "Unknown Error" : "Success";
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
    const char *s = getenv("FAKE_NVML_GPUS");
    *n = s ? (unsigned int)atoi(s) : 2;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {
    *h = (void *)(size_t)(i + 1);
    return 0;
}

static unsigned int idx(void *h) {
    return (unsigned int)((size_t)h - 1);
}

int nvmlDeviceGetName(void *h, char *buf, unsigned int size) {
    snprintf(buf, size, "Fake H100 %u", idx(h));
    return 0;
}

int nvmlDeviceGetUtilizationRates(void *h, fake_util_t *u) {
    u->gpu = (40 + 10 * idx(h) + 5 * queries++) % 100;
    u->memory = 20;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *h, fake_mem_t *m) {
    m->total = 80ULL << 30;
    m->used = (30ULL + idx(h)) << 30;
    m->free = m->total - m->used;
    return 0;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    *mw = (350 + idx(h)) * 1000;
    return 0;
}

int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned int *mw) {
    (void)h;
    *mw = 700000;
    return 0;
}

int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *c) {
    (void)sensor;
    *c = 61 + idx(h);
    return 0;
}

int nvmlDeviceGetClockInfo(void *h, int type, unsigned int *mhz) {
    (void)h;
    *mhz = type == 2 ? 2619 : 1980;
    return 0;
}

int nvmlDeviceGetIndex(void *h, unsigned int *i) {
    *i = idx(h);
    return 0;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, void **h) {
    unsigned int domain, bus, dev, fn, n;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return 2; /* invalid arg */
    nvmlDeviceGetCount_v2(&n);
    if (domain != 0 || bus < 0x10 || bus >= 0x10 + n || dev || fn) return 6; /* not found */
    return nvmlDeviceGetHandleByIndex_v2(bus - 0x10, h);
}
