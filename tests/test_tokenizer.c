/*
 * Tokenizer tests: llama.cpp's test vectors for four vocabularies (SPM,
 * GPT-2, Llama 3, Qwen2), stories260K prompts, special-token parsing,
 * detokenizing round trips, the streaming detokenizer on split UTF-8,
 * random-byte robustness, small output buffers, and bad metadata.
 * Each large vocabulary is loaded once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/gguf.h"
#include "t.h"
#include "tokenizer/tokenizer.h"

/* ---- helpers ---- */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

static struct ifl_vocab *load_vocab(const char *rel)
{
    char path[1024], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof(path), "%s/models/%s", t_shared(), rel);
    struct ifl_gguf *g = NULL;
    int rc = ifl_gguf_open(&g, path, err);
    if (rc < 0) {
        fprintf(stderr, "  cannot open %s: %s\n", path, err);
        return NULL;
    }
    struct ifl_vocab *v = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = ifl_vocab_load(&v, g, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ifl_gguf_free(g);
    if (rc < 0) {
        fprintf(stderr, "  cannot load vocab %s: %s\n", path, err);
        return NULL;
    }
    fprintf(stderr, "  loaded %s: %d tokens in %.0f ms\n", rel, ifl_vocab_n_tokens(v),
            (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    return v;
}

/* Tokenizes into a fresh array (*n ids); NULL on failure. */
static int32_t *tokenize(const struct ifl_vocab *v, const char *s, size_t len, int add_special,
                         int parse_special, int64_t *n)
{
    int64_t cap = (int64_t)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof(*ids));
    int rc = ifl_tokenize(v, s, len, add_special, parse_special, ids, cap, n);
    if (rc == IFL_EFULL) {
        cap = *n;
        free(ids);
        ids = malloc((size_t)cap * sizeof(*ids) + 1);
        rc = ifl_tokenize(v, s, len, add_special, parse_special, ids, cap, n);
    }
    if (rc < 0) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* Concatenated pieces of ids (malloc'd, NUL-terminated). */
static char *detokenize(const struct ifl_vocab *v, const int32_t *ids, int64_t n, int show_special,
                        size_t *len)
{
    size_t cap = 64, w = 0;
    char *out = malloc(cap);
    for (int64_t i = 0; i < n; i++) {
        size_t need = ifl_vocab_piece(v, ids[i], show_special, NULL, 0);
        while (w + need + 1 > cap) {
            cap *= 2;
            out = realloc(out, cap);
        }
        CHECK_EQ(ifl_vocab_piece(v, ids[i], show_special, out + w, need), need);
        w += need;
    }
    out[w] = 0;
    *len = w;
    return out;
}

static void print_escaped(const char *s, size_t n)
{
    fputc('"', stderr);
    for (size_t i = 0; i < n && i < 300; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stderr);
        else if (c == '\t')
            fputs("\\t", stderr);
        else if (c < 0x20 || c == 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
    fputc('"', stderr);
}

static void print_ids(const char *label, const int32_t *ids, int64_t n)
{
    fprintf(stderr, "    %s:", label);
    for (int64_t i = 0; i < n && i < 64; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* ---- the shared vocabularies ---- */

enum { V_SPM, V_GPT2, V_LLAMA3, V_QWEN2, V_STORIES, V_COUNT };
static const char *const vocab_files[V_COUNT] = {
    "vocab/ggml-vocab-llama-spm.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",
    "vocab/ggml-vocab-llama-bpe.gguf",
    "vocab/ggml-vocab-qwen2.gguf",
    "stories260K.gguf",
};
static struct ifl_vocab *vocabs[V_COUNT];

/* ---- test vectors ---- */

static const char SEP[] = "\n__ggml_vocab_test__\n";

struct vec_case {
    const char *text;
    size_t len;
    int32_t *ids;
    int64_t n;
};

struct vec_set {
    char *inp, *outp;
    struct vec_case *c;
    int n;
};

/* Splits .inp by the separator and parses .out lines; 0 on success. */
static int load_vectors(int which, struct vec_set *s)
{
    char path[1024];
    size_t ni, no;
    memset(s, 0, sizeof(*s));
    snprintf(path, sizeof(path), "%s/models/%s.inp", t_shared(), vocab_files[which]);
    s->inp = read_all(path, &ni);
    snprintf(path, sizeof(path), "%s/models/%s.out", t_shared(), vocab_files[which]);
    s->outp = read_all(path, &no);
    if (!s->inp || !s->outp)
        return -1;
    s->c = calloc(ni + 1, sizeof(*s->c));
    size_t sl = strlen(SEP);
    char *p = s->inp, *end = s->inp + ni;
    while (p < end) {
        char *hit = memmem(p, (size_t)(end - p), SEP, sl);
        size_t len = hit ? (size_t)(hit - p) : (size_t)(end - p);
        s->c[s->n].text = p;
        s->c[s->n].len = len;
        s->n++;
        p = hit ? hit + sl : end;
    }
    /* .out: one line per case */
    char *q = s->outp;
    for (int i = 0; i < s->n; i++) {
        if (q >= s->outp + no)
            return -1;
        char *nl = strchr(q, '\n');
        if (nl)
            *nl = 0;
        s->c[i].ids = malloc((strlen(q) / 2 + 2) * sizeof(int32_t));
        char *e;
        for (;;) {
            long x = strtol(q, &e, 10);
            if (e == q)
                break;
            s->c[i].ids[s->c[i].n++] = (int32_t)x;
            q = e;
        }
        q = nl ? nl + 1 : s->outp + no;
    }
    return 0;
}

static void free_vectors(struct vec_set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->c[i].ids);
    free(s->c);
    free(s->inp);
    free(s->outp);
}

static void run_vectors(int which)
{
    const struct ifl_vocab *v = vocabs[which];
    CHECK_MSG(v, "vocab %s not loaded", vocab_files[which]);
    if (!v)
        return;
    struct vec_set s;
    CHECK_MSG(load_vectors(which, &s) == 0, "cannot read vectors of %s", vocab_files[which]);
    int pass = 0;
    for (int i = 0; i < s.n; i++) {
        int64_t n = 0;
        int32_t *ids = tokenize(v, s.c[i].text, s.c[i].len, 0, 0, &n);
        int ok = ids && n == s.c[i].n &&
                 (n == 0 || memcmp(ids, s.c[i].ids, (size_t)n * sizeof(*ids)) == 0);
        if (ok) {
            pass++;
        } else {
            T_FAIL_("%s case %d mismatch", vocab_files[which], i);
            fputs("    input: ", stderr);
            print_escaped(s.c[i].text, s.c[i].len);
            fputc('\n', stderr);
            print_ids("want", s.c[i].ids, s.c[i].n);
            if (ids)
                print_ids("got ", ids, n);
        }
        free(ids);
    }
    fprintf(stderr, "  %s: %d/%d cases pass\n", vocab_files[which], pass, s.n);
    CHECK(s.n > 30);
    free_vectors(&s);
}

static void test_vectors_spm(void)
{
    run_vectors(V_SPM);
}
static void test_vectors_gpt2(void)
{
    run_vectors(V_GPT2);
}
static void test_vectors_llama3(void)
{
    run_vectors(V_LLAMA3);
}
static void test_vectors_qwen2(void)
{
    run_vectors(V_QWEN2);
}

/* ---- round trips ---- */

static void run_roundtrip(int which)
{
    const struct ifl_vocab *v = vocabs[which];
    if (!v)
        return;
    struct vec_set s;
    if (load_vectors(which, &s) != 0) {
        CHECK(0);
        return;
    }
    int spm = ifl_vocab_kind(v) == IFL_VOCAB_SPM;
    for (int i = 0; i < s.n; i++) {
        int64_t n = 0;
        int32_t *ids = tokenize(v, s.c[i].text, s.c[i].len, 0, 0, &n);
        size_t len;
        char *back = detokenize(v, ids, n, 0, &len);
        /* SPM adds one leading space, as llama.cpp does */
        const char *want = s.c[i].text;
        size_t want_len = s.c[i].len;
        int ok;
        if (spm && want_len > 0)
            ok = len == want_len + 1 && back[0] == ' ' && memcmp(back + 1, want, want_len) == 0;
        else
            ok = len == want_len && memcmp(back, want, want_len) == 0;
        if (!ok) {
            T_FAIL_("%s case %d does not round-trip", vocab_files[which], i);
            fputs("    want: ", stderr);
            print_escaped(want, want_len);
            fputs("\n    got:  ", stderr);
            print_escaped(back, len);
            fputc('\n', stderr);
        }
        free(back);
        free(ids);
    }
    free_vectors(&s);
}

static void test_roundtrip(void)
{
    for (int w = V_SPM; w <= V_QWEN2; w++)
        run_roundtrip(w);
    /* byte-level BPE is lossless on any valid UTF-8, NULs and controls included */
    static const char odd[] = "a\0b\x01\x7f \xc2\xa0\xc2\xad\xe2\x80\xa8 \xf0\x9f\xa6\x99!";
    for (int w = V_GPT2; w <= V_QWEN2; w++) {
        if (!vocabs[w])
            continue;
        int64_t n;
        int32_t *ids = tokenize(vocabs[w], odd, sizeof(odd) - 1, 0, 0, &n);
        size_t len;
        char *back = detokenize(vocabs[w], ids, n, 0, &len);
        CHECK_EQ(len, sizeof(odd) - 1);
        CHECK(memcmp(back, odd, sizeof(odd) - 1) == 0);
        free(back);
        free(ids);
    }
}

/* ---- stories260K ---- */

static void expect_ids(const struct ifl_vocab *v, const char *text, int add_special,
                       int parse_special, const int32_t *want, int64_t n_want)
{
    int64_t n = 0;
    int32_t *ids = tokenize(v, text, strlen(text), add_special, parse_special, &n);
    int ok = ids && n == n_want && memcmp(ids, want, (size_t)n * sizeof(*ids)) == 0;
    CHECK_MSG(ok, "tokens of \"%s\" (add_special %d, parse_special %d) differ", text, add_special,
              parse_special);
    if (!ok) {
        print_ids("want", want, n_want);
        if (ids)
            print_ids("got ", ids, n);
    }
    free(ids);
}

static void test_stories(void)
{
    const struct ifl_vocab *v = vocabs[V_STORIES];
    CHECK(v);
    if (!v)
        return;
    CHECK_EQ(ifl_vocab_kind(v), IFL_VOCAB_SPM);
    CHECK_EQ(ifl_vocab_n_tokens(v), 512);
    CHECK_EQ(ifl_vocab_bos(v), 1);
    CHECK_EQ(ifl_vocab_eos(v), 2);
    CHECK_EQ(ifl_vocab_pad(v), -1); /* 0xFFFFFFFF in the file */
    CHECK(ifl_vocab_add_bos(v));
    CHECK(!ifl_vocab_add_eos(v));
    static const int32_t a[] = {1, 403, 407, 261, 378};
    expect_ids(v, "Once upon a time", 1, 0, a, 5);
    static const int32_t b[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 352, 414, 430, 309};
    expect_ids(v, "Once upon a time, there was a little robot", 1, 0, b, 14);
    expect_ids(v, "Once upon a time", 0, 0, a + 1, 4);
    expect_ids(v, "", 1, 0, a, 1); /* empty text: just BOS */
    expect_ids(v, "", 0, 0, a, 0);
    /* a character outside the vocabulary falls back to bytes: 你 = E4 BD A0 */
    int64_t n;
    int32_t *ids = tokenize(v, "\xe4\xbd\xa0", 3, 0, 0, &n);
    CHECK(ids && n >= 3);
    if (ids && n >= 3) {
        CHECK_EQ(ids[n - 3], 3 + 0xE4);
        CHECK_EQ(ids[n - 2], 3 + 0xBD);
        CHECK_EQ(ids[n - 1], 3 + 0xA0);
    }
    free(ids);
}

/* ---- special tokens ---- */

static void test_special(void)
{
    const struct ifl_vocab *v = vocabs[V_LLAMA3];
    if (v) {
        int32_t bot = ifl_vocab_find(v, "<|begin_of_text|>", 17);
        CHECK_EQ(bot, 128000);
        CHECK_EQ(ifl_vocab_bos(v), 128000);
        CHECK_EQ(ifl_vocab_eos(v), 128001);
        CHECK_EQ(ifl_vocab_eot(v), 128009);
        CHECK(ifl_vocab_add_bos(v));
        CHECK(ifl_vocab_is_control(v, 128000));
        CHECK(!ifl_vocab_is_control(v, 15339));
        CHECK(ifl_vocab_is_eog(v, 128001));
        CHECK(ifl_vocab_is_eog(v, 128009));
        int32_t eom = ifl_vocab_find(v, "<|eom_id|>", 10); /* Llama 3.1 on */
        CHECK(eom < 0 || ifl_vocab_is_eog(v, eom));
        CHECK(!ifl_vocab_is_eog(v, 128000));
        CHECK(!ifl_vocab_is_eog(v, 15339));
        CHECK(!ifl_vocab_is_eog(v, -1));
        CHECK(!ifl_vocab_is_eog(v, 1 << 30));

        const char *text = "<|begin_of_text|>hello";
        int64_t n1, n2, n3;
        int32_t *on = tokenize(v, text, strlen(text), 0, 1, &n1);
        int32_t *off = tokenize(v, text, strlen(text), 0, 0, &n2);
        int32_t *hello = tokenize(v, "hello", 5, 0, 0, &n3);
        CHECK(on && off && hello);
        if (on && off && hello) {
            CHECK_EQ(n1, 1 + n3);
            CHECK_EQ(on[0], 128000);
            CHECK(n1 == 1 + n3 && memcmp(on + 1, hello, (size_t)n3 * sizeof(int32_t)) == 0);
            CHECK(n2 > n1); /* spelled out as plain text */
            for (int64_t i = 0; i < n2; i++)
                CHECK(off[i] < 128000);
            size_t len;
            char *back = detokenize(v, off, n2, 0, &len);
            CHECK(len == strlen(text) && memcmp(back, text, len) == 0);
            free(back);
            /* the control token hides unless show_special */
            back = detokenize(v, on, n1, 0, &len);
            CHECK_STR(back, "hello");
            free(back);
            back = detokenize(v, on, n1, 1, &len);
            CHECK_STR(back, text);
            free(back);
        }
        free(on);
        free(off);
        free(hello);

        /* add_special prepends BOS (metadata add_bos_token = true), once */
        static const int32_t hi[] = {128000, 128006, 882, 128007};
        expect_ids(v, "<|start_header_id|>user<|end_header_id|>", 1, 1, hi, 4);
        /* special text in the middle of words; longer tokens win */
        int64_t n;
        int32_t *ids = tokenize(v, "a<|eot_id|><|eot_id|>b", 22, 0, 1, &n);
        CHECK(ids && n == 4 && ids[1] == 128009 && ids[2] == 128009);
        free(ids);
    }

    v = vocabs[V_QWEN2];
    if (v) {
        CHECK_EQ(ifl_vocab_eos(v), 151645);
        CHECK_EQ(ifl_vocab_pad(v), 151643);
        CHECK_EQ(ifl_vocab_eot(v), 151645); /* <|im_end|> */
        CHECK(!ifl_vocab_add_bos(v));
        CHECK(ifl_vocab_is_eog(v, 151645));
        CHECK(ifl_vocab_is_eog(v, 151643)); /* <|endoftext|> */
        CHECK(!ifl_vocab_is_eog(v, 151644));
        int32_t im_start = ifl_vocab_find(v, "<|im_start|>", 12);
        CHECK_EQ(im_start, 151644);
        int64_t n;
        int32_t *ids = tokenize(v, "<|im_start|>user\nhi<|im_end|>", 29, 1, 1, &n);
        CHECK(ids && n >= 4 && ids[0] == 151644 && ids[n - 1] == 151645);
        free(ids);
        /* user-defined tokens are always whole (llama.cpp and HF agree) */
        int32_t think = ifl_vocab_find(v, "<think>", 7);
        CHECK_EQ(think, 151667);
        ids = tokenize(v, "x<think>y", 9, 0, 0, &n);
        CHECK(ids && n == 3 && ids[1] == think);
        free(ids);
        char buf[16];
        CHECK_EQ(ifl_vocab_piece(v, think, 0, buf, sizeof(buf)), 7);
        CHECK(memcmp(buf, "<think>", 7) == 0);
    }

    v = vocabs[V_SPM];
    if (v) {
        /* SPM: the text after a special token gets the "▁" prefix again */
        int64_t n1, n2;
        int32_t *a = tokenize(v, "<s>Hello", 8, 0, 1, &n1);
        int32_t *b = tokenize(v, "Hello", 5, 0, 0, &n2);
        CHECK(a && b && n1 == n2 + 1 && a[0] == 1);
        if (a && b && n1 == n2 + 1)
            CHECK(memcmp(a + 1, b, (size_t)n2 * sizeof(int32_t)) == 0);
        free(a);
        free(b);
        CHECK_EQ(ifl_vocab_eot(v), -1);
        CHECK(ifl_vocab_is_eog(v, 2));
        char buf[8];
        CHECK_EQ(ifl_vocab_piece(v, 1, 0, buf, sizeof(buf)), 0);
        CHECK_EQ(ifl_vocab_piece(v, 1, 1, buf, sizeof(buf)), 3);
        CHECK_EQ(ifl_vocab_piece(v, 3 + 0x0A, 0, buf, sizeof(buf)), 1);
        CHECK_EQ(buf[0], '\n');
        size_t len;
        CHECK_STR(ifl_vocab_text(v, 3 + 0x0A, &len), "<0x0A>");
        CHECK(ifl_vocab_text(v, 32000, &len) == NULL);
        CHECK_EQ(ifl_vocab_piece(v, -5, 1, buf, sizeof(buf)), 0);
    }

    v = vocabs[V_GPT2];
    if (v) {
        CHECK_EQ(ifl_vocab_bos(v), 50256);
        CHECK_EQ(ifl_vocab_eos(v), 50256);
        CHECK(!ifl_vocab_add_bos(v));
        CHECK(ifl_vocab_is_eog(v, 50256));
        int32_t the = ifl_vocab_find(v, "\xc4\xa0the", 5); /* "Ġthe" */
        CHECK(the >= 0);
        char buf[8];
        CHECK_EQ(ifl_vocab_piece(v, the, 0, buf, sizeof(buf)), 4);
        CHECK(memcmp(buf, " the", 4) == 0);
        CHECK_EQ(ifl_vocab_piece(v, the, 0, buf, 2), 4); /* count, even when short */
    }
}

/* ---- small output buffers ---- */

static void test_efull(void)
{
    const char *text = "Hello world, this is a test of small buffers.";
    for (int w = 0; w < V_COUNT; w++) {
        const struct ifl_vocab *v = vocabs[w];
        if (!v)
            continue;
        int64_t n_full;
        int32_t *full = tokenize(v, text, strlen(text), 1, 0, &n_full);
        CHECK(full && n_full > 2);
        if (!full)
            continue;
        int32_t buf[128];
        for (int64_t cap = 0; cap <= n_full; cap++) {
            int64_t n = -1;
            for (int i = 0; i < 128; i++)
                buf[i] = -7;
            int rc = ifl_tokenize(v, text, strlen(text), 1, 0, cap ? buf : NULL, cap, &n);
            CHECK_EQ(rc, cap < n_full ? IFL_EFULL : 0);
            CHECK_EQ(n, n_full);
            CHECK(memcmp(buf, full, (size_t)cap * sizeof(int32_t)) == 0);
            CHECK_EQ(buf[cap], -7); /* nothing written past cap */
        }
        int64_t n;
        CHECK_EQ(ifl_tokenize(v, text, 5, 0, 0, buf, -1, &n), IFL_EINVAL);
        /* refused before any byte is read */
        CHECK_EQ(ifl_tokenize(v, text, IFL_TOKENIZE_MAX_LEN + 1, 0, 0, buf, 8, &n), IFL_EINVAL);
        free(full);
    }
}

/* ---- streaming detokenizer ---- */

/* Pushes ids one by one; checks every chunk is whole, valid UTF-8 and
 * returns the concatenation (with the flush). */
static char *stream(const struct ifl_vocab *v, const int32_t *ids, int n, int show_special,
                    size_t *len, int *n_chunks_nonempty)
{
    size_t room = IFL_DETOK_ROOM(v);
    char *chunk = malloc(room);
    char *all = malloc((size_t)n * room + 16);
    size_t w = 0;
    int ne = 0;
    struct ifl_detok d;
    ifl_detok_init(&d, v, show_special);
    for (int i = 0; i <= n; i++) {
        size_t k = i < n ? ifl_detok_push(&d, ids[i], chunk) : ifl_detok_flush(&d, chunk);
        CHECK(k <= room);
        CHECK(d.n_pending >= 0 && d.n_pending <= 3);
        /* a chunk never ends inside a character: a strict decoder accepts it */
        size_t j = 0;
        while (j < k) {
            unsigned char c = (unsigned char)chunk[j];
            size_t cl = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            CHECK_MSG(c < 0x80 || c >= 0xC2, "chunk %d has a stray byte %02x", i, c);
            CHECK_MSG(j + cl <= k, "chunk %d ends inside a character", i);
            for (size_t q = 1; q < cl && j + q < k; q++)
                CHECK(((unsigned char)chunk[j + q] & 0xC0) == 0x80);
            j += cl;
        }
        if (k)
            ne++;
        memcpy(all + w, chunk, k);
        w += k;
    }
    all[w] = 0;
    *len = w;
    if (n_chunks_nonempty)
        *n_chunks_nonempty = ne;
    free(chunk);
    return all;
}

static void test_detok_stream(void)
{
    const struct ifl_vocab *v = vocabs[V_SPM];
    if (v) {
        /* "你" as three byte tokens, then "好" the same way: whole characters only */
        int32_t ids[] = {3 + 0xE4, 3 + 0xBD, 3 + 0xA0, 3 + 0xE5, 3 + 0xA5, 3 + 0xBD};
        struct ifl_detok d;
        char *out = malloc(IFL_DETOK_ROOM(v));
        ifl_detok_init(&d, v, 0);
        CHECK_EQ(ifl_detok_push(&d, ids[0], out), 0);
        CHECK_EQ(ifl_detok_push(&d, ids[1], out), 0);
        CHECK_EQ(ifl_detok_push(&d, ids[2], out), 3);
        CHECK(memcmp(out, "\xe4\xbd\xa0", 3) == 0);
        CHECK_EQ(d.n_pending, 0);
        size_t len;
        char *all = stream(v, ids, 6, 0, &len, NULL);
        CHECK_STR(all, "你好");
        free(all);

        /* a cut-off character followed by ASCII: one U+FFFD, then the rest */
        int32_t bad[] = {3 + 0xE4, 3 + 0xBD, 3 + 'A'};
        all = stream(v, bad, 3, 0, &len, NULL);
        CHECK_STR(all, "\xef\xbf\xbd"
                       "A");
        free(all);
        /* bytes that cannot start a character: one U+FFFD each */
        int32_t bad2[] = {3 + 0x80, 3 + 0xFF, 3 + 0xC0, 3 + 'x'};
        all = stream(v, bad2, 4, 0, &len, NULL);
        CHECK_STR(all, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                       "x");
        free(all);
        /* a surrogate encoding is ill-formed: ED A0 80 -> 3 x U+FFFD (ED alone, A0, 80) */
        int32_t sur[] = {3 + 0xED, 3 + 0xA0, 3 + 0x80};
        all = stream(v, sur, 3, 0, &len, NULL);
        CHECK_STR(all, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
        free(all);

        /* flush of a partial tail */
        ifl_detok_init(&d, v, 0);
        CHECK_EQ(ifl_detok_push(&d, 3 + 0xF0, out), 0);
        CHECK_EQ(ifl_detok_push(&d, 3 + 0x9F, out), 0);
        CHECK_EQ(d.n_pending, 2);
        CHECK_EQ(ifl_detok_flush(&d, out), 3);
        CHECK(memcmp(out, "\xef\xbf\xbd", 3) == 0);
        CHECK_EQ(ifl_detok_flush(&d, out), 0);
        /* control tokens: hidden unless show_special */
        CHECK_EQ(ifl_detok_push(&d, 1, out), 0);
        ifl_detok_init(&d, v, 1);
        CHECK_EQ(ifl_detok_push(&d, 1, out), 3);
        CHECK(memcmp(out, "<s>", 3) == 0);
        free(out);
    }

    /* BPE: emoji split across tokens come out whole */
    for (int w = V_GPT2; w <= V_QWEN2; w++) {
        v = vocabs[w];
        if (!v)
            continue;
        const char *text =
            "🚀 (normal) 😶‍🌫️ 🦙🦙 我想在apple工作 Cửa Việt "
            "កាន់តែពិសេស";
        int64_t n;
        int32_t *ids = tokenize(v, text, strlen(text), 0, 0, &n);
        CHECK(ids);
        if (!ids)
            continue;
        /* at least one token's piece must be a partial character for the test to bite */
        int split = 0;
        for (int64_t i = 0; i < n; i++) {
            char buf[256];
            size_t k = ifl_vocab_piece(v, ids[i], 0, buf, sizeof(buf));
            unsigned char last = k ? (unsigned char)buf[k - 1] : 0;
            if (k && last >= 0x80 && k < sizeof(buf)) {
                /* ends in a lead or continuation byte of an unfinished character? */
                size_t j = k - 1;
                while (j > 0 && ((unsigned char)buf[j] & 0xC0) == 0x80)
                    j--;
                unsigned char lead = (unsigned char)buf[j];
                size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
                if (k - j < want || (lead & 0xC0) == 0x80)
                    split = 1;
            }
        }
        CHECK_MSG(split, "%s: no token splits a character; the test needs another text",
                  vocab_files[w]);
        size_t len;
        int chunks;
        char *all = stream(v, ids, (int)n, 0, &len, &chunks);
        CHECK(len == strlen(text) && memcmp(all, text, len) == 0);
        CHECK(chunks > 3);
        free(all);
        free(ids);
    }
}

/* ---- robustness on random bytes ---- */

static void test_random_bytes(void)
{
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 1234);
    char text[600];
    int32_t ids[2048];
    for (int w = 0; w < V_COUNT; w++) {
        const struct ifl_vocab *v = vocabs[w];
        if (!v)
            continue;
        char *room = malloc(IFL_DETOK_ROOM(v));
        for (int iter = 0; iter < 60; iter++) {
            size_t len = (uint32_t)(ifl_rng_next(&rng) >> 32) % sizeof(text);
            int mode = iter % 3;
            for (size_t i = 0; i < len; i++) {
                uint32_t r = (uint32_t)(ifl_rng_next(&rng) >> 32);
                if (mode == 0) /* any byte */
                    text[i] = (char)r;
                else if (mode == 1) /* mostly high bytes and whitespace: broken UTF-8 */
                    text[i] = (char)("\x80\xbf\xc3\xe4\xf0\xf4\xff\x00 \n\t\r<|>a'"[r % 17]);
                else /* ASCII-ish with special-token fragments */
                    text[i] = (char)("<|im_end|><s></s>  \n'sLL09x\xe2\x96\x81"[r % 30]);
            }
            int64_t n = 0;
            int parse = (int)((uint32_t)(ifl_rng_next(&rng) >> 32) & 1);
            int rc = ifl_tokenize(v, text, len, 1, parse, ids, 2048, &n);
            CHECK_EQ(rc, 0);
            CHECK(n >= 0 && n <= 2048);
            for (int64_t i = 0; i < n && i < 2048; i++)
                CHECK(ids[i] >= 0 && ids[i] < ifl_vocab_n_tokens(v));
            /* a small cap: same count, IFL_EFULL */
            int64_t n2 = 0;
            int32_t small[4];
            rc = ifl_tokenize(v, text, len, 1, parse, small, 4, &n2);
            CHECK_EQ(n2, n);
            CHECK_EQ(rc, n > 4 ? IFL_EFULL : 0);
            if (n <= 2048)
                CHECK(memcmp(small, ids, (size_t)(n < 4 ? n : 4) * sizeof(int32_t)) == 0);
            /* and detokenizing anything is safe */
            struct ifl_detok d;
            ifl_detok_init(&d, v, parse);
            for (int64_t i = 0; i < n && i < 2048; i++)
                CHECK(ifl_detok_push(&d, ids[i], room) <= IFL_DETOK_ROOM(v));
            ifl_detok_flush(&d, room);
        }
        /* random ids, including out of range */
        struct ifl_detok d;
        ifl_detok_init(&d, v, 1);
        for (int i = 0; i < 2000; i++) {
            int32_t id = (int32_t)((uint32_t)(ifl_rng_next(&rng) >> 32) %
                                   (uint32_t)(ifl_vocab_n_tokens(v) + 10)) -
                         5;
            CHECK(ifl_detok_push(&d, id, room) <= IFL_DETOK_ROOM(v));
        }
        free(room);
    }
}

/* Byte-level BPE replaces each byte that starts no valid character with
 * U+FFFD before pre-tokenizing, as llama.cpp does. */
static void test_invalid_utf8_bpe(void)
{
    for (int w = V_GPT2; w <= V_QWEN2; w++) {
        const struct ifl_vocab *v = vocabs[w];
        if (!v)
            continue;
        static const char *const pairs[][2] = {
            {"\xff", "\xef\xbf\xbd"},
            {"a\xe4\xbd b", "a\xef\xbf\xbd\xef\xbf\xbd b"},
            {"x\xc0\x80y", "x\xef\xbf\xbd\xef\xbf\xbdy"},             /* overlong */
            {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
            {"end\xf0\x9f\xa6", "end\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        };
        for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
            int64_t n1, n2;
            int32_t *a = tokenize(v, pairs[i][0], strlen(pairs[i][0]), 0, 0, &n1);
            int32_t *b = tokenize(v, pairs[i][1], strlen(pairs[i][1]), 0, 0, &n2);
            CHECK_MSG(a && b && n1 == n2 && memcmp(a, b, (size_t)n1 * sizeof(int32_t)) == 0,
                      "%s: invalid case %zu", vocab_files[w], i);
            free(a);
            free(b);
        }
    }
    /* SPM keeps invalid bytes as byte tokens: lossless */
    const struct ifl_vocab *v = vocabs[V_SPM];
    if (v) {
        int64_t n;
        int32_t *ids = tokenize(v, "\xff\xe4\xbd", 3, 0, 0, &n);
        CHECK(ids && n == 4 && ids[1] == 3 + 0xFF && ids[2] == 3 + 0xE4 && ids[3] == 3 + 0xBD);
        free(ids);
    }
}

/* The vocabulary is shared: threads tokenizing at once agree with one thread. */
struct thread_job {
    const struct ifl_vocab *v;
    const struct vec_set *s;
    int mismatches;
};

static void *thread_main(void *arg)
{
    struct thread_job *j = arg;
    for (int rep = 0; rep < 4; rep++) {
        for (int i = 0; i < j->s->n; i++) {
            int64_t n = 0;
            int32_t *ids = tokenize(j->v, j->s->c[i].text, j->s->c[i].len, 0, 0, &n);
            if (!ids || n != j->s->c[i].n ||
                (n && memcmp(ids, j->s->c[i].ids, (size_t)n * sizeof(*ids)) != 0))
                j->mismatches++;
            free(ids);
        }
    }
    return NULL;
}

static void test_threads(void)
{
    for (int w = V_SPM; w <= V_QWEN2; w++) {
        if (!vocabs[w])
            continue;
        struct vec_set s;
        if (load_vectors(w, &s) != 0) {
            CHECK(0);
            continue;
        }
        pthread_t th[4];
        struct thread_job jobs[4];
        for (int t = 0; t < 4; t++) {
            jobs[t] = (struct thread_job){vocabs[w], &s, 0};
            CHECK_EQ(pthread_create(&th[t], NULL, thread_main, &jobs[t]), 0);
        }
        for (int t = 0; t < 4; t++) {
            pthread_join(th[t], NULL);
            CHECK_EQ(jobs[t].mismatches, 0);
        }
        free_vectors(&s);
    }
}

/* ---- the heap-based merges against a naive quadratic reference ---- */

/* Naive merging over a list of token ids: repeatedly merge the best adjacent
 * pair (pick() scores it, higher wins, leftmost on ties). */
struct naive_sym {
    char text[256];
    size_t len;
};

static int32_t naive_find(const struct ifl_vocab *v, const struct naive_sym *a,
                          const struct naive_sym *b)
{
    char buf[512];
    memcpy(buf, a->text, a->len);
    memcpy(buf + a->len, b->text, b->len);
    return ifl_vocab_find(v, buf, a->len + b->len);
}

static float *load_scores(int which)
{
    char path[1024], err[IFL_ERR_LEN];
    snprintf(path, sizeof(path), "%s/models/%s", t_shared(), vocab_files[which]);
    struct ifl_gguf *g = NULL;
    if (ifl_gguf_open(&g, path, err) < 0)
        return NULL;
    struct ifl_gguf_value arr;
    float *sc = NULL;
    if (ifl_gguf_get_arr(g, "tokenizer.ggml.scores", &arr, err) == 0) {
        sc = malloc(arr.n * sizeof(*sc));
        for (uint64_t i = 0; i < arr.n; i++) {
            double d = 0;
            ifl_gguf_arr_float(&arr, i, &d);
            sc[i] = (float)d;
        }
    }
    ifl_gguf_free(g);
    return sc;
}

static void test_naive_spm(void)
{
    const struct ifl_vocab *v = vocabs[V_SPM];
    float *scores = load_scores(V_SPM);
    CHECK(v && scores);
    if (!v || !scores) {
        free(scores);
        return;
    }
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 99);
    static const char *const alphabet[] = {
        "a", "e", "n", "t", "s", "r", " ", "  ", "th", "in", "\xc3\xa9", "\xe4\xbd\xa0", "1", "."};
    struct naive_sym *sym = malloc(200 * sizeof(*sym));
    for (int iter = 0; iter < 300; iter++) {
        char text[200];
        size_t len = 0;
        int parts = 1 + (int)(ifl_rng_next(&rng) % 40);
        for (int k = 0; k < parts; k++) {
            const char *a = alphabet[ifl_rng_next(&rng) % 14];
            memcpy(text + len, a, strlen(a));
            len += strlen(a);
        }
        /* reference: "▁" + escaped text, one symbol per character */
        int ns = 0;
        memcpy(sym[ns].text, "\xe2\x96\x81", 3);
        sym[ns++].len = 3;
        for (size_t i = 0; i < len;) {
            size_t cl = (unsigned char)text[i] < 0x80 ? 1 : (unsigned char)text[i] >= 0xE0 ? 3 : 2;
            if (text[i] == ' ') {
                memcpy(sym[ns].text, "\xe2\x96\x81", 3);
                sym[ns++].len = 3;
            } else {
                memcpy(sym[ns].text, text + i, cl);
                sym[ns++].len = cl;
            }
            i += cl;
        }
        for (;;) {
            int best = -1;
            float best_score = 0;
            for (int i = 0; i + 1 < ns; i++) {
                int32_t id = naive_find(v, &sym[i], &sym[i + 1]);
                if (id >= 0 && (best < 0 || scores[id] > best_score)) {
                    best = i;
                    best_score = scores[id];
                }
            }
            if (best < 0)
                break;
            memcpy(sym[best].text + sym[best].len, sym[best + 1].text, sym[best + 1].len);
            sym[best].len += sym[best + 1].len;
            memmove(&sym[best + 1], &sym[best + 2], (size_t)(ns - best - 2) * sizeof(*sym));
            ns--;
        }
        int32_t want[400];
        int nw = 0;
        for (int i = 0; i < ns; i++) {
            int32_t id = ifl_vocab_find(v, sym[i].text, sym[i].len);
            if (id >= 0) {
                want[nw++] = id;
            } else {
                for (size_t b = 0; b < sym[i].len; b++)
                    want[nw++] = 3 + (unsigned char)sym[i].text[b];
            }
        }
        int64_t n;
        int32_t *got = tokenize(v, text, len, 0, 0, &n);
        int ok = got && n == nw && memcmp(got, want, (size_t)n * sizeof(int32_t)) == 0;
        CHECK_MSG(ok, "SPM differs from the naive reference (iteration %d)", iter);
        if (!ok) {
            fputs("    input: ", stderr);
            print_escaped(text, len);
            fputc('\n', stderr);
            print_ids("want", want, nw);
            if (got)
                print_ids("got ", got, n);
        }
        free(got);
    }
    free(sym);
    free(scores);
}

/* BPE on single pre-tokens (letters only, so the regex keeps them whole):
 * the lowest-rank merge first, leftmost on ties. */
struct rank_entry {
    int32_t l, r, rank;
};

static int cmp_rank_entry(const void *a, const void *b)
{
    const struct rank_entry *x = a, *y = b;
    if (x->l != y->l)
        return x->l < y->l ? -1 : 1;
    if (x->r != y->r)
        return x->r < y->r ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static void test_naive_bpe(void)
{
    const struct ifl_vocab *v = vocabs[V_GPT2];
    char path[1024], err[IFL_ERR_LEN];
    snprintf(path, sizeof(path), "%s/models/%s", t_shared(), vocab_files[V_GPT2]);
    struct ifl_gguf *g = NULL;
    CHECK(v && ifl_gguf_open(&g, path, err) == 0);
    if (!v || !g)
        return;
    struct ifl_gguf_value arr;
    CHECK_EQ(ifl_gguf_get_arr(g, "tokenizer.ggml.merges", &arr, err), 0);
    struct rank_entry *ranks = malloc(arr.n * sizeof(*ranks));
    size_t nr = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        const char *s;
        size_t n;
        ifl_gguf_arr_str(&arr, i, &s, &n);
        const char *sp = memchr(s + 1, ' ', n - 1);
        int32_t l = ifl_vocab_find(v, s, (size_t)(sp - s));
        int32_t r = ifl_vocab_find(v, sp + 1, n - (size_t)(sp - s) - 1);
        if (l >= 0 && r >= 0)
            ranks[nr++] = (struct rank_entry){l, r, (int32_t)i};
    }
    qsort(ranks, nr, sizeof(*ranks), cmp_rank_entry);
    ifl_gguf_free(g);

    struct ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    struct naive_sym *sym = malloc(200 * sizeof(*sym));
    int32_t ids[200];
    for (int iter = 0; iter < 300; iter++) {
        char text[100];
        size_t len = 1 + ifl_rng_next(&rng) % 60;
        for (size_t i = 0; i < len; i++)
            text[i] = "aaeeinnrssttlloh"[ifl_rng_next(&rng) % 16];
        int ns = (int)len;
        for (int i = 0; i < ns; i++) {
            sym[i].text[0] = text[i];
            sym[i].len = 1;
            ids[i] = ifl_vocab_find(v, text + i, 1);
        }
        for (;;) {
            int best = -1;
            int32_t best_rank = 0;
            for (int i = 0; i + 1 < ns; i++) {
                struct rank_entry key = {ids[i], ids[i + 1], -1};
                struct rank_entry *e = NULL;
                size_t lo = 0, hi = nr;
                while (lo < hi) { /* first entry >= key */
                    size_t mid = (lo + hi) / 2;
                    if (cmp_rank_entry(&ranks[mid], &key) < 0)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                if (lo < nr && ranks[lo].l == key.l && ranks[lo].r == key.r)
                    e = &ranks[lo];
                if (e && naive_find(v, &sym[i], &sym[i + 1]) >= 0 &&
                    (best < 0 || e->rank < best_rank)) {
                    best = i;
                    best_rank = e->rank;
                }
            }
            if (best < 0)
                break;
            ids[best] = naive_find(v, &sym[best], &sym[best + 1]);
            memcpy(sym[best].text + sym[best].len, sym[best + 1].text, sym[best + 1].len);
            sym[best].len += sym[best + 1].len;
            memmove(&sym[best + 1], &sym[best + 2], (size_t)(ns - best - 2) * sizeof(*sym));
            memmove(&ids[best + 1], &ids[best + 2], (size_t)(ns - best - 2) * sizeof(*ids));
            ns--;
        }
        int64_t n;
        int32_t *got = tokenize(v, text, len, 0, 0, &n);
        int ok = got && n == ns && memcmp(got, ids, (size_t)n * sizeof(int32_t)) == 0;
        CHECK_MSG(ok, "BPE differs from the naive reference (iteration %d)", iter);
        if (!ok) {
            fputs("    input: ", stderr);
            print_escaped(text, len);
            fputc('\n', stderr);
            print_ids("want", ids, ns);
            if (got)
                print_ids("got ", got, n);
        }
        free(got);
    }
    free(sym);
    free(ranks);
}

/* Long inputs stay fast (no quadratic behaviour). */
static void test_long_input(void)
{
    size_t len = 1 << 19;
    char *text = malloc(len);
    const char *words = "The quick brown fox jumps over the lazy dog, 12345 times! 你好世界 \n";
    size_t wl = strlen(words);
    for (size_t i = 0; i < len; i++)
        text[i] = words[i % wl];
    char *spaces = malloc(len);
    memset(spaces, ' ', len);
    for (int w = 0; w < V_COUNT; w++) {
        const struct ifl_vocab *v = vocabs[w];
        if (!v)
            continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int64_t n1 = 0, n2 = 0;
        int rc1 = ifl_tokenize(v, text, len, 0, 1, NULL, 0, &n1);
        int rc2 = ifl_tokenize(v, spaces, len, 0, 0, NULL, 0, &n2);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        fprintf(stderr, "  %s: 2 x 512 KiB in %.0f ms (%lld + %lld tokens)\n", vocab_files[w], ms,
                (long long)n1, (long long)n2);
        CHECK_EQ(rc1, IFL_EFULL);
        CHECK_EQ(rc2, IFL_EFULL);
        CHECK(n1 > 1000 && n2 > 0);
        CHECK(ms < 20000);
    }
    free(text);
    free(spaces);
}

/* ---- bad metadata ---- */

static char tmpdir[256];

/* Writes src's metadata to tmpdir/name with key `drop` left out and, if
 * `edit` is set, one entry added by it. Returns the load status and err. */
static int load_edited(const struct ifl_gguf *src, const char *name, const char *drop,
                       void (*edit)(struct ifl_gguf_writer *), char *err)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    struct ifl_gguf_writer *w = NULL;
    if (ifl_gguf_writer_create(&w) < 0)
        return -1000;
    for (int64_t i = 0; i < ifl_gguf_n_kv(src); i++)
        if (!drop || strcmp(ifl_gguf_key(src, i), drop) != 0)
            ifl_gguf_writer_copy_kv(w, src, i);
    if (edit)
        edit(w);
    int rc = ifl_gguf_writer_write(w, path, err);
    ifl_gguf_writer_free(w);
    if (rc < 0) {
        fprintf(stderr, "  writer: %s\n", err);
        return -1000;
    }
    struct ifl_gguf *g = NULL;
    rc = ifl_gguf_open(&g, path, err);
    if (rc < 0) {
        fprintf(stderr, "  reopen: %s\n", err);
        return -1000;
    }
    struct ifl_vocab *v = NULL;
    err[0] = 0;
    rc = ifl_vocab_load(&v, g, err);
    ifl_vocab_free(v);
    ifl_gguf_free(g);
    unlink(path);
    return rc;
}

static void edit_model_foo(struct ifl_gguf_writer *w)
{
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.model", "foo", 3);
}
static void edit_tokens_int(struct ifl_gguf_writer *w)
{
    int32_t x[3] = {1, 2, 3};
    ifl_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", IFL_GGUF_INT32, x, 3);
}
static void edit_scores_short(struct ifl_gguf_writer *w)
{
    float x[3] = {0, 1, 2};
    ifl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", IFL_GGUF_FLOAT32, x, 3);
}
static void edit_types_float(struct ifl_gguf_writer *w)
{
    float x[512] = {0};
    ifl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IFL_GGUF_FLOAT32, x, 512);
}
static void edit_model_str_arr(struct ifl_gguf_writer *w)
{
    uint8_t x[1] = {1};
    ifl_gguf_writer_set_arr(w, "tokenizer.ggml.model", IFL_GGUF_UINT8, x, 1);
}
static void edit_bos_str(struct ifl_gguf_writer *w)
{
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "one", 3);
}

/* A tiny byte-level BPE vocabulary: the 256 alphabet characters plus merges. */
static void tiny_bpe(struct ifl_gguf_writer *w, const char *pre, int with_merges, int bad_merge)
{
    static char texts[260][8];
    const char *ptr[260];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174) ? (uint32_t)b
                      : b <= 32                                                     ? 256u + b
                      : b <= 160 ? 289u + (b - 127)
                                 : 323u;
        if (cp < 0x80) {
            texts[n][0] = (char)cp;
            texts[n][1] = 0;
        } else {
            texts[n][0] = (char)(0xC0 | cp >> 6);
            texts[n][1] = (char)(0x80 | (cp & 0x3F));
            texts[n][2] = 0;
        }
        ptr[n] = texts[n];
        n++;
    }
    strcpy(texts[n], "ab");
    ptr[n] = texts[n];
    n++;
    strcpy(texts[n], "abc");
    ptr[n] = texts[n];
    n++;
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", 4);
    if (pre)
        ifl_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptr, NULL, (uint64_t)n);
    if (with_merges) {
        const char *m[2] = {"a b", bad_merge ? "abc" : "ab c"};
        ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", m, NULL, 2);
    }
}

static int load_tiny(const char *pre, int with_merges, int bad_merge, char *err,
                     struct ifl_vocab **keep)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/tiny.gguf", tmpdir);
    struct ifl_gguf_writer *w = NULL;
    if (ifl_gguf_writer_create(&w) < 0)
        return -1000;
    tiny_bpe(w, pre, with_merges, bad_merge);
    int rc = ifl_gguf_writer_write(w, path, err);
    ifl_gguf_writer_free(w);
    if (rc < 0)
        return -1000;
    struct ifl_gguf *g = NULL;
    if (ifl_gguf_open(&g, path, err) < 0)
        return -1000;
    struct ifl_vocab *v = NULL;
    err[0] = 0;
    rc = ifl_vocab_load(&v, g, err);
    ifl_gguf_free(g);
    unlink(path);
    if (keep)
        *keep = v;
    else
        ifl_vocab_free(v);
    return rc;
}

static void test_bad_metadata(void)
{
    char path[1024], err[IFL_ERR_LEN];
    snprintf(path, sizeof(path), "%s/models/stories260K.gguf", t_shared());
    struct ifl_gguf *src = NULL;
    CHECK_EQ(ifl_gguf_open(&src, path, err), 0);
    if (!src)
        return;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/ifl_tok_XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);

    /* unchanged copy loads */
    CHECK_EQ(load_edited(src, "same.gguf", NULL, NULL, err), 0);

    int rc = load_edited(src, "foo.gguf", "tokenizer.ggml.model", edit_model_foo, err);
    CHECK_EQ(rc, IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "tokenizer.ggml.model") && strstr(err, "'foo'"), "err: %s", err);

    rc = load_edited(src, "nomodel.gguf", "tokenizer.ggml.model", NULL, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.model") != NULL, "err: %s", err);

    rc = load_edited(src, "modelarr.gguf", "tokenizer.ggml.model", edit_model_str_arr, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.model") != NULL, "err: %s", err);

    rc = load_edited(src, "toks.gguf", "tokenizer.ggml.tokens", edit_tokens_int, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.tokens") != NULL, "err: %s", err);

    rc = load_edited(src, "notoks.gguf", "tokenizer.ggml.tokens", NULL, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.tokens") != NULL, "err: %s", err);

    rc = load_edited(src, "scores.gguf", "tokenizer.ggml.scores", edit_scores_short, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.scores") != NULL, "err: %s", err);

    rc = load_edited(src, "types.gguf", "tokenizer.ggml.token_type", edit_types_float, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.token_type") != NULL, "err: %s", err);

    rc = load_edited(src, "bos.gguf", "tokenizer.ggml.bos_token_id", edit_bos_str, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.bos_token_id") != NULL, "err: %s", err);

    /* optional keys may go: no scores, no types */
    CHECK_EQ(load_edited(src, "noscores.gguf", "tokenizer.ggml.scores", NULL, err), 0);
    CHECK_EQ(load_edited(src, "notypes.gguf", "tokenizer.ggml.token_type", NULL, err), 0);
    ifl_gguf_free(src);

    /* BPE: unknown pre-tokenizer, missing or malformed merges, a working tiny vocab */
    rc = load_tiny("bogus-pre", 1, 0, err, NULL);
    CHECK_EQ(rc, IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "tokenizer.ggml.pre") && strstr(err, "'bogus-pre'"), "err: %s", err);
    rc = load_tiny("gpt-2", 0, 0, err, NULL);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.merges") != NULL, "err: %s", err);
    rc = load_tiny("gpt-2", 1, 1, err, NULL);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "tokenizer.ggml.merges") != NULL, "err: %s", err);

    struct ifl_vocab *v = NULL;
    CHECK_EQ(load_tiny(NULL, 1, 0, err, &v), 0); /* no pre: llama.cpp's default */
    if (v) {
        CHECK_EQ(ifl_vocab_kind(v), IFL_VOCAB_BPE);
        CHECK_EQ(ifl_vocab_bos(v), -1);
        CHECK(!ifl_vocab_add_bos(v));
        int32_t ids[8];
        int64_t n;
        CHECK_EQ(ifl_tokenize(v, "abcab", 5, 1, 1, ids, 8, &n), 0);
        CHECK(n == 2 && ids[0] == 257 && ids[1] == 256);
        CHECK_EQ(ifl_tokenize(v, " a", 2, 0, 0, ids, 8, &n), 0);
        CHECK(n == 2 && ids[0] == ' ' && ids[1] == 'a'); /* token i is byte i */
        ifl_vocab_free(v);
    }
    /* every pre-tokenizer family compiles and cuts text */
    static const char *const pres[] = {"default", "gpt-2",     "llama-bpe", "llama3",
                                       "qwen2",   "starcoder", "smollm",    "deepseek-r1-qwen"};
    for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]); i++) {
        v = NULL;
        rc = load_tiny(pres[i], 1, 0, err, &v);
        CHECK_MSG(rc == 0, "pre %s: %s", pres[i], err);
        if (!v)
            continue;
        CHECK_EQ(ifl_vocab_add_bos(v), 0); /* no BOS token in this vocabulary */
        int32_t ids[64];
        int64_t n;
        const char *text = "abc 123  x!!\n\n 'S'll \xe4\xbd\xa0\t";
        CHECK_EQ(ifl_tokenize(v, text, strlen(text), 0, 0, ids, 64, &n), 0);
        CHECK(n > 10 && ids[0] == 257);
        size_t len;
        char *back = detokenize(v, ids, n, 0, &len);
        CHECK_MSG(len == strlen(text) && memcmp(back, text, len) == 0, "pre %s: round trip",
                  pres[i]);
        free(back);
        ifl_vocab_free(v);
    }
    rmdir(tmpdir);
}

/* ifl_vocab_max_cover is a true bound: no text gives fewer than
 * ceil(len / cover) ids. Tried on each token's stored text and shown piece
 * (repeated, so merges across copies are tried too), with and without
 * special-token parsing, and on random bytes; a text the bound calls too
 * long for a context is then too long for it. */
static void test_max_cover(void)
{
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 99);
    for (int w = 0; w < V_COUNT; w++) {
        const struct ifl_vocab *v = vocabs[w];
        if (!v)
            continue;
        size_t cover = ifl_vocab_max_cover(v);
        CHECK_MSG(cover > 0, "vocab %d has no bound", w);
        if (!cover)
            continue;
        int32_t nt = ifl_vocab_n_tokens(v), step = nt / 3000 + 1, worst = 0, longest = 0;
        size_t most = 0;
        for (int32_t id = 0; id < nt; id++) {
            size_t n;
            ifl_vocab_text(v, id, &n);
            if (n > most) {
                most = n;
                longest = id;
            }
        }
        char text[3 * 512 + 16];
        for (int32_t id = 0; id <= nt; id = id < nt && id + step > nt ? nt : id + step) {
            int32_t tok = id < nt ? id : longest; /* every step-th token, then the longest */
            for (int shown = 0; shown < 2; shown++) {
                size_t n, len = 0;
                const char *t = ifl_vocab_text(v, tok, &n);
                char piece[600];
                if (shown) {
                    n = ifl_vocab_piece(v, tok, 1, piece, sizeof piece);
                    t = piece;
                }
                if (n == 0 || n > 512)
                    continue;
                for (int k = 0; k < 3; k++, len += n)
                    memcpy(text + len, t, n);
                for (int parse = 0; parse < 2; parse++) {
                    int64_t got = 0;
                    int32_t *ids = tokenize(v, text, len, 0, parse, &got);
                    CHECK(ids != NULL);
                    free(ids);
                    if ((size_t)got * cover < len && ++worst < 4)
                        T_FAIL_("%s: token %d x3 (%zu bytes) gives %lld ids, cover %zu",
                                vocab_files[w], tok, len, (long long)got, cover);
                }
            }
        }
        for (int iter = 0; iter < 200; iter++) {
            size_t len = (uint32_t)(ifl_rng_next(&rng) >> 32) % 1500;
            for (size_t i = 0; i < len; i++) {
                uint32_t r = (uint32_t)(ifl_rng_next(&rng) >> 32);
                text[i] = iter % 2 ? (char)r
                                   : (char)("  \n\t\xe2\x96\x81"
                                            "abc<s>|im_end"[r % 20]);
            }
            int64_t got = 0;
            int32_t *ids = tokenize(v, text, len, 0, iter % 3 == 0, &got);
            CHECK(ids != NULL);
            free(ids);
            CHECK_MSG((size_t)got * cover >= len, "%s: random text of %zu bytes gives %lld ids",
                      vocab_files[w], len, (long long)got);
        }
        CHECK_EQ(worst, 0);
    }
    /* the values: the longest stored text (SPM), the most code points (BPE) */
    if (vocabs[V_SPM])
        CHECK_EQ(ifl_vocab_max_cover(vocabs[V_SPM]), (size_t)48); /* 16 x "\xe2\x96\x81" */
    if (vocabs[V_LLAMA3])
        CHECK_EQ(ifl_vocab_max_cover(vocabs[V_LLAMA3]), (size_t)128); /* 128 x "\xc4\xa0" */
    if (vocabs[V_STORIES])
        CHECK_EQ(ifl_vocab_max_cover(vocabs[V_STORIES]), (size_t)9);
}

int main(void)
{
    for (int w = 0; w < V_COUNT; w++)
        vocabs[w] = load_vocab(vocab_files[w]);
    T_RUN(test_vectors_spm);
    T_RUN(test_vectors_gpt2);
    T_RUN(test_vectors_llama3);
    T_RUN(test_vectors_qwen2);
    T_RUN(test_naive_spm);
    T_RUN(test_naive_bpe);
    T_RUN(test_stories);
    T_RUN(test_special);
    T_RUN(test_roundtrip);
    T_RUN(test_efull);
    T_RUN(test_detok_stream);
    T_RUN(test_random_bytes);
    T_RUN(test_invalid_utf8_bpe);
    T_RUN(test_threads);
    T_RUN(test_long_input);
    T_RUN(test_max_cover);
    T_RUN(test_bad_metadata);
    for (int w = 0; w < V_COUNT; w++)
        ifl_vocab_free(vocabs[w]);
    return t_done();
}
