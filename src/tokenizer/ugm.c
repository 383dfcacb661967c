/*
 * Unigram (tokenizer.ggml.model = "t5"), SentencePiece's other model, as
 * llama.cpp runs it:
 *
 * 1. Normalize: at each position the longest user-defined token is kept as
 *    it is; else the longest key of the precompiled charsmap (SentencePiece's
 *    normalization rules, compiled into a double-array trie) is replaced by
 *    its string; else one UTF-8 character passes (an invalid byte becomes
 *    U+FFFD). Spaces become U+2581; with add_space_prefix the text starts
 *    with one; with remove_extra_whitespaces runs of spaces shrink to one
 *    before each word and trailing ones go.
 * 2. Viterbi: the segmentation of the normalized text into vocabulary
 *    pieces (normal, user-defined, unused) with the highest sum of scores
 *    (user-defined ones score 0); a character no piece starts with is the
 *    unknown token at the lowest normal score minus 10, and a run of
 *    unknowns gives one unknown id.
 *
 * The charsmap is an XOR-compressed double array (Kanda 2018): each 32-bit
 * node packs BASE (bits 10-30, shifted left by 8 when bit 9 is set), a leaf
 * flag (bit 8) and the byte that leads to it (bits 0-7); bit 31 marks the
 * entries that hold a replacement's offset. Every index read is checked
 * against the array, and every replacement against the blob's end.
 */
#include <float.h>

#include "core/err.h"
#include "model/gguf.h"
#include "tokenizer/internal.h"

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

int ifl_vocab_ugm_load(struct ifl_vocab *v, const struct ifl_gguf *g, char *err)
{
    const char *key = "tokenizer.ggml.precompiled_charsmap";
    struct ifl_gguf_value arr;
    int rc = ifl_gguf_get_arr(g, key, &arr, err);
    if (rc < 0 && rc != IFL_ENOTFOUND)
        return rc;
    if (rc == 0 && arr.n > 0) {
        if (arr.elem_type != IFL_GGUF_UINT8 && arr.elem_type != IFL_GGUF_INT8)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s must be an array of bytes", key);
        if (arr.n < 4 || arr.n > ((uint64_t)1 << 30))
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s has %llu bytes", key,
                           (unsigned long long)arr.n);
        /* 4 spare bytes so the uint32 view is aligned whatever malloc gives */
        v->charsmap = malloc((size_t)arr.n + 4);
        if (!v->charsmap)
            return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory for %s", key);
        v->charsmap_len = (size_t)arr.n;
        for (uint64_t i = 0; i < arr.n; i++) {
            int64_t b = 0;
            ifl_gguf_arr_int(&arr, i, &b);
            v->charsmap[i] = (unsigned char)b;
        }
        uint32_t blob;
        memcpy(&blob, v->charsmap, 4);
        if ((uint64_t)blob + 4 >= arr.n || blob % 4 != 0)
            return ifl_err(err, IFL_EFORMAT,
                           "tokenizer: %s: trie of %u bytes does not fit in %llu bytes", key, blob,
                           (unsigned long long)arr.n);
        v->xcda = (const uint32_t *)(void *)(v->charsmap + 4); /* malloc'd: 4-byte aligned */
        v->n_xcda = blob / 4;
        v->repl = (const char *)v->charsmap + 4 + blob;
        v->repl_len = (size_t)arr.n - 4 - blob;
    }
    float lo = FLT_MAX;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        if (v->type[i] == IFL_TOK_NORMAL && v->scores[i] < lo)
            lo = v->scores[i];
        v->has_user |= v->type[i] == IFL_TOK_USER_DEFINED;
    }
    v->ugm_unk_score = (double)(lo == FLT_MAX ? 0.0f : lo) - 10.0;
    return 0;
}

/* ---- normalization ---- */

static uint32_t xcda_node(const struct ifl_vocab *v, size_t i, int *ok)
{
    if (i >= v->n_xcda) {
        *ok = 0;
        return 0;
    }
    uint32_t x;
    memcpy(&x, v->xcda + i, 4);
    return x;
}

static uint32_t xcda_base(uint32_t x)
{
    return (x >> 10) << ((x & (1u << 9)) >> 6);
}

/* The longest charsmap key at s[0, n): its length (0: none) and replacement. */
static size_t charsmap_match(const struct ifl_vocab *v, const unsigned char *s, size_t n,
                             const char **repl, size_t *repl_len)
{
    if (!v->n_xcda)
        return 0;
    int ok = 1;
    size_t best = 0, best_off = 0;
    uint32_t idx = xcda_base(xcda_node(v, 0, &ok));
    for (size_t k = 0; k < n && ok; k++) {
        unsigned c = s[k];
        if (c == 0)
            break;
        idx ^= c;
        uint32_t x = xcda_node(v, idx, &ok);
        if (!ok || (x & ((1u << 31) | 0xff)) != c)
            break;
        int leaf = (x >> 8) & 1;
        idx ^= xcda_base(x);
        if (leaf) {
            uint32_t val = xcda_node(v, idx, &ok);
            if (!ok)
                break;
            best = k + 1;
            best_off = val & 0x7fffffffu;
        }
    }
    if (best == 0 || best_off >= v->repl_len)
        return 0; /* (a replacement outside the blob is ignored) */
    const char *r = v->repl + best_off;
    const char *e = memchr(r, 0, v->repl_len - best_off);
    if (!e)
        return 0;
    *repl = r;
    *repl_len = (size_t)(e - r);
    return best;
}

/* The longest user-defined token at s[0, n), 0 if none. */
static size_t user_match(const struct ifl_vocab *v, const char *s, size_t n)
{
    size_t best = 0;
    uint64_t h = IFL_TOK_HASH_INIT;
    size_t most = n < v->max_text ? n : v->max_text;
    for (size_t k = 1; k <= most; k++) {
        h = ifl_tok_hash(h, s + k - 1, 1);
        int32_t id = ifl_vocab_find_h(v, h, s, k);
        if (id >= 0 && v->type[id] == IFL_TOK_USER_DEFINED)
            best = k;
    }
    return best;
}

struct sbuf {
    char *s;
    size_t n, cap;
};

static int sbuf_put(struct sbuf *b, const char *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return IFL_ENOMEM;
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    return 0;
}

static int normalize(const struct ifl_vocab *v, const char *text, size_t len, struct sbuf *o)
{
    int prepend = v->add_space_prefix, merge = v->remove_extra_ws;
    int prepended = 0, in_word = 0, rc;
    for (size_t i = 0; i < len;) {
        const char *piece;
        size_t pn, used;
        if (v->has_user && (used = user_match(v, text + i, len - i)) > 0) {
            piece = text + i;
            pn = used;
        } else if ((used = charsmap_match(v, (const unsigned char *)text + i, len - i, &piece,
                                          &pn)) > 0) {
        } else {
            size_t cl;
            if (ifl_utf8_check((const unsigned char *)text + i, len - i, &cl) == IFL_UTF8_OK) {
                piece = text + i;
                pn = used = cl;
            } else {
                piece = "\xef\xbf\xbd";
                pn = 3;
                used = 1;
            }
        }
        for (size_t k = 0; k < pn; k++) {
            if (piece[k] != ' ') {
                if (!in_word) {
                    in_word = 1;
                    if ((prepend && !prepended) || merge) {
                        if ((rc = sbuf_put(o, SPACE_MARK, 3)) < 0)
                            return rc;
                        prepended = 1;
                    }
                }
                if ((rc = sbuf_put(o, piece + k, 1)) < 0)
                    return rc;
            } else {
                in_word = 0;
                if (!merge && (rc = sbuf_put(o, SPACE_MARK, 3)) < 0)
                    return rc;
            }
        }
        i += used;
    }
    return 0;
}

/* ---- Viterbi ---- */

struct best {
    double score;
    size_t from; /* where the last piece starts */
    int32_t id;
};

int ifl_vocab_ugm_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out)
{
    struct sbuf nb = {0};
    struct best *best = NULL;
    int32_t *rev = NULL;
    int rc = normalize(v, text, len, &nb);
    if (rc < 0 || nb.n == 0)
        goto done;
    size_t n = nb.n;
    const char *s = nb.s;
    best = malloc((n + 1) * sizeof(*best));
    if (!best) {
        rc = IFL_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i <= n; i++)
        best[i] = (struct best){-DBL_MAX, 0, v->unk};
    best[0].score = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = ifl_utf8_len_lead((unsigned char)s[i]);
        if (cl > n - i)
            cl = n - i;
        int whole_char = 0;
        double base = best[i].score;
        uint64_t h = IFL_TOK_HASH_INIT;
        size_t most = n - i < v->max_text ? n - i : v->max_text;
        for (size_t k = 1; k <= most; k++) {
            h = ifl_tok_hash(h, s + i + k - 1, 1);
            int32_t id = ifl_vocab_find_h(v, h, s + i, k);
            if (id < 0)
                continue;
            int t = v->type[id];
            if (t != IFL_TOK_NORMAL && t != IFL_TOK_USER_DEFINED && t != IFL_TOK_UNUSED)
                continue;
            if (k == cl)
                whole_char = 1;
            double sc = base + (t == IFL_TOK_USER_DEFINED ? 0.0 : (double)v->scores[id]);
            if (sc > best[i + k].score)
                best[i + k] = (struct best){sc, i, id};
        }
        if (!whole_char) {
            double sc = base + v->ugm_unk_score;
            if (sc > best[i + cl].score)
                best[i + cl] = (struct best){sc, i, v->unk};
        }
        i += cl;
    }
    /* back from the end; consecutive unknowns give one id */
    rev = malloc((n + 1) * sizeof(*rev));
    if (!rev) {
        rc = IFL_ENOMEM;
        goto done;
    }
    size_t nr = 0;
    int prev_unk = 0;
    for (size_t at = n;;) {
        int unk = best[at].id == v->unk;
        if (!(prev_unk && unk))
            rev[nr++] = best[at].id;
        if (best[at].from == 0)
            break;
        prev_unk = unk;
        at = best[at].from;
    }
    for (size_t k = nr; k-- > 0;)
        if (rev[k] >= 0) /* (no unknown token: the text it stood for is dropped) */
            ifl_tok_out_push(out, rev[k]);
done:
    free(nb.s);
    free(best);
    free(rev);
    return rc;
}
