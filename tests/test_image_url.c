/*
 * Image URLs on the server (src/server/dataurl.c): data URLs and bare
 * base64, the --image-url-allow prefixes (a host-only prefix ends at the
 * host: neither a longer host name nor user info slips past it; other
 * schemes and unlisted URLs are refused before any fetch), and TGI's
 * ![](URL) scan. The fetcher is a stand-in that records what it was asked
 * for, so no network is used here (tests/test_server_mm_routes.sh fetches
 * for real).
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"
#include "t.h"

static int g_calls;
static char g_last[512];

static int fake_fetch(void *user, const char *url, size_t max_bytes, unsigned char **out, size_t *n,
                      char *err)
{
    (void)user;
    (void)err;
    g_calls++;
    snprintf(g_last, sizeof g_last, "%s", url);
    CHECK(max_bytes > 1000);
    *out = (unsigned char *)strdup("PNGDATA");
    *n = 7;
    return 0;
}

static int try_url(struct ifl_server *s, const char *url, char *err)
{
    unsigned char *out = NULL;
    size_t n = 0;
    int rc = ifl_server_image_url(s, url, strlen(url), 0, &out, &n, err);
    free(out);
    return rc;
}

static void test_allow_list(void)
{
    static const char *const allow[] = {"https://img.example.com", "http://127.0.0.1:8000/pics/"};
    struct ifl_server *s = calloc(1, sizeof *s);
    char err[IFL_ERR_LEN] = "";
    /* none allowed: refused, nothing fetched */
    CHECK_EQ(try_url(s, "https://img.example.com/a.png", err), IFL_EINVAL);
    CHECK(strstr(err, "does not fetch remote URLs") != NULL);
    s->cfg.image_url_allow = allow;
    s->cfg.n_image_url_allow = 2;
    s->cfg.fetch_image = fake_fetch;
    static const char *const ok[] = {"https://img.example.com/a.png", "https://img.example.com",
                                     "https://IMG.example.com/x?y=1",
                                     "http://127.0.0.1:8000/pics/a.png"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int before = g_calls;
        CHECK_MSG(try_url(s, ok[i], err) == 0, "%s: %s", ok[i], err);
        CHECK_EQ(g_calls, before + 1);
        CHECK_STR(g_last, ok[i]);
    }
    static const char *const no[] = {
        "https://img.example.com.evil.org/a.png", "https://img.example.com@evil.org/a.png",
        "https://img.example.comx/a.png",         "http://img.example.com/a.png",
        "http://127.0.0.1:8000/pictures/a.png",   "http://127.0.0.1:8000/",
        "http://127.0.0.1:80001/pics/a.png"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        int before = g_calls;
        CHECK_MSG(try_url(s, no[i], err) == IFL_EINVAL, "%s was allowed", no[i]);
        CHECK_EQ(g_calls, before);
        CHECK(strstr(err, "not under an allowed prefix") != NULL);
    }
    /* other schemes are not URLs to fetch: data URLs only */
    CHECK_EQ(try_url(s, "ftp://img.example.com/a.png", err), IFL_EINVAL);
    CHECK(strstr(err, "must be a data URL") != NULL);
    free(s);
}

static void test_data(void)
{
    struct ifl_server *s = calloc(1, sizeof *s);
    char err[IFL_ERR_LEN] = "";
    unsigned char *out = NULL;
    size_t n = 0;
    const char *u = "data:image/png;base64,aGVsbG8=";
    CHECK_EQ(ifl_server_image_url(s, u, strlen(u), 0, &out, &n, err), 0);
    CHECK(n == 5 && out && !memcmp(out, "hello", 5));
    free(out);
    /* bare base64: only where raw_b64 says so (llama.cpp's multimodal_data) */
    CHECK_EQ(ifl_server_image_url(s, "aGVsbG8=", 8, 0, &out, &n, err), IFL_EINVAL);
    CHECK_EQ(ifl_server_image_url(s, "aGVsbG8=", 8, 1, &out, &n, err), 0);
    CHECK(n == 5 && out && !memcmp(out, "hello", 5));
    free(out);
    CHECK_EQ(ifl_server_image_url(s, "aGV*bG8=", 8, 1, &out, &n, err), IFL_EINVAL);
    CHECK(strstr(err, "bad character at offset 3") != NULL);
    free(s);
}

static void test_markdown(void)
{
    struct ifl_server *s = calloc(1, sizeof *s);
    struct ifl_gen_job *j = calloc(1, sizeof *j);
    char err[IFL_ERR_LEN] = "", *text = NULL;
    size_t tn = 0;
    const char *in = "a ![](data:image/png;base64,aGVsbG8=) b ![](data:image/png;base64,aGk=)c";
    CHECK_EQ(ifl_server_md_images(s, j, in, strlen(in), "<M>", &text, &tn, err), 0);
    CHECK(text && tn == strlen("a <M> b <M>c") && !memcmp(text, "a <M> b <M>c", tn));
    CHECK_EQ(j->n_images, 2);
    CHECK(j->images[1].size == 2 && !memcmp(j->images[1].data, "hi", 2));
    free(text);
    /* no image, an alt text, an unclosed one: no images, the text kept */
    const char *plain[] = {"no images", "![alt](data:image/png;base64,aGk=)", "x ![](data:"};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(ifl_server_md_images(s, j, plain[i], strlen(plain[i]), "<M>", &text, &tn, err), 0);
        CHECK(text == NULL);
    }
    CHECK_EQ(j->n_images, 2);
    /* a bad one names its index */
    const char *badin = "![](data:image/png;base64,aGk=) ![](https://x.org/a.png)";
    CHECK_EQ(ifl_server_md_images(s, j, badin, strlen(badin), "<M>", &text, &tn, err), IFL_EINVAL);
    CHECK(strstr(err, "`inputs`: image 3: this server does not fetch") != NULL);
    CHECK(text == NULL);
    for (int i = 0; i < j->n_images; i++)
        free(j->image_data[i]);
    free(j);
    free(s);
}

int main(void)
{
    T_RUN(test_allow_list);
    T_RUN(test_data);
    T_RUN(test_markdown);
    return t_done();
}
