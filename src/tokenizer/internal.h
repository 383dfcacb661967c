/*
 * Private to src/tokenizer/: the vocabulary struct shared by vocab.c (load,
 * special tokens, pieces), spm.c, bpe.c (with pretok.c) and wpm.c (the
 * tokenizers), tokenize.c
 * (special-token partition and dispatch) and detok.c, plus small inline
 * helpers: UTF-8 decoding, a string hash, a growable id list and a binary
 * heap of candidate merges.
 *
 * Everything in struct ifl_vocab is written once by ifl_vocab_load and only
 * read afterwards, so any number of threads may tokenize at once.
 */
#ifndef IFL_TOKENIZER_INTERNAL_H
#define IFL_TOKENIZER_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    IFL_TOK_UNDEFINED = 0,
    IFL_TOK_NORMAL = 1,
    IFL_TOK_UNKNOWN = 2,
    IFL_TOK_CONTROL = 3,
    IFL_TOK_USER_DEFINED = 4,
    IFL_TOK_UNUSED = 5,
    IFL_TOK_BYTE = 6,
};

/* Per-token flag bits kept beside the type. */
enum {
    IFL_TOKF_EOG = 1,    /* ends generation */
    IFL_TOKF_HIDDEN = 2, /* piece is "" unless show_special */
};

/* Maximum number of chained pre-tokenizer regexes (deepseek-llm and chameleon use 6). */
#define IFL_BPE_MAX_RE 6

/* Pre-tokenizer flags (pretok.c). */
enum {
    IFL_PRE_IGNORE_MERGES = 1,     /* a whole pre-token found in the vocabulary is one token */
    IFL_PRE_ADD_BOS = 2,           /* add BOS unless the metadata says otherwise */
    IFL_PRE_NO_BOS = 4,            /* no BOS id unless the metadata names one */
    IFL_PRE_RAW = 8,               /* merges on raw UTF-8 characters, <0xNN> byte fallback */
    IFL_PRE_ESCAPE_WS = 16,        /* spaces become U+2581 before splitting */
    IFL_PRE_NEWLINE_WORDS = 32,    /* a run of newlines that is a token stays one */
    IFL_PRE_FORCE_BOS = 64,        /* add BOS even when the metadata says not to */
    IFL_PRE_MERGES_OPTIONAL = 128, /* a vocabulary without merges is accepted */
};

/* A pre-tokenizer: the tokenizer.ggml.pre names it answers to (space-
 * separated), its regexes (applied in sequence, NULL-terminated when fewer
 * than IFL_BPE_MAX_RE) and IFL_PRE_* flags. */
struct ifl_pretok {
    const char *names;
    const char *re[IFL_BPE_MAX_RE];
    unsigned flags;
};

struct ifl_vocab {
    enum ifl_vocab_kind kind;
    int32_t n_tokens;

    /* Token texts as stored in the file, each NUL-terminated in text_blob:
     * token i is text_blob[text_off[i] .. text_off[i+1]-1) (the -1 drops the NUL). */
    char *text_blob;
    uint32_t *text_off; /* (n_tokens + 1) */
    float *scores;      /* (n_tokens), 0 when the file has none */
    uint8_t *type;      /* (n_tokens), IFL_TOK_* */
    uint8_t *flags;     /* (n_tokens), IFL_TOKF_* */

    /* What each token shows with show_special = 1 (decoded bytes);
     * tokens flagged HIDDEN show "" otherwise. Same layout as the texts. */
    char *piece_blob;
    uint32_t *piece_off; /* (n_tokens + 1) */
    size_t max_piece;
    size_t max_cover; /* ifl_vocab_max_cover: input bytes one id covers at most (0: no bound) */

    /* Open-addressing table text -> id; slots hold an id or -1. */
    int32_t *tok_slots; /* (tok_mask + 1) */
    uint32_t tok_mask;

    /* Control, user-defined and unknown tokens, longest text first, for the
     * special-token partition of the input. */
    int32_t *special; /* (n_special) */
    int32_t n_special;

    int32_t bos, eos, eot, eom, pad, unk;
    int add_bos, add_eos;

    /* SPM */
    int add_space_prefix;
    int32_t byte_tok[256]; /* <0xNN> token of each byte, -1 if absent */

    /* BPE */
    int32_t byte_sym[256]; /* token of the one-character byte-level text of each byte */
    uint64_t *merge_keys;  /* (merge_mask + 1): left << 32 | right, UINT64_MAX when empty */
    int32_t *merge_rank;   /* (merge_mask + 1) */
    int32_t *merge_id;     /* (merge_mask + 1): id of the merged text */
    uint32_t merge_mask;
    unsigned pre_flags;       /* IFL_PRE_* */
    void *re[IFL_BPE_MAX_RE]; /* pcre2_code *, applied in sequence */
    int n_re;

    /* WordPiece (wpm.c) */
    int32_t sep; /* appended by add_special, -1 if none */
    int add_sep;
    int wpm_lowercase, wpm_strip_accents;
    size_t max_text; /* longest stored token text, in bytes */

    /* Unigram (ugm.c) */
    unsigned char *charsmap; /* tokenizer.ggml.precompiled_charsmap, NULL if none */
    size_t charsmap_len;
    const uint32_t *xcda; /* (n_xcda) inside charsmap: the normalization trie */
    size_t n_xcda;
    const char *repl; /* NUL-terminated replacements after it */
    size_t repl_len;
    double ugm_unk_score; /* lowest normal score minus 10 */
    int has_user;         /* some token is user-defined */
    int remove_extra_ws;
};

/* ---- ids written to the caller's buffer, counting past its end ---- */

struct ifl_tok_out {
    int32_t *ids;
    int64_t cap;
    int64_t n; /* full count; ids beyond cap are counted, not written */
};

static inline void ifl_tok_out_push(struct ifl_tok_out *o, int32_t id)
{
    if (o->n < o->cap)
        o->ids[o->n] = id;
    o->n++;
}

/* ---- hashing ---- */

/* FNV-1a, continued from h so a text split in two slices hashes the same. */
static inline uint64_t ifl_tok_hash(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define IFL_TOK_HASH_INIT 0xcbf29ce484222325ull

static inline uint64_t ifl_tok_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* The id whose text is a followed by b (b may be empty), or -1. */
int32_t ifl_vocab_find2(const struct ifl_vocab *v, const char *a, size_t na, const char *b,
                        size_t nb);

/* The id whose text is text[0, len), h being ifl_tok_hash of it; -1 if none. */
int32_t ifl_vocab_find_h(const struct ifl_vocab *v, uint64_t h, const char *text, size_t len);

static inline const char *ifl_vocab_text_(const struct ifl_vocab *v, int32_t id, size_t *len)
{
    *len = v->text_off[id + 1] - v->text_off[id] - 1;
    return v->text_blob + v->text_off[id];
}

/* ---- merge candidates: a binary max-heap ---- */

/* A candidate merge of symbol `left` with its right neighbour, whose texts
 * were `size` bytes together when it was queued. It is stale once either
 * side changed: the left one merged away (n == 0) or grew (then its new
 * neighbour makes the sum differ), or the right one grew. Ordered by key,
 * higher first (SPM: the merged token's score; BPE: minus the merge rank),
 * then leftmost first; both live in `order` so one compare decides. */
struct ifl_tok_cand {
    uint64_t order; /* (key + 2^31) << 32 | ~left */
    int32_t size;
    int32_t id; /* the merged token */
};

struct ifl_tok_heap {
    struct ifl_tok_cand *a;
    size_t n, cap;
};

static inline struct ifl_tok_cand ifl_tok_cand_make(int32_t key, int32_t left, int32_t size,
                                                    int32_t id)
{
    struct ifl_tok_cand c;
    c.order = (uint64_t)((uint32_t)key ^ 0x80000000u) << 32 | (uint32_t) ~(uint32_t)left;
    c.size = size;
    c.id = id;
    return c;
}

static inline int32_t ifl_tok_cand_left(const struct ifl_tok_cand *c)
{
    return (int32_t) ~(uint32_t)c->order;
}

/* A key ordered like the float (-0 equals 0; scores are never NaN in practice). */
static inline int32_t ifl_tok_score_key(float f)
{
    f += 0.0f;
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u;
    return (int32_t)(u ^ 0x80000000u);
}

static inline int ifl_tok_cand_before(const struct ifl_tok_cand *x, const struct ifl_tok_cand *y)
{
    return x->order > y->order;
}

static inline int ifl_tok_heap_push(struct ifl_tok_heap *h, struct ifl_tok_cand c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct ifl_tok_cand *a = realloc(h->a, cap * sizeof(*a));
        if (!a)
            return IFL_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ifl_tok_cand_before(&c, &h->a[p]))
            break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = c;
    return 0;
}

static inline struct ifl_tok_cand ifl_tok_heap_pop(struct ifl_tok_heap *h)
{
    struct ifl_tok_cand top = h->a[0];
    struct ifl_tok_cand last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        const struct ifl_tok_cand *bc = &last;
        if (l < n && ifl_tok_cand_before(&h->a[l], bc)) {
            best = l;
            bc = &h->a[l];
        }
        if (l + 1 < n && ifl_tok_cand_before(&h->a[l + 1], bc))
            best = l + 1;
        if (best == i)
            break;
        h->a[i] = h->a[best];
        i = best;
    }
    if (n > 0)
        h->a[i] = last;
    return top;
}

/* A symbol of the merge loops: a slice of the word, linked to its neighbours. */
struct ifl_tok_sym {
    int32_t start, n; /* byte slice; n == 0 once merged into its left neighbour */
    int32_t prev, next;
    int32_t id; /* BPE: its token (-1 if none) */
};

/* ---- the two tokenizers, on one raw-text fragment ---- */

/* SPM: text is the fragment as given; prefix_space adds the leading "▁". */
int ifl_vocab_spm_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           int prefix_space, struct ifl_tok_out *out);
int ifl_vocab_bpe_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out);

/* WordPiece (wpm.c): normalizes, splits at whitespace and punctuation and
 * takes the longest vocabulary match from the left in each word. */
int ifl_vocab_wpm_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out);

/* Unigram (ugm.c): the charsmap and scores at load, Viterbi when tokenizing. */
int ifl_vocab_ugm_load(struct ifl_vocab *v, const struct ifl_gguf *g, char *err);
int ifl_vocab_ugm_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out);

/* ---- pre-tokenizers (pretok.c) ---- */

const struct ifl_pretok *ifl_pretok_find(const char *name, size_t len);
size_t ifl_pretok_count(void);
const struct ifl_pretok *ifl_pretok_at(size_t i);
/* Compiles d's regexes into v->re and sets v->pre_flags. */
int ifl_pretok_compile(struct ifl_vocab *v, const struct ifl_pretok *d, char *err);
void ifl_pretok_free(struct ifl_vocab *v);

struct ifl_piece {
    size_t off, len;
};
struct ifl_pieces {
    struct ifl_piece *a;
    size_t n, cap;
};
/* Cuts text into pre-tokens by v's regexes; they end in *pa (*pb is scratch;
 * the caller frees both arrays). */
int ifl_pretok_split(const struct ifl_vocab *v, const char *text, size_t len, struct ifl_pieces *pa,
                     struct ifl_pieces *pb);

/* BPE set-up during load (bpe.c): the pre-tokenizer named by tokenizer.ggml.pre
 * (and its add_bos default), the byte alphabet's tokens and the merges. Needs
 * the texts and the text table; ifl_vocab_bpe_free releases what it made. */
struct ifl_gguf;
int ifl_vocab_bpe_load(struct ifl_vocab *v, const struct ifl_gguf *g, const char *forced_pre,
                       char *err);
void ifl_vocab_bpe_free(struct ifl_vocab *v);

/* The GPT-2 byte <-> code point alphabet (bpe.c). */
uint32_t ifl_vocab_bpe_byte_cp(unsigned char b);
int ifl_vocab_bpe_cp_byte(uint32_t cp); /* -1 for code points outside the alphabet */

/* Piece view (detok.c and vocab.c): the bytes token id shows. */
static inline const char *ifl_vocab_piece_view(const struct ifl_vocab *v, int32_t id,
                                               int show_special, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) {
        *len = 0;
        return "";
    }
    if (!show_special && (v->flags[id] & IFL_TOKF_HIDDEN)) {
        *len = 0;
        return "";
    }
    *len = v->piece_off[id + 1] - v->piece_off[id];
    return v->piece_blob + v->piece_off[id];
}

#endif
