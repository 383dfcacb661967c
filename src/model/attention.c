/*
 * The forward pass's attention (forward.c runs the step around it): each
 * row's K and V stored at its position in the paged cache, and each row
 * attending over its sequence's cached positions.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "model/forward_internal.h"

/* The `width` values of one head, starting at value `off` of a Q8_0 row:
 * dequantises the 32-value blocks that hold them into tmp and returns a
 * pointer to the head's first value. */
static const float *q8_head(const struct ifl_fwd *f, const void *row, int off, int width,
                            float *tmp)
{
    int b0 = off / 32, b1 = (off + width - 1) / 32;
    f->kn->dequant[IFL_TYPE_Q8_0]((const char *)row + (size_t)b0 * 34, tmp,
                                  (int64_t)(b1 - b0 + 1) * 32);
    return tmp + (off - b0 * 32);
}

/* Stores KV heads [h0, h1) of rows [r0, r1) at their positions. */
void ifl_fwd_store_kv(struct job *j, int il, long r0, long r1, int h0, int h1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    struct ifl_kv_store *kv = f->kv;
    const struct ifl_hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, hdv = hp->head_dim_v;
    const int hg = kv->hg, nk = hg * hd, nv = hg * hdv;
    /* whole pieces (a piece is one head but for a Q8_0 cache of heads not
     * whole blocks, which is never split) */
    IFL_ASSERT(h0 % hg == 0 && h1 % hg == 0);
    for (long r = r0; r < r1; r++) {
        int32_t p = b->kv_pos ? b->kv_pos[r] : b->pos[r];
        int32_t blk = b->block_tables[b->seq[r]][p / kv->block_size];
        int32_t slot = p % kv->block_size;
        for (int pc = h0 / hg; pc < h1 / hg; pc++) {
            char *kd = ifl_kv_at(kv, kv->k[il], kv->k_piece, blk, slot, pc);
            char *vd = ifl_kv_at(kv, kv->v[il], kv->v_piece, blk, slot, pc);
            const float *ks = f->k + r * kv->k_dim + pc * nk, *vs = f->v + r * kv->v_dim + pc * nv;
            if (kv->type == IFL_TYPE_F16) {
                f->kn->cvt_f32_f16(nk, ks, (uint16_t *)(void *)kd);
                f->kn->cvt_f32_f16(nv, vs, (uint16_t *)(void *)vd);
            } else if (kv->type == IFL_TYPE_Q8_0) {
                f->kn->quant[IFL_TYPE_Q8_0](ks, kd, nk);
                f->kn->quant[IFL_TYPE_Q8_0](vs, vd, nv);
            } else {
                memcpy(kd, ks, sizeof(float) * (size_t)nk);
                memcpy(vd, vs, sizeof(float) * (size_t)nv);
            }
        }
    }
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

/* A softmax's numerators over s[0 .. n) (largest mx) and their sum, for
 * query head h of a layer whose heads have sinks (gpt-oss; NULL
 * elsewhere): the sink z takes part in the maximum and adds e^(z - max)
 * to the sum, a column with no value, as llama.cpp's soft_max with sinks. */
static double soft_sum(const struct ifl_fwd *f, float *s, int n, float mx, const float *sinks,
                       int h)
{
    if (!sinks)
        return f->kn->softmax_exp(n, s, mx);
    const float z = sinks[h], m = z > mx ? z : mx;
    return f->kn->softmax_exp(n, s, m) + (double)expf(z - m);
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

/* Rows from r that one ifl_fwd_attention_blocks pass takes: up to f->run_rows of
 * one sequence at consecutive positions (a prompt's rows), else one. */
long ifl_fwd_attn_run(const struct ifl_fwd *f, const struct ifl_batch *b, long r)
{
    long e = r + 1;
    if (ifl_fwd_tree_row(b, r))
        return 1; /* a tree row reads its own places: alone */
    while (e < b->n_rows && e - r < f->run_rows && b->seq[e] == b->seq[r] &&
           b->pos[e] == b->pos[e - 1] + 1 && !ifl_fwd_tree_row(b, e))
        e++;
    return e - r;
}

/* Asks for the `bytes` bytes at p into L2: one head's positions of the
 * next KV block (a contiguous run, the store keeping a block head by
 * head), just before the same head of the current block is worked on.
 * The blocks of a sequence lie anywhere in the store, so the hardware
 * prefetchers do not find the next one. Asking head by head keeps the
 * requests spread over the work (the whole block asked for at once made a
 * 16-sequence small-110m decode 20-27 % slower: the requests queue). The
 * lines are asked into L2 (prefetcht1), not L1: on the Zen 4 a
 * 16-sequence small-110m Q8_0 decode ran 1240-1280 tok/s so against
 * 1070-1110 into L1 and 960-980 with no prefetch (same build, alternating,
 * 3 rounds, with the older layout of a position's heads side by side);
 * L1 requests hold the core's few miss buffers, which the kernel's own
 * loads of the current block need. */
static void kv_prefetch(const char *p, size_t bytes)
{
    for (const char *x = (const char *)((uintptr_t)p & ~(uintptr_t)63); x < p + bytes; x += 64)
        __builtin_prefetch(x, 0, 2);
}

/* After a split attention (ifl_fwd_attention_blocks): converts this thread's KV
 * heads' part of every row of att for wo, when every thread's part is
 * whole blocks of wo's input format; else clears memo, so mm_prepare
 * converts the rows after a barrier. Every thread decides alike. */
static void quant_heads(struct job *j, struct act_memo *memo, const struct ifl_mat *wo, int ith,
                        int nth)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_hparams *hp = &f->m->hp;
    ifl_quant_fn q;
    const enum ifl_type at = ifl_fwd_act(f, wo, &q);
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
            q(f->att + r * wo->n_in + e0,
              (char *)f->act + r * f->act_row_bytes + (size_t)(e0 / ti->blck) * ti->size, e1 - e0);
    ifl_fwd_quant_rows(j, memo, wo, f->att, nr, 0, 0); /* notes that act holds them */
}

/* Used inside ifl_fwd_attention_blocks, whose locals they name. */
/* clang-format off */
#define Q_AT(hk) (qbase + (size_t)((hk) - h0) * per_kv * hd)
#define O_AT(hk) (obase + (size_t)((hk) - h0) * per_kv * hdv)
/* the bytes from a block's position to the same position of head h,
 * positions `row` bytes apart (kv->k_piece or kv->v_piece: hg is 1 here) */
#define HEAD_OFS(h, row) ((size_t)(h) * (size_t)bs * (row))
/* clang-format on */

/* A tree row's attention (forward.h) over an F16 or Q8_0 cache, KV heads
 * [kh0, kh1): ifl_fwd_attention_blocks' arithmetic for a lone row (the
 * same kernels, queries, softmax and normalisation), its keys and values
 * taken at their places: the prefix a block at a time, then each
 * ancestor's and its own one at a time. The kernels score each key alone
 * and add the values position by position in order, so cutting a block's
 * call into single positions changes nothing. */
static void tree_attend(struct job *j, int ith, int il, long r, int kh0, int kh1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_hparams *hp = &f->m->hp;
    const struct ifl_kv_store *kv = f->kv;
    const int hd = hp->head_dim, hdv = hp->head_dim_v, bs = kv->block_size;
    const int group = hp->n_head / hp->n_head_kv;
    const int q8 = kv->type == IFL_TYPE_Q8_0;
    const float scale = hp->attn_scale;
    const size_t lds = f->score_ld;
    float *sc = f->scores + (size_t)ith * (size_t)f->score_heads * lds;
    const int32_t *table = b->block_tables[b->seq[r]];
    const int32_t n_pos = b->pos[r] + 1, c = b->att_prefix[r];
    const int32_t w0 = ifl_fwd_win0(hp, il, b->pos[r]); /* a sliding window's start */
    for (int hk = kh0; hk < kh1; hk++) {
        const float *q = f->q + (size_t)r * hp->n_head * hd + (size_t)hk * group * hd;
        float *o = f->att + (size_t)r * hp->n_head * hdv + (size_t)hk * group * hdv;
        for (int32_t t0 = w0; t0 < n_pos;) {
            int32_t pl = ifl_fwd_place(b, r, t0),
                    nt = t0 < c ? (c - t0 < bs - t0 % bs ? c - t0 : bs - t0 % bs) : 1;
            const char *kh = ifl_kv_at(kv, kv->k[il], kv->k_piece, table[pl / bs], pl % bs, hk);
            if (q8)
                f->kn->attn_qk_q8_0(hd, group, q, kh, kv->k_piece, nt, scale, sc + t0, lds);
            else
                f->kn->attn_qk_f16(hd, group, q, (const uint16_t *)kh, kv->k_piece / 2, nt, scale,
                                   sc + t0, lds);
            t0 += nt;
        }
        double sum[ATT_QHEADS];
        for (int g = 0; g < group; g++) {
            float *s = sc + (size_t)g * lds + w0;
            if (hp->attn_softcap > 0)
                ifl_fwd_softcap(s, n_pos - w0, hp->attn_softcap);
            sum[g] = soft_sum(f, s, n_pos - w0, row_max(s, n_pos - w0), f->m->layers[il].attn_sinks,
                              hk * group + g);
        }
        memset(o, 0, sizeof(float) * (size_t)group * (size_t)hdv);
        for (int32_t t0 = w0; t0 < n_pos;) {
            int32_t pl = ifl_fwd_place(b, r, t0),
                    nt = t0 < c ? (c - t0 < bs - t0 % bs ? c - t0 : bs - t0 % bs) : 1;
            const char *vh = ifl_kv_at(kv, kv->v[il], kv->v_piece, table[pl / bs], pl % bs, hk);
            if (q8)
                f->kn->attn_pv_q8_0(hdv, group, sc + t0, lds, vh, kv->v_piece, nt, o);
            else
                f->kn->attn_pv_f16(hdv, group, sc + t0, lds, (const uint16_t *)vh, kv->v_piece / 2,
                                   nt, o);
            t0 += nt;
        }
        for (int g = 0; g < group; g++) {
            float inv = (float)(1.0 / sum[g]);
            for (int i = 0; i < hdv; i++)
                o[(size_t)g * hdv + i] *= inv;
        }
    }
}

/* Attention over an F16 cache, or a Q8_0 one whose heads are whole blocks
 * (read in place, no dequantised copy). One item is a run of a sequence's
 * consecutive rows (ifl_fwd_attn_run; one row when decoding) with all their heads:
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
 * and ifl_fwd_attention()'s softmax, so a row's attention does not depend on its
 * run or its batch. Each finished run is converted for wo (ifl_fwd_quant_rows).
 * Runs are taken from each thread's share (take_run).
 * With split, this thread takes KV heads [kh0, kh1) of every run (the batch
 * has fewer rows than there are threads) and converts those heads' part
 * of the rows for wo when the parts are whole blocks of its input format
 * (else it leaves memo cleared: mm_prepare converts them). */
void ifl_fwd_attention_blocks(struct job *j, int ith, int nth, int il, struct act_memo *memo,
                              const struct ifl_mat *wo, int split, int kh0, int kh1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_hparams *hp = &f->m->hp;
    const struct ifl_kv_store *kv = f->kv;
    const int hd = hp->head_dim, hdv = hp->head_dim_v, bs = kv->block_size;
    const int group = hp->n_head / hp->n_head_kv;
    const int q8 = kv->type == IFL_TYPE_Q8_0; /* else F16 */
    const float scale = hp->attn_scale;
    const size_t lds = f->score_ld;
    const size_t q_row = (size_t)hp->n_head * hd, o_row = (size_t)hp->n_head * hdv;
    float *sc = f->scores + (size_t)ith * (size_t)f->score_heads * lds;
    float *qbuf = f->att_q + (size_t)ith * (size_t)f->score_heads * hd;
    float *obuf = f->att_o + (size_t)ith * (size_t)f->score_heads * hdv;
    const int tiled = ifl_fwd_attn_tiled(f);
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
        if (tiled) { /* attention_tiled.c: every row alike, tree rows too */
            ifl_fwd_attend_run(j, ith, il, r, nr, kh0, kh1);
            if (!split)
                ifl_fwd_quant_rows(j, memo, wo, f->att, b->n_rows, r, r + nr);
            continue;
        }
        if (ifl_fwd_tree_row(b, r)) {
            tree_attend(j, ith, il, r, kh0, kh1);
            if (!split)
                ifl_fwd_quant_rows(j, memo, wo, f->att, b->n_rows, r, r + 1);
            continue;
        }
        const int32_t *table = b->block_tables[b->seq[r]];
        /* the run's rows read positions [0, pos + 1): the first the fewest */
        const int32_t n_min = b->pos[r] + 1, n_max = b->pos[r + nr - 1] + 1;
        /* a sliding window: the run reads from the block where its first
         * row's window starts; each row's scores before its own start are
         * zero after the softmax, so the values there add nothing (+0),
         * and each row's softmax covers just its window: a row's result
         * does not depend on its run */
        const int32_t tb = ifl_fwd_win0(hp, il, b->pos[r]) / bs * bs;
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
         * both. Not asking for keys either was level: ifl_fwd_attention_blocks'
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
            if (nr > 1)
                for (int hk = h0; hk < h1; hk++)
                    for (long i = 0; i < nr; i++)
                        memcpy(qbuf + ((size_t)(hk - h0) * per_kv + (size_t)i * group) * hd,
                               f->q + (size_t)(r + i) * q_row + (size_t)hk * group * hd,
                               sizeof(float) * (size_t)group * (size_t)hd);
            for (int hk = h0; hk < h1; hk++)
                kv_prefetch(ifl_kv_at(kv, kv->k[il], kv->k_piece, table[tb / bs], 0, hk),
                            (size_t)(n_max - tb < bs ? n_max - tb : bs) * kv->k_piece);
            for (int32_t t0 = tb; t0 < n_max; t0 += bs) {
                int nt = n_max - t0 < bs ? n_max - t0 : bs;
                const char *kp = ifl_kv_at(kv, kv->k[il], kv->k_piece, table[t0 / bs], 0, 0);
                /* with each head, its lines of the next block (or of V's first) */
                const int last = t0 + bs >= n_max;
                const char *np =
                    last ? ifl_kv_at(kv, kv->v[il], kv->v_piece, table[tb / bs], 0, 0)
                         : ifl_kv_at(kv, kv->k[il], kv->k_piece, table[t0 / bs + 1], 0, 0);
                const size_t nrow = last ? kv->v_piece : kv->k_piece;
                const int nn = last                   ? (n_max - tb < bs ? n_max - tb : bs)
                               : n_max - t0 - bs < bs ? n_max - t0 - bs
                                                      : bs;
                for (int hk = h0; hk < h1; hk++) {
                    if (ask_v || !last) /* at the last key block, np is V's first */
                        kv_prefetch(np + HEAD_OFS(hk, nrow), (size_t)nn * nrow);
                    float *sh = sc + (size_t)(hk - h0) * per_kv * lds + t0;
                    const char *kh = kp + HEAD_OFS(hk, kv->k_piece);
                    if (q8)
                        f->kn->attn_qk_q8_0(hd, per_kv, Q_AT(hk), kh, kv->k_piece, nt, scale, sh,
                                            lds);
                    else
                        f->kn->attn_qk_f16(hd, per_kv, Q_AT(hk), (const uint16_t *)kh,
                                           kv->k_piece / 2, nt, scale, sh, lds);
                }
            }
            const int nq = (h1 - h0) * per_kv;
            double sum[ATT_QHEADS];
            for (int g = 0; g < nq; g++) {
                float *s = sc + (size_t)g * lds;
                int32_t p = b->pos[r + g % per_kv / group], w0 = ifl_fwd_win0(hp, il, p);
                if (hp->attn_softcap > 0)
                    ifl_fwd_softcap(s + w0, p + 1 - w0, hp->attn_softcap);
                sum[g] = soft_sum(f, s + w0, p + 1 - w0, row_max(s + w0, p + 1 - w0),
                                  f->m->layers[il].attn_sinks,
                                  (h0 + g / per_kv) * group + g % per_kv % group);
                if (w0 > tb)
                    memset(s + tb, 0, sizeof(float) * (size_t)(w0 - tb));
            }
            for (int hk = h0; hk < h1; hk++)
                memset(O_AT(hk), 0, sizeof(float) * (size_t)per_kv * (size_t)hdv);
            for (int32_t t0 = tb; t0 < n_max; t0 += bs) {
                /* nc positions of the block every row reads, then each row's own */
                int nc = n_min - t0 <= 0 ? 0 : n_min - t0 < bs ? n_min - t0 : bs;
                const char *vp = ifl_kv_at(kv, kv->v[il], kv->v_piece, table[t0 / bs], 0, 0);
                const char *vn = t0 + bs < n_max ? ifl_kv_at(kv, kv->v[il], kv->v_piece,
                                                             table[t0 / bs + 1], 0, 0)
                                                 : NULL;
                const int vnn = n_max - t0 - bs < bs ? n_max - t0 - bs : bs;
                for (int hk = h0; hk < h1; hk++) {
                    if (vn && ask_v)
                        kv_prefetch(vn + HEAD_OFS(hk, kv->v_piece), (size_t)vnn * kv->v_piece);
                    for (long i = -1; i < nr; i++) {
                        int q0 = i < 0 ? 0 : (int)i * group, nqv = i < 0 ? per_kv : group;
                        int32_t n_pos = b->pos[r + (i < 0 ? 0 : i)] + 1;
                        int u0 = i < 0 ? 0 : nc;
                        int u1 = i < 0 ? nc : n_pos - t0 < bs ? n_pos - t0 : bs;
                        if (u1 <= u0)
                            continue;
                        const float *sh = sc + ((size_t)(hk - h0) * per_kv + q0) * lds + t0 + u0;
                        float *oh = O_AT(hk) + (size_t)q0 * hdv;
                        const char *vh = vp + (size_t)u0 * kv->v_piece + HEAD_OFS(hk, kv->v_piece);
                        if (q8)
                            f->kn->attn_pv_q8_0(hdv, nqv, sh, lds, vh, kv->v_piece, u1 - u0, oh);
                        else
                            f->kn->attn_pv_f16(hdv, nqv, sh, lds, (const uint16_t *)vh,
                                               kv->v_piece / 2, u1 - u0, oh);
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
        }
        /* the rows (or this thread's part) are done: convert them for Wo
         * now, not after a barrier */
        if (!split)
            ifl_fwd_quant_rows(j, memo, wo, f->att, b->n_rows, r, r + nr);
    }
    if (split)
        quant_heads(j, memo, wo, ith, nth);
}
#undef Q_AT
#undef O_AT
#undef HEAD_OFS

/* Whether ifl_fwd_attention_blocks reads this cache for this model. */
int ifl_fwd_attn_blocked(const struct ifl_fwd *f)
{
    const struct ifl_hparams *mh = &f->m->hp;
    enum ifl_type kt = f->kv->type;
    int blocked = kt == IFL_TYPE_F16 ||
                  (kt == IFL_TYPE_Q8_0 && mh->head_dim % 32 == 0 && mh->head_dim_v % 32 == 0);
    return blocked && mh->n_head / mh->n_head_kv <= ATT_QHEADS;
}

void ifl_fwd_attention(struct job *j, int ith, int nth, int il, struct act_memo *memo,
                       const struct ifl_mat *wo)
{
    if (ifl_fwd_attn_blocked(j->f)) {
        ifl_fwd_attention_blocks(j, ith, nth, il, memo, wo, 0, 0, j->f->m->hp.n_head_kv);
        /* every thread notes it, rows or none, so all agree on what act holds */
        ifl_fwd_quant_rows(j, memo, wo, j->f->att, j->b->n_rows, 0, 0);
        return;
    }
    memo->src = NULL; /* mm_prepare converts att after the barrier */
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_hparams *hp = &f->m->hp;
    const struct ifl_kv_store *kv = f->kv;
    int hd = hp->head_dim, hdv = hp->head_dim_v;
    int group = hp->n_head / hp->n_head_kv;
    float scale = hp->attn_scale;
    float *sc = f->scores + (size_t)ith * (size_t)f->score_heads * f->score_ld;
    float *tmp = f->kvtmp + (size_t)ith * (size_t)f->kvtmp_len;
    long lo, hi;
    ifl_pool_split((long)b->n_rows * hp->n_head, ith, nth, &lo, &hi);
    for (long item = lo; item < hi; item++) {
        long r = item / hp->n_head;
        int h = (int)(item % hp->n_head);
        int hk = h / group, hko = hk % kv->hg; /* its KV head, and that head's place in its piece */
        const float *q = f->q + (size_t)r * hp->n_head * hd + (size_t)h * hd;
        const int32_t *table = b->block_tables[b->seq[r]];
        int32_t n_pos = b->pos[r] + 1, w0 = ifl_fwd_win0(hp, il, b->pos[r]);
        float mx = -INFINITY;
        for (int32_t t = w0; t < n_pos; t++) {
            int32_t pl = ifl_fwd_place(b, r, t);
            int32_t blk = table[pl / kv->block_size], slot = pl % kv->block_size;
            const void *kp = ifl_kv_at(kv, kv->k[il], kv->k_piece, blk, slot, hk / kv->hg);
            float s;
            if (kv->type == IFL_TYPE_F16) {
                s = f->kn->dot_f16(hd, (const uint16_t *)kp + (size_t)hko * hd, q);
            } else {
                const float *kf = kv->type == IFL_TYPE_Q8_0 ? q8_head(f, kp, hko * hd, hd, tmp)
                                                            : (const float *)kp + (size_t)hko * hd;
                s = 0;
                for (int i = 0; i < hd; i++)
                    s += kf[i] * q[i];
            }
            s *= scale;
            if (hp->attn_softcap > 0)
                ifl_fwd_softcap(&s, 1, hp->attn_softcap);
            sc[t] = s;
            if (s > mx)
                mx = s;
        }
        double sum = soft_sum(f, sc + w0, n_pos - w0, mx, f->m->layers[il].attn_sinks, h);
        float *o = f->att + (size_t)r * hp->n_head * hdv + (size_t)h * hdv;
        memset(o, 0, sizeof(float) * (size_t)hdv);
        for (int32_t t = w0; t < n_pos; t++) {
            int32_t pl = ifl_fwd_place(b, r, t);
            int32_t blk = table[pl / kv->block_size], slot = pl % kv->block_size;
            const void *vp = ifl_kv_at(kv, kv->v[il], kv->v_piece, blk, slot, hk / kv->hg);
            if (kv->type == IFL_TYPE_F16) {
                f->kn->axpy_f16(hdv, sc[t], (const uint16_t *)vp + (size_t)hko * hdv, o);
            } else {
                const float *vf = kv->type == IFL_TYPE_Q8_0 ? q8_head(f, vp, hko * hdv, hdv, tmp)
                                                            : (const float *)vp + (size_t)hko * hdv;
                for (int i = 0; i < hdv; i++)
                    o[i] += sc[t] * vf[i];
            }
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < hdv; i++)
            o[i] *= inv;
    }
}
