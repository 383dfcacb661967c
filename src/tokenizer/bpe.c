/*
 * Byte-level BPE (tokenizer.ggml.model = "gpt2"): GPT-2's byte alphabet, the
 * pre-tokenizer regexes named by tokenizer.ggml.pre, and rank-ordered merges.
 *
 * A raw-text fragment is cut into pre-tokens by one or more regexes applied
 * in sequence (each cuts the pieces of the previous one; matches and the gaps
 * between them both become pieces, like Hugging Face's Split "isolated"
 * behaviour and llama.cpp's unicode_regex_split). Each pre-token starts as
 * one symbol per byte (the token of that byte's alphabet character) and the
 * adjacent pair with the lowest merge rank is merged until none is left
 * (leftmost first on ties), through a heap of candidates: O(n log n).
 *
 * Regexes run on PCRE2 in UTF + UCP mode. \s and \S are spelled out as the
 * Unicode White_Space set, which is what the reference engines (Oniguruma,
 * Rust regex) use; PCRE2's own \s also takes U+180E. Input that is not valid
 * UTF-8 gets one U+FFFD per byte that does not start a valid character, as
 * llama.cpp's unicode_cpts_from_utf8 does (it is not lossless, but
 * deterministic and safe).
 *
 * Patterns are those published in the models' tokenizer.json files and in
 * llama.cpp's llama-vocab.cpp for each pre-tokenizer name; the code is ours.
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

/* ---- pre-tokenizers ---- */

/* Unicode White_Space, the members of \s in the reference engines. */
#define WS                                                                                         \
    "\\t-\\r "                                                                                     \
    "\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define S_ "[" WS "]"
#define NS_ "[^" WS "]"
#define NOT_SLN "[^" WS "\\p{L}\\p{N}]" /* [^\s\p{L}\p{N}] */

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
#define RE_GPT2                                                                                    \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" NOT_SLN "+|" S_ "+(?!" NS_ ")|" S_ "+"

/* Llama 3 and Qwen2 differ only in how many digits make one piece:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
#define RE_LLAMA3_LIKE(digits)                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" digits "| ?" NOT_SLN       \
    "+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"

struct pre_def {
    const char *names; /* space-separated tokenizer.ggml.pre values */
    const char *re[IFL_BPE_MAX_RE];
    int ignore_merges;
    int add_bos;
};

static const struct pre_def pre_defs[] = {
    /* llama.cpp's fallback for BPE vocabularies without a known pre-tokenizer */
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0},
    {"gpt-2 gpt2 phi-2 jina-es jina-de jina-v1-en jina-v2-es jina-v2-de jina-v2-code "
     "roberta-bpe gigachat mpt olmo",
     {RE_GPT2},
     0,
     0},
    {"llama-bpe llama3 llama-v3 falcon3", {RE_LLAMA3_LIKE("{1,3}")}, 1, 1},
    {"dbrx smaug-bpe", {RE_LLAMA3_LIKE("{1,3}")}, 0, 0},
    {"qwen2 deepseek-r1-qwen megrez", {RE_LLAMA3_LIKE("")}, 0, 0},
    {"starcoder refact command-r smollm codeshell exaone minerva-7b", {"\\p{N}", RE_GPT2}, 0, 0},
};

static const struct pre_def *find_pre(const char *pre, size_t len)
{
    for (size_t i = 0; i < sizeof(pre_defs) / sizeof(pre_defs[0]); i++) {
        const char *p = pre_defs[i].names;
        while (*p) {
            const char *e = strchr(p, ' ');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n == len && memcmp(p, pre, len) == 0)
                return &pre_defs[i];
            p += n;
            while (*p == ' ')
                p++;
        }
    }
    return NULL;
}

static int compile_pre(struct ifl_vocab *v, const struct pre_def *d, char *err)
{
    for (int i = 0; i < IFL_BPE_MAX_RE && d->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            return ifl_err(err, IFL_EUNSUPPORTED, "tokenizer: pre-tokenizer regex %d at %zu: %s", i,
                           (size_t)eo, (const char *)msg);
        }
        /* JIT is an optimisation; without it the interpreter runs */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        v->re[v->n_re++] = re;
    }
    v->ignore_merges = d->ignore_merges;
    v->add_bos = d->add_bos;
    return 0;
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

int ifl_vocab_bpe_load(struct ifl_vocab *v, const struct ifl_gguf *g, char *err)
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
    const struct pre_def *d = find_pre(pre, pre_len);
    if (!d)
        return ifl_err(err, IFL_EUNSUPPORTED, "tokenizer: %s '%.*s' is not supported", key,
                       (int)(pre_len > 64 ? 64 : pre_len), pre);
    if ((rc = compile_pre(v, d, err)) < 0)
        return rc;

    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t n = ifl_utf8_encode(ifl_vocab_bpe_byte_cp((unsigned char)b), s);
        v->byte_sym[b] = ifl_vocab_find(v, s, n);
    }
    return load_merges(v, g, err);
}

void ifl_vocab_bpe_free(struct ifl_vocab *v)
{
    for (int i = 0; i < v->n_re; i++)
        pcre2_code_free(v->re[i]);
    v->n_re = 0;
    free(v->merge_keys);
    free(v->merge_rank);
    free(v->merge_id);
    v->merge_keys = NULL;
}

/* ---- tokenizing ---- */

struct piece {
    size_t off, len;
};

struct pieces {
    struct piece *a;
    size_t n, cap;
};

static int pieces_push(struct pieces *p, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct piece *a = realloc(p->a, cap * sizeof(*a));
        if (!a)
            return IFL_ENOMEM;
        p->a = a;
        p->cap = cap;
    }
    p->a[p->n++] = (struct piece){off, len};
    return 0;
}

/* Cuts text[off, off+len) by re into out (matches and gaps, in order). The
 * subject is the piece alone, so lookarounds do not see past it. */
static int split_piece(pcre2_code *re, pcre2_match_data *md, const char *text, size_t off,
                       size_t len, struct pieces *out)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
    size_t emitted = 0, pos = 0;
    while (pos < len) {
        int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return rc == PCRE2_ERROR_NOMEMORY ? IFL_ENOMEM : IFL_EINVAL;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* cannot happen with our patterns; step over one character */
            pos = ms + ifl_utf8_len_lead((unsigned char)text[off + ms]);
            continue;
        }
        int e;
        if ((e = pieces_push(out, off + emitted, ms - emitted)) < 0 ||
            (e = pieces_push(out, off + ms, me - ms)) < 0)
            return e;
        emitted = pos = me;
    }
    return pieces_push(out, off + emitted, len - emitted);
}

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

static int bpe_word(const struct ifl_vocab *v, struct bpe_work *w, const unsigned char *s, size_t n,
                    struct ifl_tok_out *out)
{
    int rc;
    if (v->ignore_merges) {
        if ((rc = grow((void **)&w->enc, &w->enc_cap, 2 * n, 1)) < 0)
            return rc;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += ifl_utf8_encode(ifl_vocab_bpe_byte_cp(s[i]), w->enc + m);
        int32_t id = ifl_vocab_find(v, w->enc, m);
        if (id >= 0) {
            ifl_tok_out_push(out, id);
            return 0;
        }
    }
    if ((rc = grow((void **)&w->sym, &w->sym_cap, n, sizeof(*w->sym))) < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        w->sym[i] = (struct ifl_tok_sym){(int32_t)i, 1, (int32_t)i - 1,
                                         i + 1 < n ? (int32_t)i + 1 : -1, v->byte_sym[s[i]]};
    w->heap.n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if ((rc = try_merge(v, w, (int32_t)i, (int32_t)i + 1)) < 0)
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
    for (int32_t i = 0; i >= 0; i = w->sym[i].next)
        if (w->sym[i].id >= 0) /* a byte without a token (a broken vocabulary) is dropped */
            ifl_tok_out_push(out, w->sym[i].id);
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

int ifl_vocab_bpe_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out)
{
    char *clean = NULL;
    size_t clean_len = 0;
    struct pieces pa = {0}, pb = {0};
    struct bpe_work w = {0};
    pcre2_match_data *md = NULL;
    int rc = sanitize(text, len, &clean, &clean_len);
    if (rc < 0)
        goto done;
    if (clean) {
        text = clean;
        len = clean_len;
    }
    if ((rc = pieces_push(&pa, 0, len)) < 0)
        goto done;
    md = pcre2_match_data_create(1, NULL);
    if (!md) {
        rc = IFL_ENOMEM;
        goto done;
    }
    for (int r = 0; r < v->n_re; r++) {
        pb.n = 0;
        for (size_t i = 0; i < pa.n; i++)
            if ((rc = split_piece(v->re[r], md, text, pa.a[i].off, pa.a[i].len, &pb)) < 0)
                goto done;
        struct pieces t = pa;
        pa = pb;
        pb = t;
    }
    for (size_t i = 0; i < pa.n; i++)
        if ((rc = bpe_word(v, &w, (const unsigned char *)text + pa.a[i].off, pa.a[i].len, out)) < 0)
            goto done;
    rc = 0;
done:
    pcre2_match_data_free(md);
    free(clean);
    free(pa.a);
    free(pb.a);
    free(w.sym);
    free(w.enc);
    free(w.heap.a);
    return rc;
}
