/*
 * grow: the one growable-array helper of the engine's per-step structures. Arrays grow
 * geometrically and are kept, so that a steady workload allocates nothing per step.
 *
 *     int32_t *ids = NULL; int cap = 0;
 *     if (GROW(ids, cap, n) < 0) ...   // ids now holds at least n elements
 */
#ifndef TACHYON_GROW_H
#define TACHYON_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Grows *arr (elements of `size` bytes) to hold at least `need`, doubling from 16; keeps the
 * contents. -1 (nothing changed) when out of memory. */
static inline int grow_array(void **arr, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t n = *cap > 0 ? *cap : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * size);
    if (!p) return -1;
    *arr = p;
    *cap = n;
    return 0;
}

/* grow_array for an int capacity. */
static inline int grow_array_int(void **arr, int *cap, int need, size_t size) {
    size_t c = (size_t)*cap;
    if (need < 0 || grow_array(arr, &c, (size_t)need, size) < 0) return -1;
    *cap = (int)c;
    return 0;
}

#define GROW(arr, cap, need) grow_array_int((void **)&(arr), &(cap), (need), sizeof *(arr))

#endif
