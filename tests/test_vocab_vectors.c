/*
 * The vocabularies of tests/data/vocab/ (llama.cpp's test set: WordPiece,
 * DeepSeek LLM and Coder, Falcon, StarCoder; and GPT-4o's cut to 20000
 * tokens, with llama.cpp's ids for it under every pre-tokenizer family;
 * a Unigram vocabulary made from llama-spm's pieces with a charsmap;
 * unpacked by make into $BUILD/vocab/) against their .inp/.out vectors,
 * byte-level round trips,
 * WordPiece's specials, long words and normalization, every pre-tokenizer
 * name loading and cutting text, a few cuts whose result the patterns fix,
 * a raw-UTF-8 BPE (gemma4) built here, and bad input.
 */
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/gguf.h"
#include "t.h"
#include "tokenizer/internal.h"

enum {
    V_BERT,
    V_DS_CODER,
    V_DS_LLM,
    V_FALCON,
    V_STARCODER,
    V_GPT4O,
    V_UGM,
    V_GEMMA,
    V_GPTOSS,
    V_COUNT
};
static const char *const names[V_COUNT] = {
    "ggml-vocab-bert-bge", "ggml-vocab-deepseek-coder", "ggml-vocab-deepseek-llm",
    "ggml-vocab-falcon",   "ggml-vocab-starcoder",      "ggml-vocab-gpt4o-20k",
    "ggml-vocab-ugm-spm",  "ggml-vocab-gemma3-20k",     "ggml-vocab-gptoss-20k",
};
static struct ifl_vocab *vocabs[V_COUNT];
static char tmpdir[256];

static const char *build_dir(void)
{
    const char *b = getenv("BUILD");
    return b && *b ? b : "build";
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static struct ifl_vocab *load_path(const char *path, char *err)
{
    struct ifl_gguf *g = NULL;
    if (ifl_gguf_open(&g, path, err) < 0)
        return NULL;
    struct ifl_vocab *v = NULL;
    ifl_vocab_load(&v, g, err);
    ifl_gguf_free(g);
    return v;
}

static int32_t *tokenize(const struct ifl_vocab *v, const char *s, size_t len, int add_special,
                         int64_t *n)
{
    int32_t *ids = NULL;
    if (ifl_tokenize_alloc(v, s, len, add_special, 0, &ids, n) < 0)
        return NULL;
    return ids;
}

static char *detokenize(const struct ifl_vocab *v, const int32_t *ids, int64_t n, size_t *len)
{
    size_t cap = 64, w = 0;
    char *out = malloc(cap);
    for (int64_t i = 0; i < n; i++) {
        size_t need = ifl_vocab_piece(v, ids[i], 0, NULL, 0);
        while (w + need + 1 > cap)
            out = realloc(out, cap *= 2);
        ifl_vocab_piece(v, ids[i], 0, out + w, need);
        w += need;
    }
    out[w] = 0;
    *len = w;
    return out;
}

static void print_ids(const char *label, const int32_t *ids, int64_t n)
{
    fprintf(stderr, "    %s:", label);
    for (int64_t i = 0; i < n && i < 48; i++)
        fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

/* ---- the vectors ---- */

static const char SEP[] = "\n__ggml_vocab_test__\n";

/* Checks every case of inp_path against out_path on v; with roundtrip,
 * each expected id list must also give its input back (llama.cpp's test
 * prints the detokenized text; for a lossless tokenizer it is the input). */
static void run_vectors_on(const struct ifl_vocab *v, const char *label, const char *inp_path,
                           const char *out_path, int roundtrip)
{
    size_t ni, no;
    char *inp = read_all(inp_path, &ni);
    char *outp = read_all(out_path, &no);
    CHECK_MSG(inp && outp, "%s: cannot read %s or %s", label, inp_path, out_path);
    if (!inp || !outp) {
        free(inp);
        free(outp);
        return;
    }
    int cases = 0, pass = 0;
    char *p = inp, *end = inp + ni, *q = outp;
    int32_t *want = malloc(no * sizeof(*want));
    while (p < end) {
        char *hit = memmem(p, (size_t)(end - p), SEP, strlen(SEP));
        size_t len = hit ? (size_t)(hit - p) : (size_t)(end - p);
        char *nl = strchr(q, '\n');
        if (nl)
            *nl = 0;
        int64_t nw = 0;
        for (char *e;; q = e) {
            long x = strtol(q, &e, 10);
            if (e == q)
                break;
            want[nw++] = (int32_t)x;
        }
        q = nl ? nl + 1 : outp + no;
        int64_t n = 0;
        int32_t *ids = tokenize(v, p, len, 0, &n);
        int ok = ids && n == nw && (n == 0 || memcmp(ids, want, (size_t)n * sizeof(*ids)) == 0);
        if (ok && roundtrip) {
            size_t bl;
            char *back = detokenize(v, want, nw, &bl);
            ok = bl == len && memcmp(back, p, len) == 0;
            CHECK_MSG(ok, "%s case %d: the expected ids do not give the input back", label, cases);
            free(back);
        }
        if (ok) {
            pass++;
        } else {
            T_FAIL_("%s case %d (%zu bytes) mismatch", label, cases, len);
            print_ids("want", want, nw);
            if (ids)
                print_ids("got ", ids, n);
        }
        free(ids);
        cases++;
        p = hit ? hit + strlen(SEP) : end;
    }
    fprintf(stderr, "  %s: %d/%d cases pass\n", label, pass, cases);
    CHECK(cases > 30);
    free(want);
    free(inp);
    free(outp);
}

static void run_vectors(int w, int roundtrip)
{
    CHECK_MSG(vocabs[w], "%s not loaded", names[w]);
    if (!vocabs[w])
        return;
    char inp[512], out[512];
    snprintf(inp, sizeof(inp), "tests/data/vocab/%s.gguf.inp", names[w]);
    snprintf(out, sizeof(out), "tests/data/vocab/%s.gguf.out", names[w]);
    run_vectors_on(vocabs[w], names[w], inp, out, roundtrip);
}

static void test_vectors_bert(void)
{
    run_vectors(V_BERT, 0); /* lossy: lowercased, accents and spaces dropped */
}
static void test_vectors_deepseek_coder(void)
{
    run_vectors(V_DS_CODER, 1);
}
static void test_vectors_deepseek_llm(void)
{
    run_vectors(V_DS_LLM, 1);
}
static void test_vectors_falcon(void)
{
    run_vectors(V_FALCON, 1);
}
static void test_vectors_starcoder(void)
{
    run_vectors(V_STARCODER, 1);
}

static void test_vectors_gpt4o(void)
{
    run_vectors(V_GPT4O, 1);
}

/* Each tests/data/vocab/pre/NAME.out holds llama.cpp's ids for the cases of
 * ggml-vocab-gpt4o-20k.gguf.inp on that vocabulary with tokenizer.ggml.pre
 * set to NAME: one file per pre-tokenizer family. The vocabulary is
 * rewritten here with the name changed. */
static void test_vectors_per_pretokenizer(void)
{
    char path[1024], tmp[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-gpt4o-20k.gguf", build_dir());
    snprintf(tmp, sizeof(tmp), "%s/pre.gguf", tmpdir);
    struct ifl_gguf *base = NULL;
    CHECK_MSG(ifl_gguf_open(&base, path, err) == 0, "%s: %s", path, err);
    DIR *dir = opendir("tests/data/vocab/pre");
    CHECK(dir != NULL);
    if (!base || !dir) {
        ifl_gguf_free(base);
        if (dir)
            closedir(dir);
        return;
    }
    int n_files = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 5 || strcmp(de->d_name + nl - 4, ".out") != 0)
            continue;
        char pre[128];
        snprintf(pre, sizeof(pre), "%.*s", (int)(nl - 4), de->d_name);
        struct ifl_gguf_writer *w = NULL;
        CHECK_EQ(ifl_gguf_writer_create(&w), 0);
        for (int64_t i = 0; i < ifl_gguf_n_kv(base); i++)
            if (strcmp(ifl_gguf_key(base, i), "tokenizer.ggml.pre") != 0)
                ifl_gguf_writer_copy_kv(w, base, i);
        ifl_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
        CHECK_EQ(ifl_gguf_writer_write(w, tmp, err), 0);
        ifl_gguf_writer_free(w);
        struct ifl_vocab *v = load_path(tmp, err);
        CHECK_MSG(v, "pre %s: %s", pre, err);
        if (v) {
            char inp[512], out[512], label[160];
            snprintf(inp, sizeof(inp), "tests/data/vocab/ggml-vocab-gpt4o-20k.gguf.inp");
            snprintf(out, sizeof(out), "tests/data/vocab/pre/%s", de->d_name);
            snprintf(label, sizeof(label), "gpt4o-20k as %s", pre);
            run_vectors_on(v, label, inp, out, !(v->pre_flags & IFL_PRE_RAW));
            ifl_vocab_free(v);
        }
        n_files++;
    }
    closedir(dir);
    unlink(tmp);
    ifl_gguf_free(base);
    CHECK(n_files >= 29);
}

/* ---- Unigram ---- */

/* Writes base's metadata to path with key replaced by a bool, or dropped
 * (value < 0), or replaced by the bytes data[0, n) (n > 0). */
static int rewrite(const struct ifl_gguf *base, const char *path, const char *key, int value,
                   const uint8_t *data, size_t n, char *err)
{
    struct ifl_gguf_writer *w = NULL;
    if (ifl_gguf_writer_create(&w) < 0)
        return -1;
    for (int64_t i = 0; i < ifl_gguf_n_kv(base); i++)
        if (strcmp(ifl_gguf_key(base, i), key) != 0)
            ifl_gguf_writer_copy_kv(w, base, i);
    if (n > 0)
        ifl_gguf_writer_set_arr(w, key, IFL_GGUF_UINT8, data, n);
    else if (value >= 0)
        ifl_gguf_writer_set_bool(w, key, value);
    int rc = ifl_gguf_writer_write(w, path, err);
    ifl_gguf_writer_free(w);
    return rc;
}

/* Gemma's tokenizer (model gemma4: raw UTF-8, U+2581, <0xNN> fallback).
 * Not lossless: its runs of U+2581 are added (user-defined) tokens, which
 * show as stored, as in llama.cpp. */
static void test_vectors_gemma(void)
{
    run_vectors(V_GEMMA, 0);
}

static void test_vectors_ugm(void)
{
    run_vectors(V_UGM, 0); /* lossy: the charsmap rewrites text */
}

/* The same vocabulary with remove_extra_whitespaces (llama.cpp's ids), EOS
 * with add_special, and charsmaps that do not hold together. */
static void test_ugm(void)
{
    const struct ifl_vocab *v = vocabs[V_UGM];
    if (!v)
        return;
    CHECK_EQ(ifl_vocab_kind(v), IFL_VOCAB_UGM);
    int64_t n;
    int32_t *ids = tokenize(v, "hi", 2, 1, &n);
    CHECK(ids && n >= 2 && ids[n - 1] == ifl_vocab_eos(v) && ifl_vocab_eos(v) == 1);
    free(ids);
    /* full-width letters and a ligature go through the charsmap */
    int64_t na, nb;
    static const char fw[] = "\xef\xbc\xa1\xef\xbd\x82 \xef\xac\x81ne";
    int32_t *a = tokenize(v, fw, strlen(fw), 0, &na);
    int32_t *b = tokenize(v, "Ab fine", 7, 0, &nb);
    CHECK(a && b && na == nb && memcmp(a, b, (size_t)na * sizeof(*a)) == 0);
    free(a);
    free(b);

    char path[1024], tmp[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof(path), "%s/vocab/ggml-vocab-ugm-spm.gguf", build_dir());
    snprintf(tmp, sizeof(tmp), "%s/ugm.gguf", tmpdir);
    struct ifl_gguf *base = NULL;
    if (ifl_gguf_open(&base, path, err) < 0)
        return;
    CHECK_EQ(rewrite(base, tmp, "tokenizer.ggml.remove_extra_whitespaces", 1, NULL, 0, err), 0);
    struct ifl_vocab *x = load_path(tmp, err);
    CHECK_MSG(x, "%s", err);
    if (x) {
        run_vectors_on(x, "ugm-spm with remove_extra_whitespaces",
                       "tests/data/vocab/ggml-vocab-ugm-spm.gguf.inp",
                       "tests/data/vocab/ggml-vocab-ugm-spm.remove-extra-ws.out", 0);
        ifl_vocab_free(x);
    }
    /* a trie size past the blob, and one not a multiple of 4: refused */
    static const uint8_t big[8] = {0xff, 0, 0, 0, 1, 2, 3, 4};
    static const uint8_t odd[12] = {6, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 0};
    const uint8_t *bad[2] = {big, odd};
    size_t bad_n[2] = {sizeof(big), sizeof(odd)};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(
            rewrite(base, tmp, "tokenizer.ggml.precompiled_charsmap", -1, bad[i], bad_n[i], err),
            0);
        struct ifl_gguf *g = NULL;
        CHECK_EQ(ifl_gguf_open(&g, tmp, err), 0);
        struct ifl_vocab *y = NULL;
        err[0] = 0;
        CHECK_EQ(ifl_vocab_load(&y, g, err), IFL_EFORMAT);
        CHECK_MSG(strstr(err, "precompiled_charsmap") != NULL, "err: %s", err);
        ifl_gguf_free(g);
    }
    /* a trie whose steps leave the array, or whose replacement offsets
     * point past the blob: no match there, no crash (random arrays) */
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    uint8_t junk[4 + 64 + 16];
    for (int t = 0; t < 50; t++) {
        uint32_t blob = 64;
        memcpy(junk, &blob, 4);
        for (size_t i = 4; i < sizeof(junk); i++)
            junk[i] = (uint8_t)ifl_rng_next(&rng);
        CHECK_EQ(
            rewrite(base, tmp, "tokenizer.ggml.precompiled_charsmap", -1, junk, sizeof(junk), err),
            0);
        struct ifl_vocab *y = load_path(tmp, err);
        CHECK_MSG(y, "random charsmap %d: %s", t, err);
        if (y) {
            for (int k = 0; k < 8; k++) {
                char text[32];
                for (size_t i = 0; i < sizeof(text); i++)
                    text[i] = (char)ifl_rng_next(&rng);
                int32_t *r = tokenize(y, text, sizeof(text), 0, &n);
                CHECK(r != NULL);
                free(r);
            }
            ifl_vocab_free(y);
        }
    }
    unlink(tmp);
    ifl_gguf_free(base);
}

/* ---- WordPiece ---- */

static int ids_equal(const struct ifl_vocab *v, const char *a, const char *b)
{
    int64_t na, nb;
    int32_t *x = tokenize(v, a, strlen(a), 0, &na), *y = tokenize(v, b, strlen(b), 0, &nb);
    int eq = x && y && na == nb && memcmp(x, y, (size_t)na * sizeof(*x)) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_wordpiece(void)
{
    const struct ifl_vocab *v = vocabs[V_BERT];
    if (!v)
        return;
    CHECK_EQ(ifl_vocab_kind(v), IFL_VOCAB_WPM);
    /* [CLS] text [SEP] with add_special, as BERT's tokenizer does */
    int64_t n;
    int32_t *ids = tokenize(v, "hello world", 11, 1, &n);
    CHECK(ids && n == 4 && ids[0] == 101 && ids[3] == 102);
    free(ids);
    ids = tokenize(v, "hello world", 11, 0, &n);
    CHECK(ids && n == 2);
    free(ids);
    /* normalization: case, accents (NFD, marks dropped), control characters,
     * any Unicode whitespace between words */
    CHECK(ids_equal(v, "Caf\xc3\xa9 NA\xc3\xafVE", "cafe naive"));
    CHECK(ids_equal(v, "cafe\xcc\x81", "cafe"));
    CHECK(ids_equal(v, "he\x01llo\xe2\x80\x8b", "hello"));
    CHECK(ids_equal(v, "hello\xe3\x80\x80\t\nworld", "hello world"));
    /* punctuation and ideographs are words of their own */
    CHECK(ids_equal(v, "a,b", "a , b"));
    CHECK(ids_equal(v, "\xe4\xbd\xa0\xe5\xa5\xbd", "\xe4\xbd\xa0 \xe5\xa5\xbd"));
    /* a word longer than 100 characters is [UNK]; 100 are tokenized */
    char word[128];
    memset(word, 'a', sizeof(word));
    ids = tokenize(v, word, 101, 0, &n);
    CHECK(ids && n == 1 && ids[0] == 100);
    free(ids);
    ids = tokenize(v, word, 100, 0, &n);
    CHECK(ids && n > 1 && ids[0] != 100);
    free(ids);
    /* invalid UTF-8 bytes are dropped, like U+FFFD */
    CHECK(ids_equal(v, "he\xffllo \xc3", "hello"));
    /* specials in the text: [SEP] is a control token, parsed only when asked */
    int32_t buf[16];
    CHECK_EQ(ifl_tokenize(v, "[SEP]", 5, 0, 1, buf, 16, &n), 0);
    CHECK(n == 1 && buf[0] == 102);
    CHECK_EQ(ifl_tokenize(v, "[SEP]", 5, 0, 0, buf, 16, &n), 0);
    CHECK(n > 1);
    /* pieces: word starts show a space, continuations none */
    char piece[32];
    size_t pl = ifl_vocab_piece(v, ifl_vocab_find(v, "\xe2\x96\x81hello", 8), 0, piece, 32);
    CHECK(pl == 6 && memcmp(piece, " hello", 6) == 0);
}

/* ---- every pre-tokenizer ---- */

static const char MIXED[] = "Hello, World! It's 2024-11-27 12345678 \xe4\xbd\xa0\xe5\xa5\xbd"
                            "\xe4\xb8\x96\xe7\x95\x8c \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5"
                            "\xd1\x82  \t\n\n  caf\xc3\xa9 e\xcc\x81 \xf0\x9f\xa6\x99 "
                            "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 <sentinel:3> IMGIMGABZ   ";

/* Cuts text with pre-tokenizer name; the pieces as a "|"-joined string. */
static char *cut(const char *name, const char *text)
{
    const struct ifl_pretok *d = ifl_pretok_find(name, strlen(name));
    if (!d)
        return NULL;
    struct ifl_vocab v;
    memset(&v, 0, sizeof(v));
    char err[IFL_ERR_LEN] = "";
    if (ifl_pretok_compile(&v, d, err) < 0) {
        fprintf(stderr, "  %s: %s\n", name, err);
        return NULL;
    }
    struct ifl_pieces pa = {0}, pb = {0};
    size_t len = strlen(text);
    char *s = NULL;
    if (ifl_pretok_split(&v, text, len, &pa, &pb) == 0) {
        s = malloc(2 * len + 2);
        size_t w = 0, at = 0;
        int ok = 1;
        for (size_t i = 0; i < pa.n; i++) {
            ok &= pa.a[i].off == at && pa.a[i].len > 0; /* contiguous, none empty */
            at = pa.a[i].off + pa.a[i].len;
            if (i)
                s[w++] = '|';
            memcpy(s + w, text + pa.a[i].off, pa.a[i].len);
            w += pa.a[i].len;
        }
        s[w] = 0;
        if (!ok || at != len) {
            free(s);
            s = NULL;
        }
    }
    free(pa.a);
    free(pb.a);
    ifl_pretok_free(&v);
    return s;
}

static void check_cut(const char *name, const char *text, const char *want)
{
    char *got = cut(name, text);
    CHECK_MSG(got && strcmp(got, want) == 0, "%s: \"%s\" cut as \"%s\", not \"%s\"", name, text,
              got ? got : "(error)", want);
    free(got);
}

/* A byte-level vocabulary (the 256 alphabet characters, one merge) named
 * with pre-tokenizer pre. */
static int write_tiny_bpe(const char *path, const char *model, const char *pre, char *err)
{
    static char texts[256][4];
    const char *ptr[257];
    for (int b = 0; b < 256; b++) {
        size_t n = ifl_utf8_encode(ifl_vocab_bpe_byte_cp((unsigned char)b), texts[b]);
        texts[b][n] = 0;
        ptr[b] = texts[b];
    }
    ptr[256] = "ab";
    const char *merges[1] = {"a b"};
    struct ifl_gguf_writer *w = NULL;
    if (ifl_gguf_writer_create(&w) < 0)
        return -1;
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.model", model, strlen(model));
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptr, NULL, 257);
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 1);
    int rc = ifl_gguf_writer_write(w, path, err);
    ifl_gguf_writer_free(w);
    return rc;
}

static void test_every_pretokenizer(void)
{
    char path[512], err[IFL_ERR_LEN];
    snprintf(path, sizeof(path), "%s/pre.gguf", tmpdir);
    int n_names = 0;
    for (size_t i = 0; i < ifl_pretok_count(); i++) {
        const struct ifl_pretok *d = ifl_pretok_at(i);
        for (const char *p = d->names; *p;) {
            size_t len = strcspn(p, " ");
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)len, p);
            p += len;
            p += strspn(p, " ");
            n_names++;
            /* the name loads from a file and a mixed text cuts into
             * contiguous, non-empty pieces */
            err[0] = 0;
            CHECK_EQ(write_tiny_bpe(path, "gpt2", name, err), 0);
            struct ifl_vocab *v = load_path(path, err);
            CHECK_MSG(v, "pre %s: %s", name, err);
            char *c = cut(name, MIXED);
            CHECK_MSG(c != NULL, "pre %s cannot cut the text", name);
            free(c);
            if (!v)
                continue;
            int64_t n;
            int32_t *ids = tokenize(v, MIXED, sizeof(MIXED) - 1, 0, &n);
            CHECK_MSG(ids && n > 20, "pre %s: tokenize", name);
            if (ids && !(d->flags & (IFL_PRE_RAW | IFL_PRE_ESCAPE_WS))) {
                size_t bl;
                char *back = detokenize(v, ids, n, &bl);
                CHECK_MSG(bl == sizeof(MIXED) - 1 && memcmp(back, MIXED, bl) == 0,
                          "pre %s: round trip", name);
                free(back);
            }
            free(ids);
            ifl_vocab_free(v);
        }
    }
    unlink(path);
    fprintf(stderr, "  %d pre-tokenizer names\n", n_names);
    CHECK(n_names >= 88); /* llama.cpp's list at the mirror's commit */

    /* cuts the published patterns fix */
    check_cut("superbpe", "x1234567 12", "x|1|234|567| |12");
    check_cut("afmoe", "1234567 12345", "1|234|567| |12|345");
    check_cut("tiny_aya", "1234567 ab12", "1|234|567| ab|12");
    /* \b as Hugging Face's regex has it: digits before a letter are no group
     * (llama.cpp cuts every digit run in threes here) */
    check_cut("tiny_aya", "x 1314151\xe5\xa4\xa9", "x| |131|415|1|\xe5\xa4\xa9");
    check_cut("kimi-k2",
              "\xe4\xb8\xad\xe6\x96\x87"
              "abc",
              "\xe4\xb8\xad\xe6\x96\x87|abc");
    check_cut("gpt-4o", "HelloWorld's 12345", "Hello|World's| |123|45");
    check_cut("tekken", "HelloWorld 12", "Hello|World| |1|2");
    check_cut("bloom", "Hello, world!", "Hello|,| world|!");
    check_cut("viking", "ab12 c", "ab|1|2| c");
    check_cut("gemma4", "a b\n\nc", "a b|\n\n|c");
    check_cut("deepseek-coder", "ab, 12\n", "ab|,| |1|2|\n");
    check_cut("deepseek-llm", "Hi there  ", "Hi| there|  ");
    check_cut("deepseek-v3", "ab, 12345", "ab|,| |123|45");
    check_cut("falcon", "a+b 1234", "a|+|b| |123|4");
    check_cut("starcoder", "a 12", "a| |1|2");
    check_cut("qwen2", "a 12", "a| |1|2");
    check_cut("llama-bpe", "a 12345", "a| |123|45");
    /* (later patterns cut the pieces of earlier ones, sentinels included) */
    check_cut("chameleon", "<sentinel:3>  x", "<|sentinel|:|3|>|  |x");
    check_cut("bailingmoe", "it's 12", "it|'s| |1|2");
    check_cut("seed-coder", "a!!\n", "a|!!|\n");
    check_cut("exaone-moe", "Hello world 1", "Hello world| |1");
    check_cut("laguna", "a\nb", "a|\n|b");
    check_cut("whitespace", "ab  cd", "ab|  |cd");
    check_cut("jais-2", "a     b", "a|    | b");
    check_cut("qwen35", "e\xcc\x81t\xc3\xa9", "e\xcc\x81t\xc3\xa9");
}

/* ---- a raw-UTF-8 BPE (tokenizer.ggml.model = "gemma4") ---- */

static void test_gemma4_raw(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof(path), "%s/gemma4.gguf", tmpdir);
    /* ids 0..2 specials, 3..258 <0xNN>, then ▁ a b ▁a \n \n\n */
    static char texts[256][8];
    const char *ptr[265];
    int32_t types[265];
    ptr[0] = "<pad>";
    ptr[1] = "<eos>";
    ptr[2] = "<bos>";
    types[0] = types[1] = types[2] = IFL_TOK_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(texts[b], sizeof(texts[b]), "<0x%02X>", b);
        ptr[3 + b] = texts[b];
        types[3 + b] = IFL_TOK_BYTE;
    }
    const char *more[6] = {"\xe2\x96\x81",
                           "a",
                           "b",
                           "\xe2\x96\x81"
                           "a",
                           "\n",
                           "\n\n"};
    for (int i = 0; i < 6; i++) {
        ptr[259 + i] = more[i];
        types[259 + i] = IFL_TOK_NORMAL;
    }
    const char *merges[1] = {"\xe2\x96\x81 a"};
    struct ifl_gguf_writer *w = NULL;
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gemma4", 6);
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptr, NULL, 265);
    ifl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IFL_GGUF_INT32, types, 265);
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 1);
    ifl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    ifl_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    CHECK_EQ(ifl_gguf_writer_write(w, path, err), 0);
    ifl_gguf_writer_free(w);
    struct ifl_vocab *v = load_path(path, err);
    unlink(path);
    CHECK_MSG(v, "gemma4 vocabulary: %s", err);
    if (!v)
        return;
    CHECK_EQ(ifl_vocab_add_bos(v), 1); /* forced for Gemma 4, as llama.cpp does */
    /* " a b\n\né": spaces become ▁, "▁a" merges, "\n\n" is one token, é
     * has no token and falls back to its two bytes */
    static const char text[] = " a b\n\n\xc3\xa9";
    int64_t n;
    int32_t *ids = tokenize(v, text, sizeof(text) - 1, 1, &n);
    int32_t want[] = {2, 262, 259, 261, 264, 3 + 0xC3, 3 + 0xA9};
    CHECK(ids && n == 7 && memcmp(ids, want, sizeof(want)) == 0);
    if (ids && n == 7) {
        size_t bl;
        char *back = detokenize(v, ids + 1, n - 1, &bl);
        CHECK(bl == sizeof(text) - 1 && memcmp(back, text, bl) == 0);
        free(back);
    } else if (ids) {
        print_ids("got", ids, n);
    }
    free(ids);
    ifl_vocab_free(v);
}

/* ---- gpt-oss's harmony tokens ---- */

/* o200k_harmony cut to 20000 tokens with its 21 added tokens (README):
 * <|return|> and <|call|> end a turn, <|end|> only closes one message of
 * it, and the framing tokens show in generated text, where the server
 * reads the channels from. */
static void test_harmony_specials(void)
{
    const struct ifl_vocab *v = vocabs[V_GPTOSS];
    CHECK_MSG(v, "%s not loaded", names[V_GPTOSS]);
    if (!v)
        return;
    static const char *const eog[] = {"<|return|>", "<|call|>"};
    static const char *const shown[] = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>",
                                        "<|end|>"};
    for (size_t i = 0; i < 2; i++) {
        int32_t id = ifl_vocab_find(v, eog[i], strlen(eog[i]));
        CHECK_MSG(id >= 0 && ifl_vocab_is_eog(v, id), "%s: id %d not end-of-generation", eog[i],
                  id);
    }
    int32_t end = ifl_vocab_find(v, "<|end|>", 7);
    CHECK_MSG(end >= 0 && !ifl_vocab_is_eog(v, end), "<|end|> (id %d) must not end generation",
              end);
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        int32_t id = ifl_vocab_find(v, shown[i], strlen(shown[i]));
        char piece[32];
        size_t n = ifl_vocab_piece(v, id, 0, piece, sizeof piece);
        CHECK_MSG(id >= 0 && n == strlen(shown[i]) && !memcmp(piece, shown[i], n),
                  "%s: shows %zu bytes", shown[i], n);
    }
    /* a reply as the model writes it: special tokens parsed, text kept */
    const char *reply = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant"
                        "<|channel|>final<|message|>Hi!";
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_EQ(ifl_tokenize_alloc(v, reply, strlen(reply), 0, 1, &ids, &n), 0);
    int specials = 0;
    for (int64_t i = 0; i < n; i++)
        specials += ifl_vocab_is_control(v, ids[i]);
    CHECK_EQ(specials, 6);
    size_t len = 0;
    char *back = ids ? detokenize(v, ids, n, &len) : NULL;
    CHECK_MSG(back && len == strlen(reply) && !memcmp(back, reply, len), "shown: %s",
              back ? back : "(null)");
    free(back);
    free(ids);
    /* <|startoftext|> stays hidden as control tokens are */
    int32_t bos = ifl_vocab_bos(v);
    CHECK(bos >= 0 && ifl_vocab_piece(v, bos, 0, NULL, 0) == 0);
    CHECK_EQ(ifl_vocab_eos(v), ifl_vocab_find(v, "<|return|>", 10));
}

/* ---- Mistral's and DeepSeek-R1's tool and reasoning tags ---- */

#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_CALLS                                                                                   \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define DS_END                                                                                     \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"

/* A vocabulary with Mistral's tags and some of DeepSeek-R1's as control
 * tokens (gemma4's raw-UTF-8 model, as above): [TOOL_CALLS], [ARGS],
 * [CALL_ID], [THINK], [/THINK] and DeepSeek's call tags show in generated
 * text, where the server reads calls and reasoning; [INST], <｜User｜> and
 * the other control tokens stay hidden. */
static void test_tool_specials(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof(path), "%s/mistral.gguf", tmpdir);
    static const char *const tags[] = {"<pad>",  "<eos>",     "<bos>",   "[INST]",   "[/INST]",
                                       "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "[TOOL_CALLS]",
                                       DS_USER,  DS_CALLS,    DS_END};
    enum { N_TAGS = sizeof tags / sizeof tags[0] };
    static char texts[256][8];
    const char *ptr[N_TAGS + 256 + 2];
    int32_t types[N_TAGS + 256 + 2];
    for (int i = 0; i < N_TAGS; i++) {
        ptr[i] = tags[i];
        types[i] = IFL_TOK_CONTROL;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(texts[b], sizeof(texts[b]), "<0x%02X>", b);
        ptr[N_TAGS + b] = texts[b];
        types[N_TAGS + b] = IFL_TOK_BYTE;
    }
    ptr[N_TAGS + 256] = "a";
    ptr[N_TAGS + 257] = "b";
    types[N_TAGS + 256] = types[N_TAGS + 257] = IFL_TOK_NORMAL;
    struct ifl_gguf_writer *w = NULL;
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    ifl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gemma4", 6);
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptr, NULL, N_TAGS + 258);
    ifl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", IFL_GGUF_INT32, types, N_TAGS + 258);
    ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", NULL, NULL, 0);
    ifl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2);
    ifl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    ifl_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 0);
    CHECK_EQ(ifl_gguf_writer_write(w, path, err), 0);
    ifl_gguf_writer_free(w);
    struct ifl_vocab *v = load_path(path, err);
    unlink(path);
    CHECK_MSG(v, "tool tags' vocabulary: %s", err);
    if (!v)
        return;
    const char *reply = "[INST]a[/INST][THINK]b[/THINK][TOOL_CALLS]a[CALL_ID]b[ARGS]a" DS_USER
                        "a" DS_CALLS "b" DS_END;
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_EQ(ifl_tokenize_alloc(v, reply, strlen(reply), 0, 1, &ids, &n), 0);
    int specials = 0;
    for (int64_t i = 0; ids && i < n; i++)
        specials += ifl_vocab_is_control(v, ids[i]);
    CHECK_EQ(specials, 10);
    size_t len = 0;
    char *back = ids ? detokenize(v, ids, n, &len) : NULL;
    const char *want = "a[THINK]b[/THINK][TOOL_CALLS]a[CALL_ID]b[ARGS]aa" DS_CALLS "b" DS_END;
    CHECK_MSG(back && len == strlen(want) && !memcmp(back, want, len), "shown: %s",
              back ? back : "(null)");
    free(back);
    free(ids);
    ifl_vocab_free(v);
}

/* ---- bad input ---- */

static void test_bad_input(void)
{
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 41);
    char buf[64];
    for (int w = 0; w < V_COUNT; w++) {
        const struct ifl_vocab *v = vocabs[w];
        if (!v)
            continue;
        /* random bytes (mostly invalid UTF-8): no error, ids in range, the
         * same ids every time */
        for (int t = 0; t < 300; t++) {
            size_t len = ifl_rng_next(&rng) % sizeof(buf);
            for (size_t i = 0; i < len; i++)
                buf[i] = (char)(ifl_rng_next(&rng) & 0xff);
            int64_t n, n2;
            int32_t *ids = tokenize(v, buf, len, 1, &n);
            int32_t *ids2 = tokenize(v, buf, len, 1, &n2);
            CHECK_MSG(ids && ids2, "%s: random bytes fail", names[w]);
            if (ids && ids2) {
                CHECK(n == n2 && memcmp(ids, ids2, (size_t)n * sizeof(*ids)) == 0);
                for (int64_t i = 0; i < n; i++)
                    CHECK(ids[i] >= 0 && ids[i] < ifl_vocab_n_tokens(v));
            }
            free(ids);
            free(ids2);
        }
        /* too long: a clear EINVAL, nothing written */
        int64_t n = -1;
        int32_t one[1] = {-7};
        CHECK_EQ(ifl_tokenize(v, "x", IFL_TOKENIZE_MAX_LEN + 1, 0, 0, one, 1, &n), IFL_EINVAL);
        CHECK(n == 0 && one[0] == -7);
    }
    /* a large text (4 MiB of mixed script, long words and long runs of one
     * character) finishes and gives as many ids on every run */
    size_t big = (size_t)4 << 20;
    char *text = malloc(big);
    for (size_t i = 0; i < big;) {
        size_t k = ifl_rng_next(&rng) % (sizeof(MIXED) - 1);
        size_t take = sizeof(MIXED) - 1 - k;
        if (i + take > big)
            take = big - i;
        memcpy(text + i, MIXED + k, take);
        i += take;
    }
    memset(text + big / 2, 'a', 300000);
    memset(text + big / 4, ' ', 200000);
    for (int w = 0; w < V_COUNT; w++) {
        /* (not Gemma's: its 6415 added tokens are each searched for in the
         * whole text, which takes tens of seconds on 4 MiB) */
        if (!vocabs[w] || w == V_GEMMA)
            continue;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int64_t n;
        int32_t *ids = tokenize(vocabs[w], text, big, 0, &n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CHECK_MSG(ids && n > 1000, "%s: 4 MiB text", names[w]);
        fprintf(stderr, "  %s: 4 MiB -> %lld ids in %.0f ms\n", names[w], (long long)n,
                (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
        free(ids);
    }
    free(text);

    /* an unknown pre-tokenizer or model is refused with its name */
    char path[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof(path), "%s/bad.gguf", tmpdir);
    CHECK_EQ(write_tiny_bpe(path, "gpt2", "no-such-pre", err), 0);
    struct ifl_gguf *g = NULL;
    CHECK_EQ(ifl_gguf_open(&g, path, err), 0);
    struct ifl_vocab *v = NULL;
    CHECK_EQ(ifl_vocab_load(&v, g, err), IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "'no-such-pre'") && strstr(err, "not supported"), "err: %s", err);
    ifl_gguf_free(g);
    CHECK_EQ(write_tiny_bpe(path, "rwkv", "default", err), 0);
    CHECK_EQ(ifl_gguf_open(&g, path, err), 0);
    CHECK_EQ(ifl_vocab_load(&v, g, err), IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "'rwkv'") && strstr(err, "bert"), "err: %s", err);
    ifl_gguf_free(g);
    unlink(path);
}

int main(void)
{
    char path[1024], err[IFL_ERR_LEN];
    for (int w = 0; w < V_COUNT; w++) {
        snprintf(path, sizeof(path), "%s/vocab/%s.gguf", build_dir(), names[w]);
        err[0] = 0;
        vocabs[w] = load_path(path, err);
        if (!vocabs[w])
            fprintf(stderr, "  cannot load %s: %s (make unpacks it from tests/data/vocab/)\n", path,
                    err);
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/ifl_vocab_XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    T_RUN(test_vectors_bert);
    T_RUN(test_vectors_deepseek_coder);
    T_RUN(test_vectors_deepseek_llm);
    T_RUN(test_vectors_falcon);
    T_RUN(test_vectors_starcoder);
    T_RUN(test_vectors_gpt4o);
    T_RUN(test_vectors_per_pretokenizer);
    T_RUN(test_vectors_gemma);
    T_RUN(test_vectors_ugm);
    T_RUN(test_ugm);
    T_RUN(test_wordpiece);
    T_RUN(test_every_pretokenizer);
    T_RUN(test_gemma4_raw);
    T_RUN(test_tool_specials);
    T_RUN(test_harmony_specials);
    T_RUN(test_bad_input);
    for (int w = 0; w < V_COUNT; w++)
        ifl_vocab_free(vocabs[w]);
    rmdir(tmpdir);
    return t_done();
}
