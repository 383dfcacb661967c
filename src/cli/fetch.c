/*
 * The server's fetcher of remote images (serve --image-url-allow): one
 * libcurl easy transfer per image, http and https only, no redirects (a
 * redirect could leave the allowed prefixes), bounded in time and bytes.
 * The server has already checked the URL against the allow-list; here the
 * bytes are only fetched (the image is checked when the executor decodes
 * it). Runs on an HTTP pool thread: CURLOPT_NOSIGNAL, and
 * curl_global_init once at start-up (cli_fetch_init).
 */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/err.h"

struct sink {
    unsigned char *p;
    size_t n, cap, max;
    int over;
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *user)
{
    struct sink *s = user;
    size_t k = size * nmemb;
    if (k > s->max - s->n) {
        s->over = 1;
        return 0; /* aborts the transfer */
    }
    if (s->n + k > s->cap) {
        size_t cap = s->cap ? s->cap : 65536;
        while (cap < s->n + k)
            cap *= 2;
        unsigned char *q = realloc(s->p, cap);
        if (!q)
            return 0;
        s->p = q;
        s->cap = cap;
    }
    memcpy(s->p + s->n, data, k);
    s->n += k;
    return k;
}

int cli_fetch_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

int cli_fetch_image(void *user, const char *url, size_t max_bytes, unsigned char **out, size_t *n,
                    char *err)
{
    (void)user;
    *out = NULL;
    *n = 0;
    CURL *h = curl_easy_init();
    if (!h)
        return ifl_err(err, IFL_ENOMEM, "cannot start a transfer");
    struct sink s = {.max = max_bytes};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "inflight");
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    int st = 0;
    if (s.over || rc == CURLE_FILESIZE_EXCEEDED)
        st = ifl_err(err, IFL_EINVAL, "the image is over %zu bytes", max_bytes);
    else if (rc != CURLE_OK)
        st = ifl_err(err, IFL_EIO, "%s", cerr[0] ? cerr : curl_easy_strerror(rc));
    else if (code != 200)
        st = ifl_err(err, IFL_EIO, "the server answered HTTP %ld%s", code,
                     code >= 300 && code < 400 ? " (redirects are not followed)" : "");
    else if (!s.n)
        st = ifl_err(err, IFL_EINVAL, "the server sent no bytes");
    if (st) {
        free(s.p);
        return st;
    }
    *out = s.p;
    *n = s.n;
    return 0;
}
