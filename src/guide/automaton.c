/*
 * The automaton that runs a compiled GBNF grammar (gbnf.c builds it):
 * states, the one-byte step, the start state, and the state API.
 *
 * The automaton (our own design after the idea of llama.cpp's grammar
 * sampler): a state is a set of stacks of element positions; the top of
 * every stack is a character class (stacks are "expanded": references are
 * replaced by their alternatives, ends pop to the caller) or the stack is
 * empty, meaning the input may end here. A code point advances every stack
 * whose top class matches it. A reference followed by the end of its
 * alternative is a tail call (the caller's frame is dropped), so right
 * recursion such as repetition runs in constant depth. Expansion terminates
 * because left recursion is rejected at compile time.
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/internal.h"

/* ---------------------------------------------------------------- vectors */

int ifl_guide_vec_reserve(struct ifl_guide_vec *v, size_t n)
{
    if (n <= v->cap)
        return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < n)
        cap *= 2;
    uint32_t *p = realloc(v->v, cap * sizeof *p);
    if (!p)
        return IFL_ENOMEM;
    v->v = p;
    v->cap = cap;
    return 0;
}

/* ---------------------------------------------------------------- scratch */

struct hslot {
    uint64_t hash;
    uint32_t gen, off;
};

struct ifl_guide_scratch {
    struct ifl_guide_vec sc; /* stacks being expanded */
    struct hslot *tab;       /* dedup of the output's stacks */
    uint32_t tab_mask, gen;
    uint32_t n_out;
    uint32_t budget;             /* expansion steps left for this output */
    struct ifl_guide_vec tmp[2]; /* accept_bytes' double buffer */
};

int ifl_guide_scratch_create(struct ifl_guide_scratch **out)
{
    struct ifl_guide_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return IFL_ENOMEM;
    s->tab_mask = 255;
    s->tab = calloc(s->tab_mask + 1, sizeof *s->tab);
    if (!s->tab) {
        free(s);
        return IFL_ENOMEM;
    }
    *out = s;
    return 0;
}

void ifl_guide_scratch_free(struct ifl_guide_scratch *s)
{
    if (!s)
        return;
    free(s->sc.v);
    free(s->tmp[0].v);
    free(s->tmp[1].v);
    free(s->tab);
    free(s);
}

static uint64_t hash_words(const uint32_t *w, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 0x100000001B3ull;
        h ^= h >> 29;
    }
    return h;
}

static int grow_table(struct ifl_guide_scratch *s, const struct ifl_guide_vec *out)
{
    uint32_t nm = s->tab_mask * 2 + 1;
    struct hslot *t = calloc((size_t)nm + 1, sizeof *t);
    if (!t)
        return IFL_ENOMEM;
    free(s->tab);
    s->tab = t;
    s->tab_mask = nm;
    s->gen = 1;
    /* re-insert what out holds so far */
    for (size_t off = 0; off < out->n; off += 1 + out->v[off]) {
        uint64_t h = hash_words(out->v + off, 1 + out->v[off]);
        uint32_t i = (uint32_t)h & nm;
        while (t[i].gen == s->gen)
            i = (i + 1) & nm;
        t[i] = (struct hslot){h, s->gen, (uint32_t)off};
    }
    return 0;
}

/* Appends the stack w[0..depth) to out unless already there. */
static int add_stack(struct ifl_guide_scratch *s, struct ifl_guide_vec *out, const uint32_t *w,
                     uint32_t depth)
{
    if ((s->n_out + 1) * 2 > s->tab_mask && grow_table(s, out))
        return IFL_ENOMEM;
    if (ifl_guide_vec_reserve(out, out->n + depth + 1))
        return IFL_ENOMEM;
    uint32_t *dst = out->v + out->n;
    dst[0] = depth;
    if (depth)
        memcpy(dst + 1, w, depth * sizeof *w);
    uint64_t h = hash_words(dst, depth + 1);
    uint32_t i = (uint32_t)h & s->tab_mask;
    for (; s->tab[i].gen == s->gen; i = (i + 1) & s->tab_mask) {
        if (s->tab[i].hash == h) {
            const uint32_t *o = out->v + s->tab[i].off;
            if (o[0] == depth && (!depth || memcmp(o + 1, w, depth * sizeof *w) == 0))
                return 0;
        }
    }
    if (s->n_out >= IFL_GUIDE_MAX_STACKS)
        return IFL_EFULL;
    s->tab[i] = (struct hslot){h, s->gen, (uint32_t)out->n};
    out->n += depth + 1;
    s->n_out++;
    return 0;
}

static void begin_output(struct ifl_guide_scratch *s, struct ifl_guide_vec *out)
{
    out->n = 0;
    s->n_out = 0;
    s->budget = IFL_GUIDE_MAX_EXPAND;
    if (++s->gen == 0) {
        memset(s->tab, 0, ((size_t)s->tab_mask + 1) * sizeof *s->tab);
        s->gen = 1;
    }
}

/* Expands the stack at s->sc.v[off .. off+depth) until every resulting
 * stack's top is a class (or it is empty) and adds those to out. Paths that
 * end in the same stack are only merged at the end, so nested optional
 * items such as ((|){3}){6} have exponentially many: the step budget makes
 * them IFL_EFULL, never a hang. */
static int expand(const struct ifl_guide *g, struct ifl_guide_scratch *s, size_t off,
                  uint32_t depth, struct ifl_guide_vec *out)
{
    while (1) {
        if (s->budget == 0)
            return IFL_EFULL;
        s->budget--;
        if (depth == 0)
            return add_stack(s, out, NULL, 0);
        uint32_t p = s->sc.v[off + depth - 1], e = g->elems[p];
        if (E_TYPE(e) == E_CLASS)
            return add_stack(s, out, s->sc.v + off, depth);
        if (E_TYPE(e) == E_END) {
            depth--;
            continue;
        }
        uint32_t r = E_VAL(e);
        if (E_TYPE(g->elems[p + 1]) == E_END)
            depth--; /* tail call */
        else
            s->sc.v[off + depth - 1] = p + 1;
        if (depth + 1 > IFL_GUIDE_MAX_DEPTH)
            return IFL_EFULL;
        uint32_t a0 = g->alt_off[r], a1 = g->alt_off[r + 1];
        if (a1 - a0 == 1) {
            if (ifl_guide_vec_reserve(&s->sc, off + depth + 1))
                return IFL_ENOMEM;
            s->sc.v[off + depth++] = g->alts[a0];
            continue;
        }
        size_t noff = off + depth + 1;
        for (uint32_t a = a0; a < a1; a++) {
            if (ifl_guide_vec_reserve(&s->sc, noff + depth + 1))
                return IFL_ENOMEM;
            memmove(s->sc.v + noff, s->sc.v + off, depth * sizeof(uint32_t));
            s->sc.v[noff + depth] = g->alts[a];
            int rc = expand(g, s, noff, depth + 1, out);
            if (rc)
                return rc;
        }
        return 0;
    }
}

static int class_has(const struct ifl_guide *g, uint32_t c, uint32_t cp)
{
    if (cp < 128)
        return (g->cls_ascii[4 * c + (cp >> 5)] >> (cp & 31)) & 1;
    int in = 0;
    for (uint32_t i = g->cls_off[c]; i < g->cls_off[c + 1]; i++) {
        if (cp < g->ranges[2 * i])
            break;
        if (cp <= g->ranges[2 * i + 1]) {
            in = 1;
            break;
        }
    }
    return in ^ g->cls_neg[c];
}

/* Whether class c matches some code point in [lo, hi]. */
static int class_meets(const struct ifl_guide *g, uint32_t c, uint32_t lo, uint32_t hi)
{
    uint32_t i0 = g->cls_off[c], i1 = g->cls_off[c + 1];
    if (!g->cls_neg[c]) {
        for (uint32_t i = i0; i < i1; i++)
            if (g->ranges[2 * i] <= hi && g->ranges[2 * i + 1] >= lo)
                return 1;
        return 0;
    }
    /* negated: true unless the (sorted, merged) ranges cover [lo, hi] */
    for (uint32_t i = i0; i < i1; i++)
        if (g->ranges[2 * i] <= lo && g->ranges[2 * i + 1] >= hi)
            return 0;
    return 1;
}

int ifl_guide_class_has(const struct ifl_guide *g, uint32_t c, uint32_t cp)
{
    return class_has(g, c, cp);
}

int ifl_guide_class_apart(const struct ifl_guide *g, uint32_t a, uint32_t b)
{
    for (int k = 0; k < 4; k++)
        if (g->cls_ascii[4 * a + k] & g->cls_ascii[4 * b + k])
            return 0;
    /* past ASCII: fine when either matches nothing there */
    return !class_meets(g, a, 0x80, 0x10FFFF) || !class_meets(g, b, 0x80, 0x10FFFF) ? 1 : -1;
}

int ifl_guide_class_plain(const struct ifl_guide *g, uint32_t c)
{
    /* ASCII part: 0x20..0x7F except '"' (0x22) and '\\' (0x5C) */
    static const uint32_t pm[4] = {0, 0xFFFFFFFBu, 0xEFFFFFFFu, 0xFFFFFFFFu};
    int all = 1, none = 1;
    for (int k = 0; k < 4; k++) {
        uint32_t w = g->cls_ascii[4 * c + k] & pm[k];
        all &= w == pm[k];
        none &= w == 0;
    }
    /* the rest: every code point past ASCII, or none of them */
    int some = class_meets(g, c, 0x80, 0x10FFFF);
    int every = 1;
    uint32_t i0 = g->cls_off[c], i1 = g->cls_off[c + 1];
    if (!g->cls_neg[c]) {
        /* sorted and merged: one range must cover [0x80, 0x10FFFF] */
        every = 0;
        for (uint32_t i = i0; i < i1; i++)
            if (g->ranges[2 * i] <= 0x80 && g->ranges[2 * i + 1] >= 0x10FFFF)
                every = 1;
    } else {
        for (uint32_t i = i0; i < i1; i++)
            if (g->ranges[2 * i + 1] >= 0x80)
                every = 0;
    }
    if (all && every)
        return 1;
    if (none && !some)
        return 0;
    return -1;
}

/* Advances every stack of in by code point cp into out. */
static int advance(const struct ifl_guide *g, const struct ifl_guide_level *in, uint32_t cp,
                   struct ifl_guide_vec *out, struct ifl_guide_scratch *s)
{
    begin_output(s, out);
    const uint32_t *w = in->buf, *end = in->buf + in->len;
    for (; w < end; w += 1 + w[0]) {
        uint32_t d = w[0];
        if (d == 0)
            continue;
        uint32_t top = w[d];
        if (!class_has(g, E_VAL(g->elems[top]), cp))
            continue;
        if (ifl_guide_vec_reserve(&s->sc, d))
            return IFL_ENOMEM;
        memcpy(s->sc.v, w + 1, d * sizeof *w);
        s->sc.v[d - 1] = top + 1;
        int rc = expand(g, s, 0, d, out);
        if (rc)
            return rc;
    }
    return 0;
}

int ifl_guide_step(const struct ifl_guide *g, const struct ifl_guide_level *in, uint8_t b,
                   struct ifl_guide_vec *out, struct ifl_guide_level *res,
                   struct ifl_guide_scratch *s)
{
    uint32_t cp, need;
    if (in->need == 0) {
        if (b < 0x80) {
            cp = b;
            need = 0;
        } else if (b >= 0xC2 && b <= 0xDF) {
            cp = b & 0x1F;
            need = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            cp = b & 0x0F;
            need = 2;
        } else if (b >= 0xF0 && b <= 0xF4) {
            cp = b & 0x07;
            need = 3;
        } else {
            return 0;
        }
    } else {
        if ((b & 0xC0) != 0x80)
            return 0;
        /* no overlong forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF)
         * or code points past U+10FFFF (F4 90..BF): after a lead byte these
         * (cp, need) pairs name the lead exactly */
        if ((in->need == 2 && in->cp == 0 && b < 0xA0) ||
            (in->need == 2 && in->cp == 0xD && b >= 0xA0) ||
            (in->need == 3 && in->cp == 0 && b < 0x90) ||
            (in->need == 3 && in->cp == 4 && b >= 0x90))
            return 0;
        cp = (in->cp << 6) | (b & 0x3F);
        need = in->need - 1;
    }
    if (need) {
        uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
        /* after a lead byte the smallest code point of its length (no
         * overlong forms); later bytes already exclude them */
        static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
        if (in->need == 0 && lo < min_cp[need])
            lo = min_cp[need];
        if (hi > 0x10FFFF)
            hi = 0x10FFFF;
        if (lo > hi)
            return 0;
        const uint32_t *w = in->buf, *end = in->buf + in->len;
        int ok = 0;
        for (; w < end && !ok; w += 1 + w[0])
            if (w[0] && class_meets(g, E_VAL(g->elems[w[w[0]]]), lo, hi))
                ok = 1;
        if (!ok)
            return 0;
        *res = *in;
        res->cp = cp;
        res->need = need;
        return 1;
    }
    int rc = advance(g, in, cp, out, s);
    if (rc)
        return rc;
    if (s->n_out == 0)
        return 0;
    res->buf = out->v;
    res->len = out->n;
    res->n_stacks = s->n_out;
    res->cp = 0;
    res->need = 0;
    return 1;
}

int ifl_guide_level_accepting(const struct ifl_guide_level *l)
{
    if (l->need)
        return 0;
    for (const uint32_t *w = l->buf, *end = l->buf + l->len; w < end; w += 1 + w[0])
        if (w[0] == 0)
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- start */

int ifl_guide_build_start(struct ifl_guide *g)
{
    /* the start state: one stack per alternative of root, expanded */
    struct ifl_guide_scratch *s = NULL;
    struct ifl_guide_vec o = {0};
    int rc = ifl_guide_scratch_create(&s);
    if (!rc) {
        begin_output(s, &o);
        for (uint32_t a = g->alt_off[g->root]; !rc && a < g->alt_off[g->root + 1]; a++) {
            rc = ifl_guide_vec_reserve(&s->sc, 1);
            if (!rc) {
                s->sc.v[0] = g->alts[a];
                rc = expand(g, s, 0, 1, &o);
            }
        }
        g->init = o.v;
        g->init_len = o.n;
        g->init_n = s->n_out;
    }
    ifl_guide_scratch_free(s);
    return rc;
}

/* ---------------------------------------------------------------- state */

int ifl_guide_state_init(struct ifl_guide_state *st, const struct ifl_guide *g)
{
    memset(st, 0, sizeof *st);
    st->g = g;
    struct ifl_guide_scratch *s;
    int rc = ifl_guide_scratch_create(&s);
    if (rc)
        return rc;
    st->scratch = s;
    return ifl_guide_state_reset(st);
}

void ifl_guide_state_deinit(struct ifl_guide_state *st)
{
    if (!st)
        return;
    free(st->buf);
    ifl_guide_scratch_free(st->scratch);
    memset(st, 0, sizeof *st);
}

static int set_stacks(struct ifl_guide_state *st, const uint32_t *w, size_t len)
{
    if (len > st->cap) {
        size_t cap = len < 64 ? 64 : len * 2;
        uint32_t *p = realloc(st->buf, cap * sizeof *p);
        if (!p)
            return IFL_ENOMEM;
        st->buf = p;
        st->cap = cap;
    }
    if (len)
        memmove(st->buf, w, len * sizeof *w);
    st->len = len;
    return 0;
}

int ifl_guide_state_reset(struct ifl_guide_state *st)
{
    st->cp = st->need = 0;
    st->n_stacks = st->g->init_n;
    return set_stacks(st, st->g->init, st->g->init_len);
}

int ifl_guide_state_copy(struct ifl_guide_state *dst, const struct ifl_guide_state *src)
{
    if (dst == src)
        return 0;
    int rc = set_stacks(dst, src->buf, src->len);
    if (rc)
        return rc;
    dst->g = src->g;
    dst->n_stacks = src->n_stacks;
    dst->cp = src->cp;
    dst->need = src->need;
    return 0;
}

int ifl_guide_accept_bytes(struct ifl_guide_state *st, const void *bytes, size_t n)
{
    const uint8_t *b = bytes;
    struct ifl_guide_scratch *s = st->scratch;
    struct ifl_guide_vec *v = s->tmp;
    struct ifl_guide_level cur = {st->buf, st->len, st->n_stacks, st->cp, st->need}, nx;
    int rc = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        rc = ifl_guide_step(st->g, &cur, b[i], &v[k], &nx, st->scratch);
        if (rc <= 0) {
            rc = rc == 0 ? IFL_EINVAL : rc;
            break;
        }
        if (nx.buf == v[k].v)
            k ^= 1;
        cur = nx;
        rc = 0;
    }
    if (!rc) {
        rc = set_stacks(st, cur.buf, cur.len);
        if (!rc) {
            st->n_stacks = cur.n_stacks;
            st->cp = cur.cp;
            st->need = cur.need;
        }
    }
    return rc;
}

int ifl_guide_is_accepting(const struct ifl_guide_state *st)
{
    struct ifl_guide_level l = {st->buf, st->len, st->n_stacks, st->cp, st->need};
    return ifl_guide_level_accepting(&l);
}

int ifl_guide_can_continue(const struct ifl_guide_state *st)
{
    if (st->need)
        return 1;
    for (const uint32_t *w = st->buf, *end = st->buf + st->len; w < end; w += 1 + w[0])
        if (w[0])
            return 1;
    return 0;
}
