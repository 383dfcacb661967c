/*
 * How the attention kernels walk a group of query heads, shared by the
 * 256-bit (x86_simd.h) and 512-bit (x86_avx512_attn.c) tables.
 */
#ifndef IFL_KERNELS_X86_HEADS_H
#define IFL_KERNELS_X86_HEADS_H

/* Runs HEADS(Q, i) over nq query heads: tiles of Q = 4 heads from head i,
 * then one tile of the 1-3 heads left. Q is a literal in every call, so
 * each tile size is its own unrolled instance. */
#define FOR_HEAD_TILES(nq, HEADS)                                                                  \
    do {                                                                                           \
        int i_ = 0;                                                                                \
        for (; i_ + 4 <= (nq); i_ += 4)                                                            \
            HEADS(4, i_);                                                                          \
        switch ((nq)-i_) {                                                                         \
        case 3:                                                                                    \
            HEADS(3, i_);                                                                          \
            break;                                                                                 \
        case 2:                                                                                    \
            HEADS(2, i_);                                                                          \
            break;                                                                                 \
        case 1:                                                                                    \
            HEADS(1, i_);                                                                          \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

#endif
