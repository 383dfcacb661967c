/*
 * Shared between the guide's files: the compiled grammar's layout and the
 * one-byte step of the automaton, which the state API and the mask walk
 * both use (so a mask can never disagree with accepting a token's bytes).
 */
#ifndef IFL_GUIDE_INTERNAL_H
#define IFL_GUIDE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/utf8.h"
#include "guide/guide.h"

/* An element is (type << 28) | value. A rule's alternatives are runs of
 * elements, each ended by E_END. */
enum { E_CLASS = 1, E_REF = 2, E_END = 3 };
#define E_TYPE(e) ((e) >> 28)
#define E_VAL(e) ((e)&0x0fffffffu)
#define E_MAKE(t, v) (((uint32_t)(t) << 28) | (uint32_t)(v))

struct ifl_guide {
    uint32_t *elems; /* [n_elems] */
    size_t n_elems;
    uint32_t n_rules;
    uint32_t *alt_off; /* [n_rules + 1] index into alts */
    uint32_t *alts;    /* alternative start positions in elems */
    uint32_t n_classes;
    uint32_t *cls_off;   /* [n_classes + 1] index into ranges (pairs) */
    uint8_t *cls_neg;    /* [n_classes] */
    uint32_t *cls_ascii; /* [n_classes][4] bitmap of the ASCII code points matched */
    uint32_t *ranges;    /* sorted, merged [lo, hi] pairs */
    char **names;        /* [n_rules] */
    uint32_t root;
    uint64_t id;    /* unique per compiled grammar: masks are cached by (id, state) */
    uint32_t *init; /* the start state's stacks */
    size_t init_len;
    uint32_t init_n;
};

struct ifl_guide_vec {
    uint32_t *v;
    size_t n, cap;
};

/* A read-only view of a state. */
struct ifl_guide_level {
    const uint32_t *buf;
    size_t len;
    uint32_t n_stacks;
    uint32_t cp, need;
};

struct ifl_guide_scratch;
int ifl_guide_scratch_create(struct ifl_guide_scratch **out);
void ifl_guide_scratch_free(struct ifl_guide_scratch *s);
int ifl_guide_vec_reserve(struct ifl_guide_vec *v, size_t n);

/* Fills in g's start state (init, init_len, init_n): one stack per
 * alternative of the root rule, expanded. The parser (gbnf.c) calls it once
 * the grammar is built and checked. 0, IFL_EFULL when the start exceeds
 * IFL_GUIDE_MAX_STACKS parses or IFL_GUIDE_MAX_EXPAND expansion steps, or
 * IFL_ENOMEM. */
int ifl_guide_build_start(struct ifl_guide *g);

/* Feeds byte b to state in. Returns 1 and fills *res (whose buf is either
 * in->buf, when b leaves a character unfinished, or out->v), 0 when b is
 * rejected, IFL_EFULL or IFL_ENOMEM. out must not alias in->buf. */
int ifl_guide_step(const struct ifl_guide *g, const struct ifl_guide_level *in, uint8_t b,
                   struct ifl_guide_vec *out, struct ifl_guide_level *res,
                   struct ifl_guide_scratch *s);
int ifl_guide_level_accepting(const struct ifl_guide_level *l);
/* How class c treats the "plain" code points (every one from U+0020 up,
 * except '"' and '\\': what a JSON string holds unescaped): 1 it matches
 * them all, 0 none, -1 some. The mask's fast path for string content. */
int ifl_guide_class_plain(const struct ifl_guide *g, uint32_t c);
/* Whether class c matches code point cp. */
int ifl_guide_class_has(const struct ifl_guide *g, uint32_t c, uint32_t cp);
/* Whether classes a and b share no code point: 1 they do not, 0 they do,
 * -1 unknown (both match something past ASCII). */
int ifl_guide_class_apart(const struct ifl_guide *g, uint32_t a, uint32_t b);

/* Source-text helpers shared by the GBNF parser and the regex front end. */

/* The value of a hex digit, or -1. */
static inline int ifl_guide_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes the UTF-8 character at s[*p] (*p < n), strictly (core/utf8.h),
 * and advances *p past it. Returns the code point, -1 for bytes that are
 * no character (a stray byte, an overlong form, a surrogate, above
 * U+10FFFF), or -2 for a character cut short by the end; *p has moved past
 * the first byte either way. */
static inline int64_t ifl_guide_utf8_next(const char *s, size_t n, size_t *p)
{
    const unsigned char *u = (const unsigned char *)s + *p;
    size_t len;
    int rc = ifl_utf8_check(u, n - *p, &len);
    if (rc != IFL_UTF8_OK) {
        (*p)++;
        return rc == IFL_UTF8_SHORT ? -2 : -1;
    }
    *p += len;
    return ifl_utf8_decode(u, len);
}

#endif
