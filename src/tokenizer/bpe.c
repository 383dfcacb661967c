/*
 * BPE (tokenizer.ggml.model = "gpt2", or "gemma4"): GPT-2's byte alphabet,
 * the pre-tokenizer named by tokenizer.ggml.pre (pretok.c), and rank-ordered
 * merges.
 *
 * A raw-text fragment is cut into pre-tokens by the pre-tokenizer's regexes.
 * In byte-level BPE each pre-token starts as one symbol per byte (the token
 * of that byte's alphabet character); in the raw kind (gemma4, sarvam-moe,
 * whitespace) as one symbol per UTF-8 character, with <0xNN> byte tokens for
 * characters left without a token at the end. The adjacent pair with the
 * lowest merge rank is merged until none is left (leftmost first on ties),
 * through a heap of candidates: O(n log n).
 *
 * Input that is not valid UTF-8 gets one U+FFFD per byte that does not start
 * a valid character, as llama.cpp's unicode_cpts_from_utf8 does (it is not
 * lossless, but deterministic and safe).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/err.h"
#include "model/gguf.h"
#include "tokenizer/internal.h"

/* ---- GPT-2 byte alphabet ---- */

/* Printable Latin-1 bytes stand for themselves; the 68 others (controls,
 * space, DEL, NBSP, soft hyphen) map in order to U+0100.. */
static int byte_is_printable(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t ifl_vocab_bpe_byte_cp(unsigned char b)
{
    if (byte_is_printable(b))
        return b;
    if (b <= 32)
        return 256u + b;
    if (b >= 127 && b <= 160)
        return 256u + 33 + (b - 127u);
    return 256u + 33 + 34; /* 173 */
}

int ifl_vocab_bpe_cp_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp <= 256 + 32)
        return (int)(cp - 256);
    if (cp <= 256 + 33 + 33)
        return (int)(cp - 256 - 33 + 127);
    if (cp == 256 + 33 + 34)
        return 173;
    return -1;
}

/* ---- merges ---- */

static uint64_t merge_key(int32_t l, int32_t r)
{
    return (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
}

/* Keeps the first rank of a pair listed twice, like llama.cpp. */
static void merge_insert(struct ifl_vocab *v, int32_t l, int32_t r, int32_t rank, int32_t id)
{
    uint64_t k = merge_key(l, r);
    for (uint32_t i = (uint32_t)ifl_tok_mix(k) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        if (v->merge_keys[i] == k)
            return;
        if (v->merge_keys[i] == UINT64_MAX) {
            v->merge_keys[i] = k;
            v->merge_rank[i] = rank;
            v->merge_id[i] = id;
            return;
        }
    }
}

static int merge_find(const struct ifl_vocab *v, int32_t l, int32_t r, int32_t *rank, int32_t *id)
{
    if (!v->merge_keys)
        return 0;
    uint64_t k = merge_key(l, r);
    for (uint32_t i = (uint32_t)ifl_tok_mix(k) & v->merge_mask;; i = (i + 1) & v->merge_mask) {
        if (v->merge_keys[i] == k) {
            *rank = v->merge_rank[i];
            *id = v->merge_id[i];
            return 1;
        }
        if (v->merge_keys[i] == UINT64_MAX)
            return 0;
    }
}

static int load_merges(struct ifl_vocab *v, const struct ifl_gguf *g, char *err)
{
    const char *key = "tokenizer.ggml.merges";
    struct ifl_gguf_value arr;
    int rc = ifl_gguf_get_arr(g, key, &arr, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: missing %s (needed by a gpt2 tokenizer)", key);
    if (rc < 0)
        return rc;
    if (arr.elem_type != IFL_GGUF_STRING)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: %s must be an array of strings", key);
    if (arr.n > (uint64_t)INT32_MAX / 4)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: %s has %llu entries", key,
                       (unsigned long long)arr.n);
    uint64_t cap = 16;
    while (cap < arr.n * 2)
        cap <<= 1;
    v->merge_mask = (uint32_t)(cap - 1);
    v->merge_keys = malloc(cap * sizeof(*v->merge_keys));
    v->merge_rank = malloc(cap * sizeof(*v->merge_rank));
    v->merge_id = malloc(cap * sizeof(*v->merge_id));
    if (!v->merge_keys || !v->merge_rank || !v->merge_id)
        return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory for %llu merges",
                       (unsigned long long)arr.n);
    memset(v->merge_keys, 0xff, cap * sizeof(*v->merge_keys));
    for (uint64_t i = 0; i < arr.n; i++) {
        const char *s;
        size_t n;
        if (ifl_gguf_arr_str(&arr, i, &s, &n) < 0)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s[%llu] unreadable", key,
                           (unsigned long long)i);
        /* "left right"; the left part is never empty, so look from byte 1 */
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s[%llu] '%.*s' has no space", key,
                           (unsigned long long)i, (int)(n > 64 ? 64 : n), s);
        size_t nl = (size_t)(sp - s), nr = n - nl - 1;
        int32_t l = ifl_vocab_find(v, s, nl), r = ifl_vocab_find(v, sp + 1, nr);
        int32_t m = ifl_vocab_find2(v, s, nl, sp + 1, nr);
        /* a merge whose parts or result are not tokens can never apply */
        if (l >= 0 && r >= 0 && m >= 0)
            merge_insert(v, l, r, (int32_t)i, m);
    }
    return 0;
}

int ifl_vocab_bpe_load(struct ifl_vocab *v, const struct ifl_gguf *g, const char *forced_pre,
                       char *err)
{
    const char *key = "tokenizer.ggml.pre";
    const char *pre = "default";
    size_t pre_len = 7;
    int rc = ifl_gguf_get_str(g, key, &pre, &pre_len, err);
    if (rc == IFL_ENOTFOUND) {
        pre = "default";
        pre_len = 7;
    } else if (rc < 0) {
        return rc;
    }
    if (forced_pre) {
        pre = forced_pre;
        pre_len = strlen(pre);
    }
    const struct ifl_pretok *d = ifl_pretok_find(pre, pre_len);
    if (!d)
        return ifl_err(err, IFL_EUNSUPPORTED, "tokenizer: %s '%.*s' is not supported", key,
                       (int)(pre_len > 64 ? 64 : pre_len), pre);
    if ((rc = ifl_pretok_compile(v, d, err)) < 0)
        return rc;
    if (d->flags & IFL_PRE_ADD_BOS)
        v->add_bos = 1;
    if (d->flags & IFL_PRE_NO_BOS)
        v->bos = -1; /* (ids from the metadata are read afterwards) */

    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = ifl_utf8_encode(ifl_vocab_bpe_byte_cp((unsigned char)b), s);
        v->byte_sym[b] = ifl_vocab_find(v, s, n);
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        v->byte_tok[b] = ifl_vocab_find(v, name, 6);
    }
    if ((d->flags & IFL_PRE_MERGES_OPTIONAL) && ifl_gguf_find_key(g, "tokenizer.ggml.merges") < 0)
        return 0;
    return load_merges(v, g, err);
}

void ifl_vocab_bpe_free(struct ifl_vocab *v)
{
    ifl_pretok_free(v);
    free(v->merge_keys);
    free(v->merge_rank);
    free(v->merge_id);
    v->merge_keys = NULL;
}

/* ---- tokenizing ---- */

struct bpe_work {
    struct ifl_tok_sym *sym;
    size_t sym_cap;
    char *enc; /* byte-level text of a pre-token, for ignore_merges */
    size_t enc_cap;
    struct ifl_tok_heap heap;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return IFL_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int try_merge(const struct ifl_vocab *v, struct bpe_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const struct ifl_tok_sym *a = &w->sym[l], *b = &w->sym[r];
    int32_t rank, id;
    if (a->id < 0 || b->id < 0 || !merge_find(v, a->id, b->id, &rank, &id))
        return 0;
    return ifl_tok_heap_push(&w->heap, ifl_tok_cand_make(-rank, l, a->n + b->n, id));
}

/* The id of the whole pre-token's text (byte-level: its alphabet spelling), or -1. */
static int32_t whole_word(const struct ifl_vocab *v, struct bpe_work *w, const unsigned char *s,
                          size_t n, int *rc)
{
    *rc = 0;
    if (v->pre_flags & IFL_PRE_RAW)
        return ifl_vocab_find(v, (const char *)s, n);
    if ((*rc = grow((void **)&w->enc, &w->enc_cap, 2 * n, 1)) < 0)
        return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += ifl_utf8_encode(ifl_vocab_bpe_byte_cp(s[i]), w->enc + m);
    return ifl_vocab_find(v, w->enc, m);
}

static int only_newlines(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n')
            return 0;
    return 1;
}

static int bpe_word(const struct ifl_vocab *v, struct bpe_work *w, const unsigned char *s, size_t n,
                    struct ifl_tok_out *out)
{
    int rc;
    int raw = (v->pre_flags & IFL_PRE_RAW) != 0;
    if ((v->pre_flags & IFL_PRE_IGNORE_MERGES) ||
        ((v->pre_flags & IFL_PRE_NEWLINE_WORDS) && only_newlines(s, n))) {
        int32_t id = whole_word(v, w, s, n, &rc);
        if (rc < 0)
            return rc;
        if (id >= 0) {
            ifl_tok_out_push(out, id);
            return 0;
        }
    }
    if ((rc = grow((void **)&w->sym, &w->sym_cap, n, sizeof(*w->sym))) < 0)
        return rc;
    /* one symbol per byte (byte-level) or per UTF-8 character (raw) */
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = raw ? ifl_utf8_len_lead(s[i]) : 1;
        if (cl > n - i)
            cl = n - i;
        int32_t id = raw ? ifl_vocab_find(v, (const char *)s + i, cl) : v->byte_sym[s[i]];
        w->sym[ns] = (struct ifl_tok_sym){(int32_t)i, (int32_t)cl, ns - 1, ns + 1, id};
        ns++;
        i += cl;
    }
    w->sym[ns - 1].next = -1;
    w->heap.n = 0;
    for (int32_t i = 0; i + 1 < ns; i++)
        if ((rc = try_merge(v, w, i, i + 1)) < 0)
            return rc;
    while (w->heap.n) {
        struct ifl_tok_cand c = ifl_tok_heap_pop(&w->heap);
        int32_t left = ifl_tok_cand_left(&c);
        struct ifl_tok_sym *a = &w->sym[left];
        if (a->n == 0 || a->next < 0 || a->n + w->sym[a->next].n != c.size)
            continue; /* stale: one side changed since it was queued */
        struct ifl_tok_sym *b = &w->sym[a->next];
        a->n += b->n;
        a->id = c.id;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0)
            w->sym[b->next].prev = left;
        if ((rc = try_merge(v, w, a->prev, left)) < 0 || (rc = try_merge(v, w, left, a->next)) < 0)
            return rc;
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const struct ifl_tok_sym *y = &w->sym[i];
        if (y->id >= 0) {
            ifl_tok_out_push(out, y->id);
        } else if (raw) { /* a character without a token: its <0xNN> byte tokens */
            for (int32_t k = 0; k < y->n; k++)
                if (v->byte_tok[s[y->start + k]] >= 0)
                    ifl_tok_out_push(out, v->byte_tok[s[y->start + k]]);
        }
        /* (byte-level: a byte without a token, a broken vocabulary, is dropped) */
    }
    return 0;
}

/* text with each byte that does not start a valid UTF-8 character replaced
 * by U+FFFD; NULL (and *clean untouched) when text is valid already. */
static int sanitize(const char *text, size_t len, char **clean, size_t *clean_len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, cl;
    while (i < len && ifl_utf8_check(s + i, len - i, &cl) == IFL_UTF8_OK)
        i += cl;
    if (i == len)
        return 0;
    char *o = malloc(3 * len);
    if (!o)
        return IFL_ENOMEM;
    memcpy(o, text, i);
    size_t w = i;
    while (i < len) {
        if (ifl_utf8_check(s + i, len - i, &cl) == IFL_UTF8_OK) {
            memcpy(o + w, s + i, cl);
            w += cl;
            i += cl;
        } else {
            memcpy(o + w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    *clean = o;
    *clean_len = w;
    return 0;
}

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

/* text with every space written as U+2581, in a new buffer. */
static int escape_spaces(const char *text, size_t len, char **esc, size_t *esc_len)
{
    char *o = malloc(3 * len + 1);
    if (!o)
        return IFL_ENOMEM;
    size_t w = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(o + w, SPACE_MARK, 3);
            w += 3;
        } else {
            o[w++] = text[i];
        }
    }
    *esc = o;
    *esc_len = w;
    return 0;
}

int ifl_vocab_bpe_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out)
{
    char *clean = NULL, *esc = NULL;
    size_t clean_len = 0;
    struct ifl_pieces pa = {0}, pb = {0};
    struct bpe_work w = {0};
    int rc = sanitize(text, len, &clean, &clean_len);
    if (rc < 0)
        goto done;
    if (clean) {
        text = clean;
        len = clean_len;
    }
    if (v->pre_flags & IFL_PRE_ESCAPE_WS) {
        if ((rc = escape_spaces(text, len, &esc, &len)) < 0)
            goto done;
        text = esc;
    }
    if ((rc = ifl_pretok_split(v, text, len, &pa, &pb)) < 0)
        goto done;
    for (size_t i = 0; i < pa.n; i++)
        if ((rc = bpe_word(v, &w, (const unsigned char *)text + pa.a[i].off, pa.a[i].len, out)) < 0)
            goto done;
    rc = 0;
done:
    free(clean);
    free(esc);
    free(pa.a);
    free(pb.a);
    free(w.sym);
    free(w.enc);
    free(w.heap.a);
    return rc;
}
