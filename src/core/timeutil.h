/* Monotonic and wall-clock time in convenient units. */
#ifndef IFL_CORE_TIMEUTIL_H
#define IFL_CORE_TIMEUTIL_H

#include <stdint.h>
#include <time.h>

static inline double ifl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int64_t ifl_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
