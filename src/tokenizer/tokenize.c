/*
 * ifl_tokenize: cuts the text around special-token texts, then hands each
 * raw fragment to the SPM, BPE, WordPiece or Unigram tokenizer, with BOS/EOS (and
 * WordPiece's SEP) around the result.
 *
 * The partition follows llama.cpp's tokenizer_st_partition: special tokens
 * are taken longest text first, and each one's occurrences are cut out of
 * the raw fragments left by the longer ones. Control and unknown tokens are
 * cut only when parse_special is set; user-defined tokens (Qwen's <think>,
 * ...) always are, as in llama.cpp and Hugging Face, where such "added
 * tokens" are never split by the model. For SPM a raw fragment gets the
 * "▁" prefix when it opens the text or follows a special token.
 */
#include "tokenizer/internal.h"

struct frag {
    size_t off, len; /* raw text, when tok < 0 */
    int32_t tok;
    int32_t next; /* index of the next fragment, -1 at the end */
};

struct frags {
    struct frag *a;
    int32_t n, cap;
};

static int32_t frag_new(struct frags *f, size_t off, size_t len, int32_t tok, int32_t next)
{
    if (f->n == f->cap) {
        if (f->cap > INT32_MAX / 4)
            return IFL_ENOMEM;
        int32_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *a = realloc(f->a, (size_t)cap * sizeof(*a));
        if (!a)
            return IFL_ENOMEM;
        f->a = a;
        f->cap = cap;
    }
    f->a[f->n] = (struct frag){off, len, tok, next};
    return f->n++;
}

/* Cuts every occurrence of token id's text out of the raw fragments. */
static int cut_token(const struct ifl_vocab *v, const char *text, struct frags *f, int32_t id)
{
    size_t tl;
    const char *t = ifl_vocab_text_(v, id, &tl);
    for (int32_t i = 0; i >= 0; i = f->a[i].next) {
        if (f->a[i].tok >= 0 || f->a[i].len < tl)
            continue;
        const char *base = text + f->a[i].off;
        const char *hit = memmem(base, f->a[i].len, t, tl);
        if (!hit)
            continue;
        size_t before = (size_t)(hit - base);
        size_t after = f->a[i].len - before - tl;
        int32_t rest = -1;
        if (after > 0) {
            rest = frag_new(f, f->a[i].off + before + tl, after, -1, f->a[i].next);
            if (rest < 0)
                return rest;
        }
        int32_t tk = frag_new(f, 0, 0, id, after > 0 ? rest : f->a[i].next);
        if (tk < 0)
            return tk;
        /* fragment i keeps the text before the hit (possibly none) and is
         * followed by the token; the loop goes on with the token, then rest */
        f->a[i].len = before;
        f->a[i].next = tk;
    }
    return 0;
}

int ifl_tokenize(const struct ifl_vocab *v, const char *text, size_t len, int add_special,
                 int parse_special, int32_t *ids, int64_t cap, int64_t *n_out)
{
    struct ifl_tok_out out = {ids, cap < 0 ? 0 : cap, 0};
    struct frags f = {0};
    int rc = 0;
    if (n_out)
        *n_out = 0;
    /* symbol indices are int32: the SPM text grows up to 3x when escaped */
    if (cap < 0 || (cap > 0 && !ids) || (len > 0 && !text) || len > IFL_TOKENIZE_MAX_LEN)
        return IFL_EINVAL;

    if (add_special && v->add_bos)
        ifl_tok_out_push(&out, v->bos);
    if (len > 0) {
        if ((rc = frag_new(&f, 0, len, -1, -1)) < 0)
            goto done;
        for (int32_t k = 0; k < v->n_special; k++) {
            int32_t id = v->special[k];
            int type = v->type[id];
            if (!parse_special && (type == IFL_TOK_CONTROL || type == IFL_TOK_UNKNOWN))
                continue;
            if ((rc = cut_token(v, text, &f, id)) < 0)
                goto done;
        }
        int prev_special = 1;
        for (int32_t i = 0; i >= 0; i = f.a[i].next) {
            const struct frag *fr = &f.a[i];
            if (fr->tok >= 0) {
                ifl_tok_out_push(&out, fr->tok);
                prev_special = 1;
                continue;
            }
            if (fr->len == 0)
                continue;
            if (v->kind == IFL_VOCAB_SPM)
                rc = ifl_vocab_spm_tokenize(v, text + fr->off, fr->len,
                                            v->add_space_prefix && prev_special, &out);
            else if (v->kind == IFL_VOCAB_WPM)
                rc = ifl_vocab_wpm_tokenize(v, text + fr->off, fr->len, &out);
            else if (v->kind == IFL_VOCAB_UGM)
                rc = ifl_vocab_ugm_tokenize(v, text + fr->off, fr->len, &out);
            else
                rc = ifl_vocab_bpe_tokenize(v, text + fr->off, fr->len, &out);
            if (rc < 0)
                goto done;
            prev_special = 0;
        }
    }
    if (add_special && v->add_eos)
        ifl_tok_out_push(&out, v->eos);
    if (add_special && v->add_sep)
        ifl_tok_out_push(&out, v->sep);
    rc = out.n > out.cap ? IFL_EFULL : 0;
done:
    free(f.a);
    if (n_out)
        *n_out = out.n;
    return rc;
}

int ifl_tokenize_alloc(const struct ifl_vocab *v, const char *text, size_t len, int add_special,
                       int parse_special, int32_t **ids, int64_t *n_out)
{
    *ids = NULL;
    *n_out = 0;
    if (len > IFL_TOKENIZE_MAX_LEN)
        return IFL_EINVAL;
    int64_t cap = (int64_t)len + 8;
    int32_t *p = malloc(sizeof(int32_t) * (size_t)cap);
    if (!p)
        return IFL_ENOMEM;
    int rc = ifl_tokenize(v, text, len, add_special, parse_special, p, cap, n_out);
    if (rc == IFL_EFULL) {
        int32_t *q = realloc(p, sizeof(int32_t) * (size_t)*n_out);
        rc = q ? ifl_tokenize(v, text, len, add_special, parse_special, q, *n_out, n_out)
               : IFL_ENOMEM;
        p = q ? q : p;
    }
    if (rc) {
        free(p);
        *n_out = 0;
        return rc;
    }
    *ids = p;
    return 0;
}
