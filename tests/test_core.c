/* Core utilities: status names, F16/BF16 conversions, RNG, thread pool. */
#include <stdatomic.h>

#include "core/err.h"
#include "core/fp16.h"
#include "core/pool.h"
#include "core/rng.h"
#include "t.h"

static void test_strerror(void)
{
    CHECK_STR(ifl_strerror(IFL_OK), "success");
    CHECK_STR(ifl_strerror(IFL_EFORMAT), "malformed input");
    CHECK_STR(ifl_strerror(-999), "unknown status");
    char err[IFL_ERR_LEN];
    CHECK_EQ(ifl_err(err, IFL_EINVAL, "x=%d", 5), IFL_EINVAL);
    CHECK_STR(err, "x=5");
    CHECK_EQ(ifl_err(NULL, IFL_EIO, "ignored"), IFL_EIO);
}

static void test_f16_roundtrip(void)
{
    /* every half value survives f16 -> f32 -> f16 (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ifl_f16_to_f32((uint16_t)h);
        uint16_t back = ifl_f32_to_f16(f);
        if (isnan(f))
            CHECK(isnan(ifl_f16_to_f32(back)));
        else
            CHECK_MSG(back == h, "half %04x -> %g -> %04x", h, f, back);
    }
    CHECK_EQ(ifl_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ(ifl_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(ifl_f32_to_f16(65520.0f), 0x7c00);      /* rounds up to inf */
    CHECK_EQ(ifl_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
    CHECK_EQ(ifl_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
    CHECK_EQ(ifl_f32_to_f16(5.96046448e-08f), 0x0001); /* smallest subnormal */
    CHECK_EQ(ifl_f32_to_f16(2.98023224e-08f), 0x0000); /* half of it: tie to even (0) */
}

static void test_bf16(void)
{
    CHECK_EQ(ifl_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ(ifl_bf16_to_f32(0x3f80), 1.0f);
    /* 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins */
    CHECK_EQ(ifl_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    CHECK_EQ(ifl_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    CHECK(isnan(ifl_bf16_to_f32(ifl_f32_to_bf16(NAN))));
}

static void test_rng(void)
{
    struct ifl_rng a, b;
    ifl_rng_seed(&a, 42);
    ifl_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        CHECK(ifl_rng_next(&a) == ifl_rng_next(&b));
    double sum = 0, sq = 0;
    for (int i = 0; i < 20000; i++) {
        float u = ifl_rng_uniform(&a);
        CHECK(u >= 0.0f && u < 1.0f);
        float n = ifl_rng_normal(&b);
        sum += n;
        sq += (double)n * n;
    }
    CHECK_NEAR(sum / 20000, 0.0, 0.05);
    CHECK_NEAR(sq / 20000, 1.0, 0.05);
}

struct pool_job {
    struct ifl_pool *pool;
    atomic_int phase1;
    int seen_all[64];
    long sums[64];
};

static void pool_fn(void *arg, int ith, int nth)
{
    struct pool_job *j = arg;
    atomic_fetch_add(&j->phase1, 1);
    ifl_pool_barrier(j->pool);
    j->seen_all[ith] = atomic_load(&j->phase1) == nth;
    ifl_pool_barrier(j->pool);
    long lo, hi, s = 0;
    ifl_pool_split(1000, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++)
        s += i;
    j->sums[ith] = s;
}

static void test_pool(void)
{
    for (int nth = 1; nth <= 4; nth++) {
        struct ifl_pool *pool;
        CHECK_EQ(ifl_pool_create(&pool, nth), 0);
        CHECK_EQ(ifl_pool_size(pool), nth);
        for (int rep = 0; rep < 200; rep++) {
            struct pool_job j = {.pool = pool};
            ifl_pool_run(pool, pool_fn, &j);
            long total = 0;
            for (int i = 0; i < nth; i++) {
                CHECK(j.seen_all[i]);
                total += j.sums[i];
            }
            CHECK_EQ(total, 999 * 1000 / 2);
        }
        ifl_pool_free(pool);
    }
    ifl_pool_free(NULL);
    struct ifl_pool *p;
    CHECK_EQ(ifl_pool_create(&p, -1), IFL_EINVAL);
}

/* Barriers that fetch memory while they wait count like plain ones: the
 * threads mix the two kinds, one thread late each phase so the others
 * wait (and fetch), and every phase must see all of the previous one. */
struct fetch_job {
    struct ifl_pool *pool;
    const char *buf;
    size_t len;
    atomic_int count[8];
    int ok[64];
};

static void fetch_fn(void *arg, int ith, int nth)
{
    struct fetch_job *j = arg;
    j->ok[ith] = 1;
    for (int ph = 0; ph < 8; ph++) {
        if (ith == ph % nth) /* the late one */
            for (volatile int k = 0; k < 20000; k++)
                ;
        atomic_fetch_add(&j->count[ph], 1);
        if ((ith + ph) % 2)
            ifl_pool_barrier_fetch(j->pool, j->buf + (size_t)ph * 4096, j->len - (size_t)ph * 4096);
        else
            ifl_pool_barrier(j->pool);
        if (atomic_load(&j->count[ph]) != nth)
            j->ok[ith] = 0;
    }
    ifl_pool_barrier_fetch(j->pool, NULL, 0);
}

static void test_pool_fetch(void)
{
    size_t len = 1 << 20;
    char *buf = calloc(len, 1);
    CHECK(buf != NULL);
    for (int nth = 1; nth <= 4; nth++) {
        struct ifl_pool *pool;
        CHECK_EQ(ifl_pool_create(&pool, nth), 0);
        for (int rep = 0; rep < 50; rep++) {
            struct fetch_job j = {.pool = pool, .buf = buf, .len = len};
            ifl_pool_run(pool, fetch_fn, &j);
            for (int i = 0; i < nth; i++)
                CHECK(j.ok[i]);
        }
        ifl_pool_free(pool);
    }
    free(buf);
}

int main(void)
{
    T_RUN(test_strerror);
    T_RUN(test_f16_roundtrip);
    T_RUN(test_bf16);
    T_RUN(test_rng);
    T_RUN(test_pool);
    T_RUN(test_pool_fetch);
    return t_done();
}
