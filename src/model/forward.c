/*
 * The batched forward pass (see forward.h): a pre-norm decoder of the
 * llama family over a ragged batch, with K and V in a paged store.
 *
 * One call runs one pool job. All threads walk the same list of phases and
 * meet at barriers between them; inside a phase each thread takes a fixed
 * slice of rows for element-wise work, or its own contiguous share of the
 * output columns of a matmul (of the rows' attention runs; of a lone row's
 * KV heads), then chunks from the back of the others' shares (mm_chunks,
 * take_run), so that both cores finish together. Every output element is
 * computed by one thread with a fixed reduction order, so results do not
 * depend on the thread count or on the batch's other rows.
 *
 * Per layer:  xn = rmsnorm(x) * attn_norm
 *             q, k, v = xn Wq (+bq), xn Wk (+bk), xn Wv (+bv)
 *             [qwen3: rmsnorm each head of q and k];  rope(q), rope(k)
 *             store k, v at each row's (sequence, position)
 *             att = softmax(q K^T / sqrt(head_dim)) V over positions 0..pos
 *             x += att Wo
 *             xn = rmsnorm(x) * ffn_norm;  x += (silu(xn Wg) * (xn Wu)) Wd
 * Then, for rows that want logits: logits = rmsnorm(x) * out_norm Wout
 * (and, when the batch asks, that normed row is copied out as the hidden state).
 */
#include "model/forward.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/fp16.h"
#include "kernels/kernels.h"

/* What one thread's share of a matmul group has given out (see mm_chunks):
 * units taken from its front (low 32 bits) and from its back (high 32),
 * alone on its cache line. Zero before the step. */
struct mm_region {
    _Alignas(64) _Atomic uint64_t taken;
};

struct ifl_fwd {
    const struct ifl_model *m;
    struct ifl_kv_store *kv;
    const struct ifl_kernels *kn;
    struct ifl_pool *pool;
    int32_t max_rows;
    int32_t max_ctx;
    int32_t max_in;     /* widest matmul input */
    double *inv_freq;   /* [n_rot/2] angle per position of each rotated pair */

    /* scratch, sized at creation (R = max_rows) */
    float *x;           /* [R][n_embd] residual stream */
    float *xn;          /* [R][max_in] matmul input */
    void *act;          /* [R][act_row_bytes] matmul input converted for the kernels */
    size_t act_row_bytes;
    float *q;           /* [R][n_head * head_dim] */
    float *k;           /* [R][n_head_kv * head_dim] */
    float *v;           /* [R][n_head_kv * head_dim_v] */
    float *att;         /* [R][n_head * head_dim_v] */
    float *gate;        /* [R][n_ff] */
    float *up;          /* [R][n_ff] */
    float *tmp;         /* [R][n_embd] */
    float *rope_cs;     /* [R][n_rot/2][2] cos, sin */
    float *scores;      /* [n_threads][score_heads][score_ld] */
    size_t score_ld;    /* max_ctx rounded up to a cache line, plus one: rows of
                           neighbouring heads do not share L1 sets */
    int score_heads;    /* query heads one attention_blocks pass holds scores for */
    long score_floats;  /* and the scores it keeps, when more than one KV head fits */
    int run_rows;       /* rows of one sequence that share an attention_blocks pass */
    float *att_q;       /* [n_threads][score_heads][head_dim] such a pass's queries */
    float *att_o;       /* [n_threads][score_heads][head_dim_v] and its outputs */
    float *kvtmp;       /* [n_threads][kvtmp_len] a Q8_0 cache's head, dequantised */
    size_t kvtmp_len;
    int32_t *out_rows;  /* [R] rows whose logits are wanted */
    struct mm_region *mm_reg; /* [n_mm_groups][n_threads] each thread's share of a group */
    int n_mm_groups;
    int32_t *run_start; /* [R + 1] the step's attention runs (attn_run): run i is rows
                           [run_start[i], run_start[i + 1]) */
    int32_t n_runs;
    int32_t *run_share; /* [n_threads + 1] thread t's share: runs [run_share[t], run_share[t + 1]) */
    struct mm_region *att_claim; /* [n_layer][n_threads] runs taken from each share */
};

/* What one step's threads share. */
struct job {
    struct ifl_fwd *f;
    const struct ifl_batch *b;
    float *logits;
    int32_t n_out;      /* rows that want logits */
};

/* Per-thread memo of what `act` holds, so q, k and v convert xn once.
 * Every thread runs the same phases, so all copies agree. */
struct act_memo {
    const float *src;
    enum ifl_type type;
    int32_t nr;
};

/* attention_blocks: query heads per pass at most (a wider KV group goes
 * through attention()), and by default the scores one pass keeps (256 KiB,
 * within L2) when the context allows more than one KV head */
#define ATT_QHEADS 64
/* query vectors one attention kernel tile takes (x86_heads.h): a pass over
 * a sequence's consecutive rows (a prompt) takes that many, rows times the
 * KV group, so each cached key and value is converted once for all of them */
#define ATT_TILE_QUERIES 4
#define ATT_SCORE_FLOATS 65536L
/* the smallest array of one layer's keys or values put on huge pages */
#define KV_HUGE_MIN_ARRAY ((size_t)32 << 20)

static void *alloc_floats(size_t n)
{
    return aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
}

int ifl_kv_store_create(struct ifl_kv_store **out, const struct ifl_hparams *hp,
                        enum ifl_type type, int32_t n_blocks, int32_t block_size, char *err)
{
    *out = NULL;
    if (type != IFL_TYPE_F16 && type != IFL_TYPE_F32 && type != IFL_TYPE_Q8_0)
        return ifl_err(err, IFL_EUNSUPPORTED, "kv: cache type must be f16, f32 or q8_0");
    if (type == IFL_TYPE_Q8_0 && ((hp->n_head_kv * hp->head_dim) % 32 || (hp->n_head_kv * hp->head_dim_v) % 32))
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "kv: a q8_0 cache needs key and value widths that are multiples of 32 "
                       "(this model has %d and %d)",
                       hp->n_head_kv * hp->head_dim, hp->n_head_kv * hp->head_dim_v);
    if (n_blocks < 1 || block_size < 1 || block_size > 4096)
        return ifl_err(err, IFL_EINVAL, "kv: %d blocks of %d positions is not a valid cache",
                       n_blocks, block_size);
    struct ifl_kv_store *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return ifl_err(err, IFL_ENOMEM, "kv: out of memory");
    kv->type = type;
    kv->n_layer = hp->n_layer;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->k_dim = hp->n_head_kv * hp->head_dim;
    kv->v_dim = hp->n_head_kv * hp->head_dim_v;
    kv->k_row = ifl_type_row_size(type, kv->k_dim);
    kv->v_row = ifl_type_row_size(type, kv->v_dim);
    kv->k = calloc((size_t)hp->n_layer, sizeof(void *));
    kv->v = calloc((size_t)hp->n_layer, sizeof(void *));
    if (!kv->k || !kv->v)
        goto oom;
    /* One anonymous map, reserved and never touched here: a page costs
     * memory only once a block on it is written, so the process's resident
     * set follows the blocks in use, and ifl_kv_store_release gives pages
     * of blocks that stay free back. A page never written reads as zeros.
     *
     * A large store asks for huge pages: a step reads and writes positions
     * all over the store (every sequence's blocks, every layer), far more
     * pages than the TLB holds, and in a VM each miss walks two page
     * tables. In a 16-sequence small-110m F16 decode on the Zen 5, storing
     * one row's keys and values of a layer (3 KiB) took 3500-12000 cycles
     * with 4 KiB pages and 1100-1200 on huge pages, and attention 5-10 %
     * fewer. Memory then grows 2 MiB of each layer's keys or values at a
     * time, so only arrays of at least KV_HUGE_MIN_ARRAY take them (a step
     * of at most 1/16 of one). It is given back in 4 KiB pages all the
     * same: a huge page partly free is split rather than kept whole, else
     * one cached prefix block amid free ones would pin 2 MiB of every
     * array (48 MiB for small-110m). */
    const size_t huge = (size_t)2 << 20;
    size_t pos = (size_t)n_blocks * (size_t)block_size, kb, vb, total;
    if (__builtin_mul_overflow(pos, kv->k_row + kv->v_row, &total) ||
        __builtin_mul_overflow(total + 128, (size_t)hp->n_layer, &total) || total > SIZE_MAX / 2)
        goto oom;
    /* each array padded by 65 lines, so that one's block b does not fall
     * on the same cache sets as the other's (or the next layer's): on
     * huge pages the sets follow the layout */
    kb = ((pos * kv->k_row + 63) / 64) * 64 + 65 * 64;
    vb = ((pos * kv->v_row + 63) / 64) * 64 + 65 * 64;
    total = (size_t)hp->n_layer * (kb + vb);
    kv->arena_bytes = total + huge; /* room to start on a huge-page boundary */
    kv->arena = mmap(NULL, kv->arena_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (kv->arena == MAP_FAILED) {
        kv->arena = NULL;
        goto oom;
    }
    char *base = (char *)(((uintptr_t)kv->arena + huge - 1) & ~(uintptr_t)(huge - 1));
    long page = sysconf(_SC_PAGESIZE);
    kv->page = page > 0 ? (size_t)page : 4096;
    /* advisory: where the kernel gives none, 4 KiB pages still work */
    kv->huge = (kb < vb ? kb : vb) >= KV_HUGE_MIN_ARRAY && madvise(base, total, MADV_HUGEPAGE) == 0;
    kv->base = base;
    kv->bytes = total;
    kv->k_bytes = kb;
    kv->v_bytes = vb;
    for (int il = 0; il < hp->n_layer; il++) {
        kv->k[il] = base + (size_t)il * (kb + vb);
        kv->v[il] = base + (size_t)il * (kb + vb) + kb;
    }
    *out = kv;
    return 0;
oom:
    ifl_kv_store_free(kv);
    return ifl_err(err, IFL_ENOMEM, "kv: out of memory for %d blocks of %d positions", n_blocks,
                   block_size);
}

int ifl_kv_store_prefault(struct ifl_kv_store *kv, char *err)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
    if (madvise(kv->base, kv->bytes, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINVAL)
            return ifl_err(err, IFL_ENOMEM, "kv: cannot make the %.2f GiB pool resident (%s)",
                           (double)kv->bytes / (1 << 30), strerror(errno));
        memset(kv->base, 0, kv->bytes); /* a kernel before 5.14; the store holds no data yet */
    }
    kv->prefaulted = 1;
    return 0;
}

void ifl_kv_store_free(struct ifl_kv_store *kv)
{
    if (!kv)
        return;
    if (kv->arena)
        munmap(kv->arena, kv->arena_bytes);
    free(kv->k);
    free(kv->v);
    free(kv);
}

void ifl_kv_store_copy_block(struct ifl_kv_store *kv, int32_t dst, int32_t src, int32_t n)
{
    IFL_ASSERT(dst >= 0 && dst < kv->n_blocks && src >= 0 && src < kv->n_blocks);
    IFL_ASSERT(n >= 0 && n <= kv->block_size);
    size_t kbs = (size_t)kv->block_size * kv->k_row;
    size_t vbs = (size_t)kv->block_size * kv->v_row;
    for (int il = 0; il < kv->n_layer; il++) {
        char *k = kv->k[il], *v = kv->v[il];
        memcpy(k + (size_t)dst * kbs, k + (size_t)src * kbs, (size_t)n * kv->k_row);
        memcpy(v + (size_t)dst * vbs, v + (size_t)src * vbs, (size_t)n * kv->v_row);
    }
}

/* Gives back the pages of [lo, hi) of one array, rounded inwards so that
 * no page a neighbouring block uses is dropped. */
static size_t release_range(const struct ifl_kv_store *kv, char *lo, char *hi)
{
    uintptr_t a = ((uintptr_t)lo + kv->page - 1) & ~(uintptr_t)(kv->page - 1);
    uintptr_t b = (uintptr_t)hi & ~(uintptr_t)(kv->page - 1);
    if (b <= a)
        return 0;
    return madvise((void *)a, b - a, MADV_DONTNEED) == 0 ? b - a : 0;
}

size_t ifl_kv_store_release(struct ifl_kv_store *kv, int32_t first, int32_t n)
{
    IFL_ASSERT(first >= 0 && n >= 0 && first + n <= kv->n_blocks);
    size_t kbs = (size_t)kv->block_size * kv->k_row;
    size_t vbs = (size_t)kv->block_size * kv->v_row;
    size_t done = 0;
    for (int il = 0; il < kv->n_layer; il++) {
        char *k = kv->k[il], *v = kv->v[il];
        done += release_range(kv, k + (size_t)first * kbs, k + (size_t)(first + n) * kbs);
        done += release_range(kv, v + (size_t)first * vbs, v + (size_t)(first + n) * vbs);
    }
    return done;
}

/* Resident bytes of the pages of [lo, lo + len) at or above *done (the
 * arrays share a page where one ends and the next begins: it is counted
 * once); moves *done past them. */
static int64_t resident_range(const struct ifl_kv_store *kv, const char *lo, size_t len,
                              uintptr_t *done)
{
    unsigned char vec[4096];
    uintptr_t a = (uintptr_t)lo & ~(uintptr_t)(kv->page - 1);
    uintptr_t end = (uintptr_t)lo + len;
    int64_t n = 0;
    if (a < *done)
        a = *done;
    while (a < end) {
        size_t pages = (end - a + kv->page - 1) / kv->page;
        if (pages > sizeof(vec))
            pages = sizeof(vec);
        if (mincore((void *)a, pages * kv->page, vec))
            return -1;
        for (size_t i = 0; i < pages; i++)
            n += vec[i] & 1;
        a += pages * kv->page;
    }
    if (a > *done)
        *done = a;
    return n * (int64_t)kv->page;
}

/* The bytes of one array up to the end of the huge page holding byte
 * `used` (or to the array's end). */
static size_t array_span(const char *arr, size_t arr_bytes, size_t used)
{
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t end = ((uintptr_t)arr + used + huge - 1) & ~(huge - 1);
    size_t span = end - (uintptr_t)arr;
    return span < arr_bytes ? span : arr_bytes;
}

int64_t ifl_kv_store_resident(const struct ifl_kv_store *kv, int32_t n_blocks)
{
    if (kv->prefaulted)
        n_blocks = kv->n_blocks;
    if (n_blocks <= 0)
        return 0;
    if (n_blocks > kv->n_blocks)
        n_blocks = kv->n_blocks;
    size_t ku = (size_t)n_blocks * (size_t)kv->block_size * kv->k_row;
    size_t vu = (size_t)n_blocks * (size_t)kv->block_size * kv->v_row;
    int64_t n = 0;
    uintptr_t done = 0; /* the arrays lie in address order: k0 v0 k1 v1 ... */
    for (int il = 0; il < kv->n_layer; il++) {
        const char *k = kv->k[il], *v = kv->v[il];
        int64_t rk = resident_range(kv, k, array_span(k, kv->k_bytes, ku), &done);
        int64_t rv = resident_range(kv, v, array_span(v, kv->v_bytes, vu), &done);
        if (rk < 0 || rv < 0)
            return -1;
        n += rk + rv;
    }
    return n;
}

void ifl_fwd_free(struct ifl_fwd *f)
{
    if (!f)
        return;
    ifl_pool_free(f->pool);
    free(f->inv_freq);
    free(f->x);
    free(f->xn);
    free(f->act);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->gate);
    free(f->up);
    free(f->tmp);
    free(f->rope_cs);
    free(f->scores);
    free(f->att_q);
    free(f->att_o);
    free(f->kvtmp);
    free(f->out_rows);
    free(f->mm_reg);
    free(f->run_start);
    free(f->run_share);
    free(f->att_claim);
    free(f);
}

int ifl_fwd_n_threads(const struct ifl_fwd *f) { return ifl_pool_size(f->pool); }

void ifl_fwd_parallel(struct ifl_fwd *f, void (*fn)(void *arg, int ith, int nth), void *arg)
{
    ifl_pool_run(f->pool, fn, arg);
}

static int32_t max3(int32_t a, int32_t b, int32_t c)
{
    int32_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* The chunk step of matrix w: a multiple of 16 (an x16 group) that keeps
 * its kernel's widest tile whole. */
static int mat_step(const struct ifl_fwd *f, const struct ifl_mat *w)
{
    return w->x16 && f->kn->x16_cols[w->type] > 16 ? f->kn->x16_cols[w->type] : 16;
}

int ifl_fwd_create(struct ifl_fwd **out, const struct ifl_model *m, struct ifl_kv_store *kv,
                   const struct ifl_fwd_config *cfg, char *err)
{
    *out = NULL;
    const struct ifl_hparams *hp = &m->hp;
    if (cfg->max_rows < 1 || cfg->max_rows > (1 << 20) || cfg->max_ctx < 1 ||
        cfg->max_ctx > (1 << 24))
        return ifl_err(err, IFL_EINVAL, "forward: max_rows %d / max_ctx %d out of range",
                       cfg->max_rows, cfg->max_ctx);
    if (kv->n_layer != hp->n_layer || kv->k_dim != hp->n_head_kv * hp->head_dim ||
        kv->v_dim != hp->n_head_kv * hp->head_dim_v)
        return ifl_err(err, IFL_EINVAL, "forward: the KV store does not fit this model");
    struct ifl_fwd *f = calloc(1, sizeof(*f));
    if (!f)
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory");
    f->m = m;
    f->kv = kv;
    f->kn = ifl_kernels_best();
    f->max_rows = cfg->max_rows;
    f->max_ctx = cfg->max_ctx;
    f->score_floats = cfg->attn_score_floats > 0 ? cfg->attn_score_floats : ATT_SCORE_FLOATS;
    int rc = ifl_pool_create(&f->pool, cfg->n_threads);
    if (rc) {
        free(f);
        return ifl_err(err, rc, "forward: cannot start %d threads", cfg->n_threads);
    }
    size_t R = (size_t)cfg->max_rows;
    int32_t q_dim = hp->n_head * hp->head_dim;
    int32_t k_dim = hp->n_head_kv * hp->head_dim;
    int32_t v_dim = hp->n_head_kv * hp->head_dim_v;
    int32_t o_dim = hp->n_head * hp->head_dim_v;
    f->max_in = max3(hp->n_embd, hp->n_ff, o_dim);
    /* the largest act format is Q8_K: 292 bytes per 256 values; 2 bytes each is ample */
    f->act_row_bytes = ((size_t)f->max_in * 2 + 63) / 64 * 64;
    int nth = ifl_pool_size(f->pool);
    int half = hp->n_rot / 2;
    f->inv_freq = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
    f->x = alloc_floats(R * (size_t)hp->n_embd);
    f->xn = alloc_floats(R * (size_t)f->max_in);
    f->act = aligned_alloc(64, R * f->act_row_bytes);
    f->q = alloc_floats(R * (size_t)q_dim);
    f->k = alloc_floats(R * (size_t)k_dim);
    f->v = alloc_floats(R * (size_t)v_dim);
    f->att = alloc_floats(R * (size_t)o_dim);
    f->gate = alloc_floats(R * (size_t)hp->n_ff);
    f->up = alloc_floats(R * (size_t)hp->n_ff);
    f->tmp = alloc_floats(R * (size_t)hp->n_embd);
    f->rope_cs = alloc_floats(R * (size_t)(half > 0 ? half : 1) * 2);
    /* attention_blocks holds whole KV groups, at most ATT_QHEADS query heads
     * (a group wider than that goes through attention(), one row a thread) */
    const int group = hp->n_head / hp->n_head_kv;
    f->score_heads = group > ATT_QHEADS ? 1 : hp->n_head <= ATT_QHEADS ? hp->n_head : ATT_QHEADS / group * group;
    f->score_ld = ((size_t)cfg->max_ctx + 15) / 16 * 16 + 16;
    f->scores = alloc_floats((size_t)nth * (size_t)f->score_heads * f->score_ld);
    f->run_rows = (ATT_TILE_QUERIES < f->score_heads ? ATT_TILE_QUERIES : f->score_heads) / group;
    if (f->run_rows < 1)
        f->run_rows = 1;
    f->att_q = alloc_floats((size_t)nth * (size_t)f->score_heads * (size_t)hp->head_dim);
    f->att_o = alloc_floats((size_t)nth * (size_t)f->score_heads * (size_t)hp->head_dim_v);
    /* a head spans at most its width plus one partial block on each side */
    f->kvtmp_len = (size_t)(hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v) + 64;
    f->kvtmp = alloc_floats((size_t)nth * f->kvtmp_len);
    f->out_rows = malloc(R * sizeof(int32_t));
    /* per layer at most 3 (q, k, v) + 1 (o) + 2 (gate, up) + 1 (down), when
     * no two share an input format; then the output */
    f->n_mm_groups = 7 * hp->n_layer + 1;
    f->mm_reg = aligned_alloc(64, sizeof(struct mm_region) * (size_t)f->n_mm_groups * (size_t)nth);
    f->run_start = malloc((R + 1) * sizeof(int32_t));
    f->run_share = malloc(((size_t)nth + 1) * sizeof(int32_t));
    f->att_claim = aligned_alloc(64, sizeof(struct mm_region) * (size_t)hp->n_layer * (size_t)nth);
    if (!f->inv_freq || !f->x || !f->xn || !f->act || !f->q || !f->k || !f->v || !f->att ||
        !f->gate || !f->up || !f->tmp || !f->rope_cs || !f->scores || !f->att_q || !f->att_o ||
        !f->kvtmp || !f->out_rows || !f->mm_reg || !f->run_start || !f->run_share ||
        !f->att_claim) {
        ifl_fwd_free(f);
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory for %d rows", cfg->max_rows);
    }
    for (int i = 0; i < half; i++) {
        double fr = pow((double)hp->rope_base, -2.0 * i / hp->n_rot) * hp->rope_pos_scale;
        if (m->rope_freqs)
            fr /= m->rope_freqs[i];
        f->inv_freq[i] = fr;
    }
    *out = f;
    return 0;
}

/* ---- element-wise pieces (per row) ---- */

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    /* four running sums, so the adds overlap (the compiler pairs them) */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        s0 += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(((s0 + s1) + (s2 + s3)) / n + eps));
    /* eight at a time through a local, so the compiler may use vectors
     * even when out is x (the per-head q / k norms) */
    for (i = 0; i + 8 <= n; i += 8) {
        float t[8];
        for (int k = 0; k < 8; k++)
            t[k] = x[i + k] * scale * w[i + k];
        memcpy(out + i, t, sizeof t);
    }
    for (; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* x += t over n values: the residual stream takes a sub-layer's output. */
static void add_residual(float *x, const float *t, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float v[8];
        for (int k = 0; k < 8; k++)
            v[k] = x[i + k] + t[i + k];
        memcpy(x + i, v, sizeof v);
    }
    for (; i < n; i++)
        x[i] += t[i];
}

/* The largest of s[0 .. n), n >= 1. */
static float row_max(const float *s, int n)
{
    float m[4] = {s[0], s[0], s[0], s[0]};
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++)
            m[k] = s[i + k] > m[k] ? s[i + k] : m[k];
    for (; i < n; i++)
        m[0] = s[i] > m[0] ? s[i] : m[0];
    float a = m[0] > m[1] ? m[0] : m[1], b = m[2] > m[3] ? m[2] : m[3];
    return a > b ? a : b;
}

static void rope(float *v, const float *cs, int n_rot, int head_dim, int n_heads, int neox)
{
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *hv = v + (size_t)h * head_dim;
        int i = 0;
        /* four pairs at a time through locals, so the compiler may use
         * vectors; the arithmetic per value is the loop's below */
        for (; i + 4 <= half; i += 4) {
            float a[4], b[4], c[4], sn[4], x[4], y[4], t[8];
            if (neox) {
                memcpy(a, hv + i, sizeof a);
                memcpy(b, hv + i + half, sizeof b);
            } else {
                memcpy(t, hv + 2 * i, sizeof t);
                for (int k = 0; k < 4; k++) {
                    a[k] = t[2 * k];
                    b[k] = t[2 * k + 1];
                }
            }
            for (int k = 0; k < 4; k++) {
                c[k] = cs[2 * (i + k)];
                sn[k] = cs[2 * (i + k) + 1];
            }
            for (int k = 0; k < 4; k++) {
                x[k] = a[k] * c[k] - b[k] * sn[k];
                y[k] = a[k] * sn[k] + b[k] * c[k];
            }
            if (neox) {
                memcpy(hv + i, x, sizeof x);
                memcpy(hv + i + half, y, sizeof y);
            } else {
                for (int k = 0; k < 4; k++) {
                    t[2 * k] = x[k];
                    t[2 * k + 1] = y[k];
                }
                memcpy(hv + 2 * i, t, sizeof t);
            }
        }
        for (; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int i0 = neox ? i : 2 * i;
            int i1 = neox ? i + half : 2 * i + 1;
            float a = hv[i0], b = hv[i1];
            hv[i0] = a * c - b * s;
            hv[i1] = a * s + b * c;
        }
    }
}

/* ---- matmul: y[r][c] = x[r] . W[c] for r < nr ---- */

/* Converts x (nr rows of w->n_in floats) into the kernels' input format for
 * w, unless `act` already holds it. Ends at a barrier when it converted. */
static void mm_prepare(struct job *j, int ith, int nth, struct act_memo *memo,
                       const struct ifl_mat *w, const float *x, int32_t nr)
{
    struct ifl_fwd *f = j->f;
    enum ifl_type at = ifl_type_info(w->type)->act;
    if (at == IFL_TYPE_F32)
        return;
    if (memo->src == x && memo->type == at && memo->nr == nr)
        return;
    long lo, hi;
    ifl_pool_split(nr, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++)
        f->kn->quant[at](x + r * w->n_in, (char *)f->act + r * f->act_row_bytes, w->n_in);
    memo->src = x;
    memo->type = at;
    memo->nr = nr;
    ifl_pool_barrier(f->pool);
}

/* Converts rows [lo, hi) of x into the kernels' input format for w and
 * notes in memo that `act` will hold all nr rows once every thread has
 * done its share: the caller meets the others at a barrier before the
 * matmul (mm_prepare then finds the memo and converts nothing). Lets a
 * thread convert rows it has just written, with no barrier in between. */
static void quant_rows(struct job *j, struct act_memo *memo, const struct ifl_mat *w,
                       const float *x, int32_t nr, long lo, long hi)
{
    struct ifl_fwd *f = j->f;
    enum ifl_type at = ifl_type_info(w->type)->act;
    if (at == IFL_TYPE_F32)
        return;
    for (long r = lo; r < hi; r++)
        f->kn->quant[at](x + r * w->n_in, (char *)f->act + r * f->act_row_bytes, w->n_in);
    memo->src = x;
    memo->type = at;
    memo->nr = nr;
}

/* One matmul of a group: y = x W^T, y rows ldy apart. */
struct mm_task {
    const struct ifl_mat *w;
    float *y;
    size_t ldy;
};

/* Units of a group's output columns: task i's columns in steps of
 * mat_step, its last unit maybe short, the tasks' units one after another. */
struct mm_units {
    int64_t end[4]; /* task i's units end at end[i] (from the group's first) */
    int step[4];
};

static void mm_units_of(const struct ifl_fwd *f, const struct mm_task *t, int nt,
                        struct mm_units *u)
{
    for (int i = 0; i < nt; i++) {
        u->step[i] = mat_step(f, t[i].w);
        u->end[i] = (i ? u->end[i - 1] : 0) + (t[i].w->n_out + u->step[i] - 1) / u->step[i];
    }
}

/* The task that unit x (below the group's last end) belongs to. */
static int unit_task(const struct mm_units *u, int64_t x)
{
    int i = 0;
    while (u->end[i] <= x)
        i++;
    return i;
}

/* Columns [*c0, *c1) of w that units [x0, x1) of its task i cover. */
static void unit_cols(const struct mm_units *u, int i, const struct ifl_mat *w, int64_t x0,
                      int64_t x1, int64_t *c0, int64_t *c1)
{
    int64_t first = i ? u->end[i - 1] : 0;
    *c0 = (x0 - first) * u->step[i];
    *c1 = (x1 - first) * u->step[i];
    if (*c1 > w->n_out)
        *c1 = w->n_out;
}

/* Thread t's share of the n units: [*lo, *hi). */
static void unit_share(int64_t n, int t, int nth, int64_t *lo, int64_t *hi)
{
    *lo = n * t / nth;
    *hi = n * (t + 1) / nth;
}

/* Takes 1/div of the units left (at least one) from the front of share
 * [lo, hi) (thief 0) or its back (thief 1), within one task; returns how
 * many, 0 when none are left. */
static int64_t take_units(const struct mm_units *u, struct mm_region *r, int64_t lo, int64_t hi,
                          int thief, int div, int64_t *u0)
{
    uint64_t old = atomic_load_explicit(&r->taken, memory_order_relaxed);
    for (;;) {
        int64_t a = (int64_t)(old & 0xffffffffu), b = (int64_t)(old >> 32);
        int64_t left = hi - lo - a - b;
        if (left <= 0)
            return 0;
        int64_t n = left / div < 1 ? 1 : left / div, s = thief ? hi - b - n : lo + a;
        int i = unit_task(u, thief ? hi - b - 1 : s);
        int64_t t0 = i ? u->end[i - 1] : 0;
        if (thief && s < t0)
            s = t0, n = hi - b - t0; /* not into the task before */
        if (!thief && s + n > u->end[i])
            n = u->end[i] - s; /* not into the task after */
        uint64_t nw = thief ? old + ((uint64_t)n << 32) : old + (uint64_t)n;
        if (atomic_compare_exchange_weak_explicit(&r->taken, &old, nw, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *u0 = s;
            return n;
        }
    }
}

/* Runs the tasks (matmuls over the same converted input) over the threads.
 * Their output columns, in units of a step, are cut into one contiguous
 * share a thread; a thread walks its share from the front in chunks of
 * half of what is left of it (so each call reads on where the last one
 * stopped: the prefetchers keep one stream), and when its share is done,
 * takes chunks from the back of the others' shares, so the threads finish
 * within a short chunk of each other however late one started or slow it
 * ran. Against one counter handing out chunks of the columns left over
 * nth, largest first (the thread that took the first held half of the
 * matrix, and a tinyllama decode's threads waited up to 37 us for each
 * other at a matmul's end), builds alternating on the Zen 5: tinyllama
 * decode Q4_0 +4 %, Q4_K_M +1.6 %, Q8_0 +3 % (its runs swung 26-51
 * tok/s with the VM's bandwidth); prompts and 16-sequence decodes level.
 * Chunks of a quarter of the share left lost 8 % on a small-110m Q4_0
 * prompt (16-row calls of one or two units read their activations again
 * for little work); at one or two rows, chunks of at most 4, 8 or 16
 * units were level. Which thread computes an output changes nothing about
 * how it is computed, so results stay the same. No barrier at the end. */
static void mm_chunks(struct job *j, int g, int ith, int nth, const struct mm_task *t, int nt,
                      const float *x, int32_t nr)
{
    struct ifl_fwd *f = j->f;
    enum ifl_type at = ifl_type_info(t[0].w->type)->act;
    const void *xa = x;
    size_t xs = (size_t)t[0].w->n_in * sizeof(float);
    if (at != IFL_TYPE_F32) {
        xa = f->act;
        xs = f->act_row_bytes;
    }
    struct mm_units u;
    mm_units_of(f, t, nt, &u);
    const int64_t n = u.end[nt - 1];
    for (int v = 0; v < nth; v++) {
        const int victim = (ith + v) % nth, thief = v > 0;
        struct mm_region *r = &f->mm_reg[(size_t)g * (size_t)nth + (size_t)victim];
        int64_t lo, hi, u0, k, c0, c1;
        unit_share(n, victim, nth, &lo, &hi);
        while ((k = take_units(&u, r, lo, hi, thief, thief ? 2 * nth : 2, &u0)) > 0) {
            const int i = unit_task(&u, u0);
            const struct ifl_mat *w = t[i].w;
            unit_cols(&u, i, w, u0, u0 + k, &c0, &c1);
            ifl_gemm_fn gemm = w->x16 ? f->kn->gemm_x16[w->type] : f->kn->gemm[w->type];
            gemm(w->n_in, nr, (int)(c1 - c0), xa, xs,
                 (const char *)w->data + (size_t)c0 * w->row_bytes, w->row_bytes, t[i].y + c0,
                 t[i].ldy);
        }
    }
}

/* Weight bytes a thread asks for at most while it waits before a matmul
 * group: well within L2, about what one core streams in 10 us. */
#define FETCH_BYTES (256 * 1024)

/* The barrier before matmul group t (nt tasks): while this thread waits
 * there (for the threads still normalising or converting the input, or
 * doing a single row's attention), it asks for the start of its share of
 * the weights, which it reads first (mm_chunks): in a one-row decode the
 * other thread's serial phases took 5-17 us before each group, time in
 * which the memory bus idled. Builds alternating on the Zen 5: tinyllama
 * decode Q4_0 +5 %, Q4_K_M +3 %, Q8_0 level; small-110m decode F16 +3 %,
 * Q4_0 +2 %; prompts and 16-sequence decodes level. */
static void mm_barrier(struct job *j, int ith, int nth, const struct mm_task *t, int nt)
{
    struct ifl_fwd *f = j->f;
    struct mm_units u;
    mm_units_of(f, t, nt, &u);
    int64_t lo, hi, c0, c1;
    unit_share(u.end[nt - 1], ith, nth, &lo, &hi);
    if (lo == hi) {
        ifl_pool_barrier(f->pool);
        return;
    }
    const int i = unit_task(&u, lo);
    const struct ifl_mat *w = t[i].w;
    unit_cols(&u, i, w, lo, hi < u.end[i] ? hi : u.end[i], &c0, &c1);
    size_t bytes = c1 > c0 ? (size_t)(c1 - c0) * w->row_bytes : 0;
    ifl_pool_barrier_fetch(f->pool, (const char *)w->data + (size_t)c0 * w->row_bytes,
                           bytes < FETCH_BYTES ? bytes : FETCH_BYTES);
}

/* y_i = x W_i^T for up to four matmuls on the same input x: converts x
 * once per input format and shares the columns of all of them out between
 * the threads. Tasks whose weights want another input format wait at a
 * barrier until the previous ones are done with the converted input. No
 * barrier at the end. */
static void mm_group(struct job *j, int ith, int nth, struct act_memo *memo, int *grp,
                     const float *x, int32_t nr, const struct mm_task *t, int nt)
{
    for (int i = 0; i < nt;) {
        enum ifl_type at = ifl_type_info(t[i].w->type)->act;
        int k = i + 1;
        while (k < nt && ifl_type_info(t[k].w->type)->act == at)
            k++;
        if (i > 0)
            ifl_pool_barrier(j->f->pool);
        mm_prepare(j, ith, nth, memo, t[i].w, x, nr);
        mm_chunks(j, (*grp)++, ith, nth, t + i, k - i, x, nr);
        i = k;
    }
}

/* ---- attention ---- */

static const void *kv_at(const struct ifl_kv_store *kv, void *const *base, int il, int32_t block,
                         int32_t slot, size_t row_bytes)
{
    size_t idx = (size_t)block * (size_t)kv->block_size + (size_t)slot;
    return (const char *)base[il] + idx * row_bytes;
}

/* The `width` values of one head, starting at value `off` of a Q8_0 row:
 * dequantises the 32-value blocks that hold them into tmp and returns a
 * pointer to the head's first value. */
static const float *q8_head(const struct ifl_fwd *f, const void *row, int off, int width, float *tmp)
{
    int b0 = off / 32, b1 = (off + width - 1) / 32;
    f->kn->dequant[IFL_TYPE_Q8_0]((const char *)row + (size_t)b0 * 34, tmp, (int64_t)(b1 - b0 + 1) * 32);
    return tmp + (off - b0 * 32);
}

/* Stores KV heads [h0, h1) of rows [r0, r1) at their positions. */
static void store_kv(struct job *j, int il, long r0, long r1, int h0, int h1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    struct ifl_kv_store *kv = f->kv;
    const struct ifl_hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, hdv = hp->head_dim_v;
    const int nk = (h1 - h0) * hd, nv = (h1 - h0) * hdv;
    for (long r = r0; r < r1; r++) {
        int32_t p = b->pos[r];
        int32_t blk = b->block_tables[b->seq[r]][p / kv->block_size];
        int32_t slot = p % kv->block_size;
        char *kd = (char *)kv_at(kv, kv->k, il, blk, slot, kv->k_row);
        char *vd = (char *)kv_at(kv, kv->v, il, blk, slot, kv->v_row);
        const float *ks = f->k + r * kv->k_dim + h0 * hd, *vs = f->v + r * kv->v_dim + h0 * hdv;
        if (kv->type == IFL_TYPE_F16) {
            f->kn->cvt_f32_f16(nk, ks, (uint16_t *)(void *)(kd + (size_t)h0 * hd * 2));
            f->kn->cvt_f32_f16(nv, vs, (uint16_t *)(void *)(vd + (size_t)h0 * hdv * 2));
        } else if (kv->type == IFL_TYPE_Q8_0) {
            /* whole rows, or heads of whole blocks (head_dim % 32 == 0) */
            f->kn->quant[IFL_TYPE_Q8_0](ks, kd + (size_t)h0 * hd / 32 * 34, nk);
            f->kn->quant[IFL_TYPE_Q8_0](vs, vd + (size_t)h0 * hdv / 32 * 34, nv);
        } else {
            memcpy(kd + (size_t)h0 * hd * 4, ks, sizeof(float) * (size_t)nk);
            memcpy(vd + (size_t)h0 * hdv * 4, vs, sizeof(float) * (size_t)nv);
        }
    }
}

/* Row r's q, k and v of KV heads [h0, h1) (with their query heads) made
 * ready for attention: biases, the per-head norms, rotary positions. */
static void qkv_ready(struct job *j, const struct ifl_layer_weights *w, long r, int h0, int h1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, hdv = hp->head_dim_v, group = hp->n_head / hp->n_head_kv;
    const int q_dim = hp->n_head * hd, k_dim = hp->n_head_kv * hd, v_dim = hp->n_head_kv * hdv;
    const int qa = h0 * group * hd, qb = h1 * group * hd;
    float *q = f->q + r * q_dim, *k = f->k + r * k_dim, *v = f->v + r * v_dim;
    if (w->bq) {
        for (int i = qa; i < qb; i++)
            q[i] += w->bq[i];
        for (int i = h0 * hd; i < h1 * hd; i++)
            k[i] += w->bk[i];
        for (int i = h0 * hdv; i < h1 * hdv; i++)
            v[i] += w->bv[i];
    }
    if (w->q_norm) {
        for (int h = h0 * group; h < h1 * group; h++)
            rmsnorm(q + h * hd, q + h * hd, w->q_norm, hd, hp->rms_eps);
        for (int h = h0; h < h1; h++)
            rmsnorm(k + h * hd, k + h * hd, w->k_norm, hd, hp->rms_eps);
    }
    const float *cs = f->rope_cs + r * (hp->n_rot / 2) * 2;
    rope(q + qa, cs, hp->n_rot, hd, (h1 - h0) * group, hp->rope_neox);
    rope(k + h0 * hd, cs, hp->n_rot, hd, h1 - h0, hp->rope_neox);
}

/* Takes one run of layer il's attention from thread t's share: its first
 * untaken one (thief 0) or its last (thief 1); -1 when none is left. The
 * shares are contiguous, so each thread reads the cache of its own
 * sequences in order (a shared counter that dealt runs one by one from
 * the end, alternating between the threads, made the attention of a
 * 16-sequence F16 decode take some 15 % more time in all), and a thread
 * that finishes early takes from the back of a slower one's share (dealt
 * statically, one thread of that decode waited at the next barrier for 20
 * % of its attention time). */
static int32_t take_run(struct ifl_fwd *f, int il, int t, int thief)
{
    struct mm_region *rg = &f->att_claim[(size_t)il * (size_t)ifl_pool_size(f->pool) + (size_t)t];
    const int32_t lo = f->run_share[t], hi = f->run_share[t + 1];
    uint64_t old = atomic_load_explicit(&rg->taken, memory_order_relaxed);
    for (;;) {
        int32_t a = (int32_t)(old & 0xffffffffu), b = (int32_t)(old >> 32);
        if (hi - lo - a - b <= 0)
            return -1;
        uint64_t nw = thief ? old + ((uint64_t)1 << 32) : old + 1;
        if (atomic_compare_exchange_weak_explicit(&rg->taken, &old, nw, memory_order_relaxed,
                                                  memory_order_relaxed))
            return thief ? hi - b - 1 : lo + a;
    }
}

/* Rows from r that one attention_blocks pass takes: up to f->run_rows of
 * one sequence at consecutive positions (a prompt's rows), else one. */
static long attn_run(const struct ifl_fwd *f, const struct ifl_batch *b, long r)
{
    long e = r + 1;
    while (e < b->n_rows && e - r < f->run_rows && b->seq[e] == b->seq[r] &&
           b->pos[e] == b->pos[e - 1] + 1)
        e++;
    return e - r;
}

/* Asks for bytes [lo, hi) of n cached rows `row` bytes apart: one head of
 * the next KV block, just before the same head of the current block is
 * worked on. A block's rows are its heads side by side, so a head's
 * positions are a row apart and the blocks of a sequence lie anywhere in
 * the store: the hardware prefetchers find neither stream. Asking head by
 * head keeps the requests spread over the work (the whole block asked for
 * at once made a 16-sequence small-110m decode 20-27 % slower: the
 * requests queue). The lines are asked into L2 (prefetcht1), not L1: on
 * the Zen 4 a 16-sequence small-110m Q8_0 decode ran 1240-1280 tok/s so
 * against 1070-1110 into L1 and 960-980 with no prefetch (same build,
 * alternating, 3 rounds); L1 requests hold the core's few miss buffers,
 * which the kernel's own loads of the current block need. */
static void kv_prefetch(const char *p, size_t row, int n, size_t lo, size_t hi)
{
    for (int i = 0; i < n; i++)
        for (size_t off = lo & ~(size_t)63; off < hi; off += 64)
            __builtin_prefetch(p + (size_t)i * row + off, 0, 2);
}

/* After a split attention (attention_blocks): converts this thread's KV
 * heads' part of every row of att for wo, when every thread's part is
 * whole blocks of wo's input format; else clears memo, so mm_prepare
 * converts the rows after a barrier. Every thread decides alike. */
static void quant_heads(struct job *j, struct act_memo *memo, const struct ifl_mat *wo, int ith,
                        int nth)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_hparams *hp = &f->m->hp;
    const enum ifl_type at = ifl_type_info(wo->type)->act;
    const struct ifl_type_info *ti = ifl_type_info(at);
    const int per_head = hp->n_head / hp->n_head_kv * hp->head_dim_v; /* att values a KV head */
    for (int t = 1; t < nth; t++)
        if ((long)hp->n_head_kv * t / nth * per_head % ti->blck) {
            memo->src = NULL;
            return;
        }
    const int e0 = hp->n_head_kv * ith / nth * per_head;
    const int e1 = hp->n_head_kv * (ith + 1) / nth * per_head;
    const int32_t nr = j->b->n_rows;
    if (at != IFL_TYPE_F32 && e1 > e0)
        for (long r = 0; r < nr; r++)
            f->kn->quant[at](f->att + r * wo->n_in + e0,
                             (char *)f->act + r * f->act_row_bytes +
                                 (size_t)(e0 / ti->blck) * ti->size,
                             e1 - e0);
    quant_rows(j, memo, wo, f->att, nr, 0, 0); /* notes that act holds them */
}

/* Attention over an F16 cache, or a Q8_0 one whose heads are whole blocks
 * (read in place, no dequantised copy). One item is a run of a sequence's
 * consecutive rows (attn_run; one row when decoding) with all their heads:
 * one kernel call per KV block and KV head for the scores of every query
 * of the run on that head, and one for the weighted values. A run's
 * queries of a KV head are gathered into one tile (att_q, att_o), so each
 * cached row is converted once for all of them; the keys past a row's own
 * position that its run reads are scored but not used, and the values are
 * summed over the positions the rows share, then each row's own rest. The
 * KV heads are taken a few at a time (as many as keep their scores within
 * f->score_floats, at most score_heads queries): each block is walked once
 * for all of them, reading its cached rows in order. Per query the
 * arithmetic is the kernels' (which do not depend on how many queries or
 * positions share a call, attn_pv adds position by position in order)
 * and attention()'s softmax, so a row's attention does not depend on its
 * run or its batch. Each finished run is converted for wo (quant_rows).
 * Runs are taken from each thread's share (take_run).
 * With split, this thread takes KV heads [kh0, kh1) of every run (the batch
 * has fewer rows than there are threads) and converts those heads' part
 * of the rows for wo when the parts are whole blocks of its input format
 * (else it leaves memo cleared: mm_prepare converts them). */
static void attention_blocks(struct job *j, int ith, int nth, int il, struct act_memo *memo,
                             const struct ifl_mat *wo, int split, int kh0, int kh1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_hparams *hp = &f->m->hp;
    const struct ifl_kv_store *kv = f->kv;
    const int hd = hp->head_dim, hdv = hp->head_dim_v, bs = kv->block_size;
    const int group = hp->n_head / hp->n_head_kv;
    const int q8 = kv->type == IFL_TYPE_Q8_0; /* else F16 */
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t lds = f->score_ld;
    const size_t q_row = (size_t)hp->n_head * hd, o_row = (size_t)hp->n_head * hdv;
    float *sc = f->scores + (size_t)ith * (size_t)f->score_heads * lds;
    float *qbuf = f->att_q + (size_t)ith * (size_t)f->score_heads * hd;
    float *obuf = f->att_o + (size_t)ith * (size_t)f->score_heads * hdv;
    for (int32_t k = 0, victim = 0;; k++) {
        /* split: every run in turn; else the runs of this thread's share
         * from its front, then those left of the others' from their backs */
        int32_t run = k;
        if (!split) {
            while (victim < nth && (run = take_run(f, il, (ith + victim) % nth, victim > 0)) < 0)
                victim++;
            if (victim == nth)
                break;
        } else if (run >= f->n_runs || kh0 == kh1) {
            break;
        }
        const long r = f->run_start[run], nr = f->run_start[run + 1] - r;
        const int32_t *table = b->block_tables[b->seq[r]];
        /* the run's rows read positions [0, pos + 1): the first the fewest */
        const int32_t n_min = b->pos[r] + 1, n_max = b->pos[r + nr - 1] + 1;
        const int per_kv = (int)nr * group; /* queries per KV head */
        /* A prompt's rows come in runs of the same sequence one after
         * another, each reading the prefix that the run before it has just
         * read. Such a run still asks for its keys ahead (without, its key
         * scores ran slower), but not for its values (ask_v): those requests
         * cost more instructions than they saved. On the Zen 3 under perf,
         * builds alternating, attention's samples over the matmuls' (the
         * same work in both builds): small-110m Q8_0 pp2048 0.65 -> 0.60
         * (3 pairs), pp512 0.17 -> 0.15, tinyllama Q4_0 pp1024 0.20 ->
         * 0.19. A sequence's first run (every run of a decode) asks for
         * both. Not asking for keys either was level: attention_blocks'
         * own time halved, the key scores took as much more. */
        const int ask_v = run == 0 || b->seq[f->run_start[run - 1]] != b->seq[r];
        long fit = f->score_floats / ((long)per_kv * n_max);
        int nh = fit < 1 ? 1 : fit * per_kv > f->score_heads ? f->score_heads / per_kv : (int)fit;
        for (int h0 = kh0; h0 < kh1; h0 += nh) {
            const int h1 = kh1 - h0 < nh ? kh1 : h0 + nh;
            /* the queries of KV head hk are Q_AT(hk) + i * hd, i < per_kv (by
             * the run's rows, then the group), its outputs O_AT(hk) + i * hdv:
             * a lone row's own, else gathered into qbuf and obuf */
            const float *qbase =
                nr == 1 ? f->q + (size_t)r * q_row + (size_t)h0 * group * hd : qbuf;
            float *obase = nr == 1 ? f->att + (size_t)r * o_row + (size_t)h0 * group * hdv : obuf;
#define Q_AT(hk) (qbase + (size_t)((hk) - h0) * per_kv * hd)
#define O_AT(hk) (obase + (size_t)((hk) - h0) * per_kv * hdv)
            if (nr > 1)
                for (int hk = h0; hk < h1; hk++)
                    for (long i = 0; i < nr; i++)
                        memcpy(qbuf + ((size_t)(hk - h0) * per_kv + (size_t)i * group) * hd,
                               f->q + (size_t)(r + i) * q_row + (size_t)hk * group * hd,
                               sizeof(float) * (size_t)group * (size_t)hd);
            /* the byte where head h starts in a cached row of d values a head */
#define HEAD_OFS(h, d) (q8 ? (size_t)(h) * (d) / 32 * 34 : (size_t)(h) * (d) * 2)
            kv_prefetch(kv_at(kv, kv->k, il, table[0], 0, kv->k_row), kv->k_row,
                        n_max < bs ? n_max : bs, HEAD_OFS(h0, hd), HEAD_OFS(h1, hd));
            for (int32_t t0 = 0; t0 < n_max; t0 += bs) {
                int nt = n_max - t0 < bs ? n_max - t0 : bs;
                const char *kp = kv_at(kv, kv->k, il, table[t0 / bs], 0, kv->k_row);
                /* with each head, its lines of the next block (or of V's first) */
                const int last = t0 + bs >= n_max;
                const char *np = last ? kv_at(kv, kv->v, il, table[0], 0, kv->v_row)
                                      : kv_at(kv, kv->k, il, table[t0 / bs + 1], 0, kv->k_row);
                const size_t nrow = last ? kv->v_row : kv->k_row;
                const int nn = last ? (n_max < bs ? n_max : bs)
                                    : n_max - t0 - bs < bs ? n_max - t0 - bs : bs;
                const int nd = last ? hdv : hd;
                for (int hk = h0; hk < h1; hk++) {
                    if (ask_v || !last) /* at the last key block, np is V's first */
                        kv_prefetch(np, nrow, nn, HEAD_OFS(hk, nd), HEAD_OFS(hk + 1, nd));
                    float *sh = sc + (size_t)(hk - h0) * per_kv * lds + t0;
                    const char *kh = kp + HEAD_OFS(hk, hd);
                    if (q8)
                        f->kn->attn_qk_q8_0(hd, per_kv, Q_AT(hk), kh, kv->k_row, nt, scale, sh,
                                            lds);
                    else
                        f->kn->attn_qk_f16(hd, per_kv, Q_AT(hk), (const uint16_t *)kh,
                                           kv->k_row / 2, nt, scale, sh, lds);
                }
            }
            const int nq = (h1 - h0) * per_kv;
            double sum[ATT_QHEADS];
            for (int g = 0; g < nq; g++) {
                float *s = sc + (size_t)g * lds;
                int32_t n_pos = b->pos[r + g % per_kv / group] + 1;
                sum[g] = f->kn->softmax_exp(n_pos, s, row_max(s, n_pos));
            }
            for (int hk = h0; hk < h1; hk++)
                memset(O_AT(hk), 0, sizeof(float) * (size_t)per_kv * (size_t)hdv);
            for (int32_t t0 = 0; t0 < n_max; t0 += bs) {
                /* nc positions of the block every row reads, then each row's own */
                int nc = n_min - t0 <= 0 ? 0 : n_min - t0 < bs ? n_min - t0 : bs;
                const char *vp = kv_at(kv, kv->v, il, table[t0 / bs], 0, kv->v_row);
                const char *vn =
                    t0 + bs < n_max ? kv_at(kv, kv->v, il, table[t0 / bs + 1], 0, kv->v_row) : NULL;
                const int vnn = n_max - t0 - bs < bs ? n_max - t0 - bs : bs;
                for (int hk = h0; hk < h1; hk++) {
                    if (vn && ask_v)
                        kv_prefetch(vn, kv->v_row, vnn, HEAD_OFS(hk, hdv), HEAD_OFS(hk + 1, hdv));
                    for (long i = -1; i < nr; i++) {
                        int q0 = i < 0 ? 0 : (int)i * group, nqv = i < 0 ? per_kv : group;
                        int32_t n_pos = b->pos[r + (i < 0 ? 0 : i)] + 1;
                        int u0 = i < 0 ? 0 : nc;
                        int u1 = i < 0 ? nc : n_pos - t0 < bs ? n_pos - t0 : bs;
                        if (u1 <= u0)
                            continue;
                        const float *sh = sc + ((size_t)(hk - h0) * per_kv + q0) * lds + t0 + u0;
                        float *oh = O_AT(hk) + (size_t)q0 * hdv;
                        const char *vh = vp + (size_t)u0 * kv->v_row + HEAD_OFS(hk, hdv);
                        if (q8)
                            f->kn->attn_pv_q8_0(hdv, nqv, sh, lds, vh, kv->v_row, u1 - u0, oh);
                        else
                            f->kn->attn_pv_f16(hdv, nqv, sh, lds, (const uint16_t *)vh,
                                               kv->v_row / 2, u1 - u0, oh);
                    }
                }
            }
            for (int hk = h0; hk < h1; hk++) {
                float *o = O_AT(hk);
                for (int g = 0; g < per_kv; g++) {
                    float inv = (float)(1.0 / sum[(hk - h0) * per_kv + g]);
                    for (int i = 0; i < hdv; i++)
                        o[(size_t)g * hdv + i] *= inv;
                }
                if (nr > 1)
                    for (long i = 0; i < nr; i++)
                        memcpy(f->att + (size_t)(r + i) * o_row + (size_t)hk * group * hdv,
                               o + (size_t)i * group * hdv,
                               sizeof(float) * (size_t)group * (size_t)hdv);
            }
#undef Q_AT
#undef O_AT
#undef HEAD_OFS
        }
        /* the rows (or this thread's part) are done: convert them for Wo
         * now, not after a barrier */
        if (!split)
            quant_rows(j, memo, wo, f->att, b->n_rows, r, r + nr);
    }
    if (split)
        quant_heads(j, memo, wo, ith, nth);
}

/* Whether attention_blocks reads this cache for this model. */
static int attn_blocked(const struct ifl_fwd *f)
{
    const struct ifl_hparams *mh = &f->m->hp;
    enum ifl_type kt = f->kv->type;
    int blocked = kt == IFL_TYPE_F16 ||
                  (kt == IFL_TYPE_Q8_0 && mh->head_dim % 32 == 0 && mh->head_dim_v % 32 == 0);
    return blocked && mh->n_head / mh->n_head_kv <= ATT_QHEADS;
}

static void attention(struct job *j, int ith, int nth, int il, struct act_memo *memo,
                      const struct ifl_mat *wo)
{
    if (attn_blocked(j->f)) {
        attention_blocks(j, ith, nth, il, memo, wo, 0, 0, j->f->m->hp.n_head_kv);
        /* every thread notes it, rows or none, so all agree on what act holds */
        quant_rows(j, memo, wo, j->f->att, j->b->n_rows, 0, 0);
        return;
    }
    memo->src = NULL; /* mm_prepare converts att after the barrier */
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_hparams *hp = &f->m->hp;
    const struct ifl_kv_store *kv = f->kv;
    int hd = hp->head_dim, hdv = hp->head_dim_v;
    int group = hp->n_head / hp->n_head_kv;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = f->scores + (size_t)ith * (size_t)f->score_heads * f->score_ld;
    float *tmp = f->kvtmp + (size_t)ith * (size_t)f->kvtmp_len;
    long lo, hi;
    ifl_pool_split((long)b->n_rows * hp->n_head, ith, nth, &lo, &hi);
    for (long item = lo; item < hi; item++) {
        long r = item / hp->n_head;
        int h = (int)(item % hp->n_head);
        int hk = h / group;
        const float *q = f->q + (size_t)r * hp->n_head * hd + (size_t)h * hd;
        const int32_t *table = b->block_tables[b->seq[r]];
        int32_t n_pos = b->pos[r] + 1;
        float mx = -INFINITY;
        for (int32_t t = 0; t < n_pos; t++) {
            int32_t blk = table[t / kv->block_size], slot = t % kv->block_size;
            const void *kp = kv_at(kv, kv->k, il, blk, slot, kv->k_row);
            float s;
            if (kv->type == IFL_TYPE_F16) {
                s = f->kn->dot_f16(hd, (const uint16_t *)kp + (size_t)hk * hd, q);
            } else {
                const float *kf = kv->type == IFL_TYPE_Q8_0 ? q8_head(f, kp, hk * hd, hd, tmp)
                                                            : (const float *)kp + (size_t)hk * hd;
                s = 0;
                for (int i = 0; i < hd; i++)
                    s += kf[i] * q[i];
            }
            s *= scale;
            sc[t] = s;
            if (s > mx)
                mx = s;
        }
        double sum = f->kn->softmax_exp(n_pos, sc, mx);
        float *o = f->att + (size_t)r * hp->n_head * hdv + (size_t)h * hdv;
        memset(o, 0, sizeof(float) * (size_t)hdv);
        for (int32_t t = 0; t < n_pos; t++) {
            int32_t blk = table[t / kv->block_size], slot = t % kv->block_size;
            const void *vp = kv_at(kv, kv->v, il, blk, slot, kv->v_row);
            if (kv->type == IFL_TYPE_F16) {
                f->kn->axpy_f16(hdv, sc[t], (const uint16_t *)vp + (size_t)hk * hdv, o);
            } else {
                const float *vf = kv->type == IFL_TYPE_Q8_0 ? q8_head(f, vp, hk * hdv, hdv, tmp)
                                                            : (const float *)vp + (size_t)hk * hdv;
                for (int i = 0; i < hdv; i++)
                    o[i] += sc[t] * vf[i];
            }
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < hdv; i++)
            o[i] *= inv;
    }
}

/* ---- the step ---- */

static void step(void *arg, int ith, int nth)
{
    struct job *j = arg;
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_model *m = f->m;
    const struct ifl_hparams *hp = &m->hp;
    const int32_t nr = b->n_rows;
    const int n_embd = hp->n_embd, n_ff = hp->n_ff, half = hp->n_rot / 2;
    const int q_dim = hp->n_head * hp->head_dim, k_dim = hp->n_head_kv * hp->head_dim;
    const int v_dim = hp->n_head_kv * hp->head_dim_v;
    struct act_memo memo = {0};
    int grp = 0; /* matmul groups this thread has been through */
    /* fewer rows than threads: the threads share each row's attention out
     * by KV heads, where otherwise one would take it alone */
    const int heads_split = nr < nth && attn_blocked(f);
    long lo, hi;
    ifl_pool_split(nr, ith, nth, &lo, &hi);

    /* embeddings and rotary angles; each thread's rows stay its own for
     * every per-row phase below, so those need no barrier between them */
    for (long r = lo; r < hi; r++) {
        const struct ifl_mat *te = &m->tok_embd;
        f->kn->dequant[te->type]((const char *)te->data + (size_t)b->tokens[r] * te->row_bytes,
                                 f->x + r * n_embd, n_embd);
        float *cs = f->rope_cs + r * half * 2;
        for (int i = 0; i < half; i++) {
            double th = (double)b->pos[r] * f->inv_freq[i];
            cs[2 * i] = (float)cos(th);
            cs[2 * i + 1] = (float)sin(th);
        }
    }

    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        for (long r = lo; r < hi; r++)
            rmsnorm(f->xn + r * n_embd, f->x + r * n_embd, w->attn_norm, n_embd, hp->rms_eps);
        memo.src = NULL;
        quant_rows(j, &memo, &w->wq, f->xn, nr, lo, hi);
        const struct mm_task qkv[3] = {{&w->wq, f->q, (size_t)q_dim},
                                       {&w->wk, f->k, (size_t)k_dim},
                                       {&w->wv, f->v, (size_t)v_dim}};
        mm_barrier(j, ith, nth, qkv, 3);
        mm_group(j, ith, nth, &memo, &grp, f->xn, nr, qkv, 3);
        ifl_pool_barrier(f->pool);
        if (heads_split) {
            /* this thread's KV heads of every row, from q, k and v to att:
             * it reads only the heads it stored, so no barrier between */
            int h0 = hp->n_head_kv * ith / nth, h1 = hp->n_head_kv * (ith + 1) / nth;
            for (long r = 0; r < nr; r++)
                qkv_ready(j, w, r, h0, h1);
            store_kv(j, il, 0, nr, h0, h1);
            attention_blocks(j, ith, nth, il, &memo, &w->wo, 1, h0, h1);
        } else {
            for (long r = lo; r < hi; r++)
                qkv_ready(j, w, r, 0, hp->n_head_kv);
            store_kv(j, il, lo, hi, 0, hp->n_head_kv);
            ifl_pool_barrier(f->pool);
            attention(j, ith, nth, il, &memo, &w->wo);
        }
        const struct mm_task o = {&w->wo, f->tmp, (size_t)n_embd};
        mm_barrier(j, ith, nth, &o, 1);
        mm_group(j, ith, nth, &memo, &grp, f->att, nr, &o, 1);
        ifl_pool_barrier(f->pool);
        for (long r = lo; r < hi; r++) {
            add_residual(f->x + r * n_embd, f->tmp + r * n_embd, n_embd);
            rmsnorm(f->xn + r * n_embd, f->x + r * n_embd, w->ffn_norm, n_embd, hp->rms_eps);
        }
        memo.src = NULL; /* xn now holds the ffn input */
        quant_rows(j, &memo, &w->w_gate, f->xn, nr, lo, hi);
        const struct mm_task gu[2] = {{&w->w_gate, f->gate, (size_t)n_ff},
                                      {&w->w_up, f->up, (size_t)n_ff}};
        mm_barrier(j, ith, nth, gu, 2);
        mm_group(j, ith, nth, &memo, &grp, f->xn, nr, gu, 2);
        ifl_pool_barrier(f->pool);
        for (long r = lo; r < hi; r++)
            f->kn->swiglu(n_ff, f->gate + r * n_ff, f->up + r * n_ff);
        quant_rows(j, &memo, &w->w_down, f->gate, nr, lo, hi);
        const struct mm_task d = {&w->w_down, f->tmp, (size_t)n_embd};
        mm_barrier(j, ith, nth, &d, 1);
        mm_group(j, ith, nth, &memo, &grp, f->gate, nr, &d, 1);
        ifl_pool_barrier(f->pool);
        for (long r = lo; r < hi; r++)
            add_residual(f->x + r * n_embd, f->tmp + r * n_embd, n_embd);
    }
    ifl_pool_barrier(f->pool); /* the output rows below are any thread's */

    if (j->n_out == 0)
        return;
    long olo, ohi;
    ifl_pool_split(j->n_out, ith, nth, &olo, &ohi);
    for (long i = olo; i < ohi; i++) {
        rmsnorm(f->xn + i * n_embd, f->x + (size_t)f->out_rows[i] * n_embd, m->out_norm, n_embd,
                hp->rms_eps);
        if (b->hidden)
            memcpy(b->hidden + i * n_embd, f->xn + i * n_embd, sizeof(float) * (size_t)n_embd);
    }
    memo.src = NULL;
    quant_rows(j, &memo, &m->output, f->xn, j->n_out, olo, ohi);
    const struct mm_task out = {&m->output, j->logits, (size_t)m->output.n_out};
    mm_barrier(j, ith, nth, &out, 1);
    mm_group(j, ith, nth, &memo, &grp, f->xn, j->n_out, &out, 1);
}

static int check_batch(const struct ifl_fwd *f, const struct ifl_batch *b, char *err)
{
    const struct ifl_hparams *hp = &f->m->hp;
    if (b->n_rows < 1 || b->n_rows > f->max_rows)
        return ifl_err(err, IFL_EINVAL, "forward: %d rows, expected 1..%d", b->n_rows,
                       f->max_rows);
    for (int32_t r = 0; r < b->n_rows; r++) {
        int32_t t = b->tokens[r], p = b->pos[r], s = b->seq[r];
        if (t < 0 || t >= hp->n_vocab)
            return ifl_err(err, IFL_EINVAL, "forward: row %d: token %d outside vocabulary of %d",
                           r, t, hp->n_vocab);
        if (p < 0 || p >= f->max_ctx)
            return ifl_err(err, IFL_EINVAL, "forward: row %d: position %d outside 0..%d", r, p,
                           f->max_ctx - 1);
        if (s < 0 || s >= b->n_seqs)
            return ifl_err(err, IFL_EINVAL, "forward: row %d: sequence %d of %d", r, s,
                           b->n_seqs);
        int32_t need = p / f->kv->block_size + 1;
        if (need > b->n_blocks[s])
            return ifl_err(err, IFL_EINVAL,
                           "forward: row %d: position %d needs %d blocks, sequence %d has %d", r,
                           p, need, s, b->n_blocks[s]);
        for (int32_t i = 0; i < need; i++) {
            int32_t blk = b->block_tables[s][i];
            if (blk < 0 || blk >= f->kv->n_blocks)
                return ifl_err(err, IFL_EINVAL, "forward: sequence %d: block %d outside 0..%d", s,
                               blk, f->kv->n_blocks - 1);
        }
    }
    return 0;
}

int ifl_forward(struct ifl_fwd *f, const struct ifl_batch *b, float *logits, char *err)
{
    int rc = check_batch(f, b, err);
    if (rc)
        return rc;
    struct job j = {.f = f, .b = b, .logits = logits};
    for (int32_t r = 0; r < b->n_rows; r++)
        if (b->logits && b->logits[r])
            f->out_rows[j.n_out++] = r;
    /* the attention runs, and each thread's share of them: contiguous,
     * cut where the cost (positions attended, plus a fixed part per row)
     * crosses a thread's fraction */
    const int nth = ifl_pool_size(f->pool);
    long total = 0, cum = 0;
    for (int32_t r = 0; r < b->n_rows; r++)
        total += b->pos[r] + 1 + 16;
    f->n_runs = 0;
    int t = 0;
    f->run_share[0] = 0;
    for (long r = 0, nr; r < b->n_rows; r += nr) {
        nr = attn_run(f, b, r);
        long cost = 0;
        for (long i = r; i < r + nr; i++)
            cost += b->pos[i] + 1 + 16;
        /* this run goes to the thread whose fraction holds its middle */
        while (t + 1 < nth && (cum + cost / 2) * nth / total > t)
            f->run_share[++t] = f->n_runs;
        cum += cost;
        f->run_start[f->n_runs++] = (int32_t)r;
    }
    f->run_start[f->n_runs] = b->n_rows;
    while (t < nth)
        f->run_share[++t] = f->n_runs;
    /* published by the job's start */
    for (int g = 0; g < f->n_mm_groups * nth; g++)
        atomic_store_explicit(&f->mm_reg[g].taken, 0, memory_order_relaxed);
    for (int i = 0; i < f->m->hp.n_layer * nth; i++)
        atomic_store_explicit(&f->att_claim[i].taken, 0, memory_order_relaxed);
    ifl_pool_run(f->pool, step, &j);
    return 0;
}
