/*
 * Tiled attention over the paged KV cache (F16 or Q8_0) with an online
 * softmax: for every row, its positions in tiles of 64 aligned to
 * multiples of 64 (positions 64k .. 64k + 63), folded one after another
 * into the row's running max, sum and weighted values (the kernels'
 * attn_tile_*, kernels.h), then divided by the sum. gpt-oss's sinks start
 * the max at the head's sink logit and the sum at 1.
 *
 * Batch invariance: the tiles a row meets and what it takes of each depend
 * only on its own position and window, and a kernel's arithmetic for a
 * query does not depend on the other queries of the call; so a row's
 * attention is the same bits whether it is decoded alone, sits among a
 * prompt's rows, is a tree row (its positions taken at their places), or
 * shares the step with anything else.
 *
 * Work: one item is a run of a sequence's consecutive rows (a prompt's,
 * ifl_fwd_attn_run; one row when decoding), taken one KV head at a time
 * with every query of the run on that head (rows times the group) in each
 * kernel call: each cached row is read and converted once for all of
 * them. Over a Q8_0 cache the kernels score with integer dots against
 * the queries in Q8_0 (kernels.h): those are quantised here, once a call
 * for all its tiles, each block of 32 values on its own (so a query's
 * bits do not depend on what is quantised with it).
 * ifl_fwd_attention_blocks deals the runs (and, with fewer rows than
 * threads, the KV heads) and calls ifl_fwd_attend_run for each.
 */
#include <math.h>
#include <string.h>

#include "model/forward_internal.h"

#define TILE 64       /* positions of a tile at most (struct ifl_attn_tile) */
#define TILE_DMAX 256 /* head widths the kernels' buffers hold */

int ifl_fwd_attn_tiled(const struct ifl_fwd *f)
{
    const struct ifl_hparams *hp = &f->m->hp;
    if (!ifl_fwd_attn_blocked(f))
        return 0;
    return hp->head_dim <= TILE_DMAX && hp->head_dim_v <= TILE_DMAX &&
           (f->kv->type == IFL_TYPE_F16 || (hp->head_dim % 32 == 0 && hp->head_dim_v % 32 == 0));
}

/* The place in the cache of row r's position t, as a pointer to KV head
 * 0 of it in layer il's keys (arr kv->k[il], piece kv->k_piece) or values:
 * a tree row's own places (forward.h), else t. Head h of the same
 * position is head_ofs(kv, h, piece) bytes on. */
static const char *row_at(const struct ifl_fwd *f, const struct ifl_batch *b, void *arr,
                          size_t piece, long r, int32_t t)
{
    const struct ifl_kv_store *kv = f->kv;
    const int32_t pl = ifl_fwd_tree_row(b, r) ? ifl_fwd_place(b, r, t) : t;
    const int32_t blk = b->block_tables[b->seq[r]][pl / kv->block_size];
    return ifl_kv_at(kv, arr, piece, blk, pl % kv->block_size, 0);
}

/* The bytes from a cached position's head 0 to its head h (the store
 * keeps a block head by head; hg is 1 wherever the tiles run). */
static size_t head_ofs(const struct ifl_kv_store *kv, int h, size_t piece)
{
    return (size_t)h * (size_t)kv->block_size * piece;
}

/* Asks for heads [h0, h1) of n cached positions (rows[i], head 0; a head
 * `piece` bytes a position) into L2, as attention.c's kv_prefetch does:
 * the paged blocks lie anywhere, not a stream the hardware finds. */
static void tile_prefetch(const struct ifl_kv_store *kv, const char *const *rows, int n, int h0,
                          int h1, size_t piece)
{
    for (int h = h0; h < h1; h++)
        for (int i = 0; i < n; i++) {
            const char *p = rows[i] + head_ofs(kv, h, piece);
            for (const char *x = (const char *)((uintptr_t)p & ~(uintptr_t)63); x < p + piece;
                 x += 64)
                __builtin_prefetch(x, 0, 2);
        }
}

void ifl_fwd_attend_run(struct job *j, int ith, int il, long r, long nr, int kh0, int kh1)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_hparams *hp = &f->m->hp;
    const struct ifl_kv_store *kv = f->kv;
    const int hd = hp->head_dim, hdv = hp->head_dim_v, group = hp->n_head / hp->n_head_kv;
    const int q8 = kv->type == IFL_TYPE_Q8_0;
    void (*tile)(const struct ifl_attn_tile *) = q8 ? f->kn->attn_tile_q8_0 : f->kn->attn_tile_f16;
    const size_t q_row = (size_t)hp->n_head * hd, o_row = (size_t)hp->n_head * hdv;
    const int nq = (int)nr * group; /* queries per KV head: by the run's rows, then the group */
    float *qbuf = f->att_q + (size_t)ith * (size_t)f->score_heads * hd;
    float *obuf = f->att_o + (size_t)ith * (size_t)f->score_heads * hdv;
    /* a Q8_0 cache's queries, quantised once here for all their tiles */
    const size_t q8_row = q8 ? ifl_type_row_size(IFL_TYPE_Q8_0, hd) : 0;
    char *q8buf = q8 ? (char *)f->att_q8 + (size_t)ith * (size_t)f->score_heads * q8_row : NULL;
    float m[ATT_QHEADS], l[ATT_QHEADS];
    uint8_t lo[ATT_QHEADS], hi[ATT_QHEADS];
    const char *kr[2][TILE], *vr[2][TILE], *kh[TILE], *vh[TILE], *kn[TILE], *vn[TILE];
    /* the run's positions: its first row's window start to its last row */
    const int32_t w_first = ifl_fwd_win0(hp, il, b->pos[r]);
    const int32_t n_max = b->pos[r + nr - 1] + 1;
    const int32_t tb = w_first / TILE * TILE;
    /* A lone row (a decode) takes its KV heads together, tile by tile, so
     * each tile's rows are read once for them all, in address order; a
     * prompt's run takes one KV head at a time, its queries gathered. */
    const int hstep = nr > 1 ? 1 : ATT_QHEADS / group;
    for (int hc0 = kh0; hc0 < kh1; hc0 += hstep) {
        const int hc1 = kh1 - hc0 < hstep ? kh1 : hc0 + hstep, nqa = (hc1 - hc0) * nq;
        const float *qs = f->q + (size_t)r * q_row + (size_t)hc0 * group * hd;
        float *os = f->att + (size_t)r * o_row + (size_t)hc0 * group * hdv;
        if (nr > 1) {
            for (long i = 0; i < nr; i++)
                memcpy(qbuf + (size_t)i * group * hd,
                       f->q + (size_t)(r + i) * q_row + (size_t)hc0 * group * hd,
                       sizeof(float) * (size_t)group * (size_t)hd);
            qs = qbuf;
            os = obuf;
        }
        if (q8) /* each query's blocks on their own: the bits of quant's */
            f->kn->quant[IFL_TYPE_Q8_0](qs, q8buf, (int64_t)nqa * hd);
        /* query i is head (hc0 + i / nq) * group + i % nq % group; a head's
         * sink (gpt-oss) is a position of its own with no value, taken
         * first: the running max starts at its logit z and the sum at
         * e^(z - z) = 1, as llama.cpp's softmax with sinks counts it */
        const float *sinks = f->m->layers[il].attn_sinks;
        for (int i = 0; i < nqa; i++) {
            m[i] = sinks ? sinks[(hc0 + i / nq) * group + i % nq % group] : -INFINITY;
            l[i] = sinks ? 1.0f : 0.0f;
        }
        memset(os, 0, sizeof(float) * (size_t)nqa * (size_t)hdv);
        int cur = 0;
        int nt = n_max - tb < TILE ? n_max - tb : TILE;
        for (int t = 0; t < nt; t++) {
            kr[0][t] = row_at(f, b, kv->k[il], kv->k_piece, r, tb + t);
            vr[0][t] = row_at(f, b, kv->v[il], kv->v_piece, r, tb + t);
        }
        /* the first tile's rows asked for here; each next one's by the
         * kernel (pk, pv), spread over its work on the one before */
        tile_prefetch(kv, kr[0], nt, hc0, hc1, kv->k_piece);
        tile_prefetch(kv, vr[0], nt, hc0, hc1, kv->v_piece);
        for (int32_t t0 = tb; t0 < n_max; t0 += TILE) {
            /* the next tile's rows, asked for while this one is worked on */
            const int32_t t0n = t0 + TILE;
            const int ntn = n_max - t0n < TILE ? n_max - t0n : TILE;
            for (int t = 0; t < ntn; t++) {
                kr[!cur][t] = row_at(f, b, kv->k[il], kv->k_piece, r, t0n + t);
                vr[!cur][t] = row_at(f, b, kv->v[il], kv->v_piece, r, t0n + t);
            }
            for (long i = 0; i < nr; i++) {
                const int32_t p = b->pos[r + i], w0 = ifl_fwd_win0(hp, il, p);
                int32_t a = w0 > t0 ? w0 - t0 : 0, e = p + 1 - t0;
                if (e > nt)
                    e = nt;
                if (e <= a) /* the tile is past the row, or before its window */
                    a = e = 0;
                for (int g = 0; g < group; g++) {
                    lo[i * group + g] = (uint8_t)a;
                    hi[i * group + g] = (uint8_t)e;
                }
            }
            for (int hk = hc0; hk < hc1; hk++) {
                const size_t ko = head_ofs(kv, hk, kv->k_piece), vo = head_ofs(kv, hk, kv->v_piece);
                for (int t = 0; t < nt; t++) {
                    kh[t] = kr[cur][t] + ko;
                    vh[t] = vr[cur][t] + vo;
                }
                for (int t = 0; t < ntn; t++) {
                    kn[t] = kr[!cur][t] + ko;
                    vn[t] = vr[!cur][t] + vo;
                }
                const size_t qi = (size_t)(hk - hc0) * (size_t)nq;
                const struct ifl_attn_tile at = {.q = qs + qi * hd,
                                                 .q8 = q8 ? q8buf + qi * q8_row : NULL,
                                                 .k = (const void *const *)kh,
                                                 .v = (const void *const *)vh,
                                                 .lo = lo,
                                                 .hi = hi,
                                                 .m = m + qi,
                                                 .l = l + qi,
                                                 .o = os + qi * hdv,
                                                 .scale = hp->attn_scale,
                                                 .softcap = hp->attn_softcap,
                                                 .d = hd,
                                                 .dv = hdv,
                                                 .nq = nq,
                                                 .nt = nt,
                                                 .pk = ntn > 0 ? (const void *const *)kn : NULL,
                                                 .pv = (const void *const *)vn,
                                                 .pnt = ntn > 0 ? ntn : 0};
                tile(&at);
            }
            cur = !cur;
            nt = ntn;
        }
        for (int i = 0; i < nqa; i++) {
            const float inv = 1.0f / l[i];
            float *o = os + (size_t)i * hdv;
            for (int e = 0; e < hdv; e++)
                o[e] *= inv;
        }
        if (nr > 1)
            for (long i = 0; i < nr; i++)
                memcpy(f->att + (size_t)(r + i) * o_row + (size_t)hc0 * group * hdv,
                       obuf + (size_t)i * group * hdv, sizeof(float) * (size_t)group * (size_t)hdv);
    }
}
