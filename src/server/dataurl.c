/*
 * Images of requests by URL: OpenAI's image_url content parts, TGI's
 * ![](URL) in `inputs`, llama.cpp's multimodal_data. RFC 2397 data URLs
 * ("data:image/png;base64,..." or image/jpeg) are decoded here; a remote
 * http(s) URL is fetched only when it starts with one of the server's
 * --image-url-allow prefixes (the command line's fetcher, libcurl), and
 * is otherwise refused with a sentence saying so. What a URL holds is
 * untrusted: the base64 text is checked character by character; the image
 * itself is checked when the executor takes it (src/vision/image.c).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"
#include "vision/image.h"

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Decodes base64 (standard or URL-safe alphabet, padding optional, no
 * whitespace) into a malloc'd buffer. */
static int b64_decode(const char *s, size_t n, unsigned char **out, size_t *n_out, char *err)
{
    while (n && s[n - 1] == '=')
        n--;
    if (n % 4 == 1)
        return ifl_err(err, IFL_EINVAL, "its base64 data has a bad length (%zu characters)", n);
    unsigned char *p = malloc(n / 4 * 3 + 3);
    if (!p)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(p);
            return ifl_err(err, IFL_EINVAL, "its base64 data has a bad character at offset %zu", i);
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            p[k++] = (unsigned char)(acc >> bits);
        }
    }
    *out = p;
    *n_out = k;
    return 0;
}

static int data_url(const char *url, size_t len, unsigned char **out, size_t *n, char *err)
{
    static const char *const types[] = {"image/png", "image/jpeg", "image/jpg"};
    *out = NULL;
    *n = 0;
    if (len >= 5 && !strncasecmp(url, "data:", 5)) {
        const char *comma = memchr(url, ',', len);
        if (!comma)
            return ifl_err(err, IFL_EINVAL, "a data URL needs a comma before its data");
        const char *mt = url + 5;
        size_t ml = (size_t)(comma - mt);
        int known = 0;
        for (size_t i = 0; i < sizeof types / sizeof types[0] && !known; i++) {
            size_t tl = strlen(types[i]);
            known = ml >= tl && !strncasecmp(mt, types[i], tl) && (ml == tl || mt[tl] == ';');
        }
        if (!known)
            return ifl_err(err, IFL_EINVAL,
                           "a data URL of type '%.*s': PNG and JPEG images are accepted "
                           "(data:image/png;base64,... or data:image/jpeg;base64,...)",
                           (int)(ml < 64 ? ml : 64), mt);
        if (ml < 7 || strncasecmp(comma - 7, ";base64", 7))
            return ifl_err(err, IFL_EINVAL, "a data URL must be base64 (;base64,)");
        size_t dl = len - (size_t)(comma + 1 - url);
        if (dl == 0)
            return ifl_err(err, IFL_EINVAL, "the data URL holds no data");
        return b64_decode(comma + 1, dl, out, n, err);
    }
    return ifl_err(err, IFL_EINVAL,
                   "must be a data URL (data:image/png;base64,... or data:image/jpeg;base64,...)");
}

/* Whether url falls under prefix: it starts with it and, when the prefix
 * ends with the host (no path), the host ends there too, so that
 * "https://example.com" admits neither "https://example.com.evil.org/"
 * nor "https://example.com@evil.org/". */
static int allowed_by(const char *url, size_t len, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (!pl || len < pl || strncasecmp(url, prefix, pl))
        return 0;
    const char *host = strstr(prefix, "://");
    int has_path = host && strchr(host + 3, '/') != NULL;
    if (has_path || len == pl)
        return 1;
    char next = url[pl];
    return next == '/' || next == '?' || next == '#';
}

int ifl_server_image_url(struct ifl_server *s, const char *url, size_t len, int raw_b64,
                         unsigned char **out, size_t *n, char *err)
{
    *out = NULL;
    *n = 0;
    int remote = (len >= 7 && !strncasecmp(url, "http://", 7)) ||
                 (len >= 8 && !strncasecmp(url, "https://", 8));
    if (!remote) {
        if (raw_b64 && !(len >= 5 && !strncasecmp(url, "data:", 5)))
            return b64_decode(url, len, out, n, err);
        return data_url(url, len, out, n, err);
    }
    const struct ifl_server_config *cfg = &s->cfg;
    if (!cfg->n_image_url_allow || !cfg->fetch_image)
        return ifl_err(err, IFL_EINVAL,
                       "this server does not fetch remote URLs (none is allowed: see "
                       "--image-url-allow); send the image inline as a data URL "
                       "(data:image/png;base64,... or data:image/jpeg;base64,...)");
    int ok = 0;
    for (int i = 0; i < cfg->n_image_url_allow && !ok; i++)
        ok = allowed_by(url, len, cfg->image_url_allow[i]);
    if (!ok)
        return ifl_err(err, IFL_EINVAL,
                       "the URL '%.80s%s' is not under an allowed prefix (--image-url-allow); "
                       "send the image inline as a data URL",
                       url, len > 80 ? "..." : "");
    if (memchr(url, 0, len) || len > 4096)
        return ifl_err(err, IFL_EINVAL, "a URL of %zu bytes with a NUL or over 4096 bytes", len);
    char *z = strndup(url, len), why[IFL_ERR_LEN] = "";
    if (!z)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    int rc = cfg->fetch_image(cfg->fetch_image_user, z, IFL_IMAGE_MAX_BYTES, out, n, why);
    free(z);
    if (rc) {
        *out = NULL;
        *n = 0;
        return ifl_err(err, IFL_EINVAL, "fetching '%.80s%s': %s", url, len > 80 ? "..." : "", why);
    }
    return 0;
}

void ifl_server_image_marker(char out[64])
{
    static atomic_uint_fast64_t marker_no;
    snprintf(out, 64, "<__media_%016llx__>",
             (unsigned long long)(ifl_now_us() * 0x9e3779b97f4a7c15ull ^
                                  atomic_fetch_add(&marker_no, 1) * 0xbf58476d1ce4e5b9ull));
}

int ifl_server_md_images(struct ifl_server *s, struct ifl_gen_job *j, const char *in, size_t n,
                         const char *marker, char **text, size_t *tn, char *err)
{
    *text = NULL;
    *tn = 0;
    struct ifl_buf b = {0};
    const char *p = in, *end = in + n;
    size_t ml = strlen(marker);
    int rc = 0, found = 0;
    /* TGI's pattern: "![](" up to the first ")" (an empty alt text) */
    for (const char *q; !rc && (q = memmem(p, (size_t)(end - p), "![](", 4));) {
        const char *u = q + 4, *close = memchr(u, ')', (size_t)(end - u));
        if (!close)
            break; /* no closing parenthesis: text, as TGI reads it */
        if (j->n_images == IFL_MAX_IMAGES_PER_REQUEST) {
            rc = ifl_err(err, IFL_EINVAL, "`inputs`: at most %d images a request",
                         IFL_MAX_IMAGES_PER_REQUEST);
            break;
        }
        char why[IFL_ERR_LEN] = "";
        unsigned char *data = NULL;
        size_t dn = 0;
        rc = ifl_server_image_url(s, u, (size_t)(close - u), 0, &data, &dn, why);
        if (rc) {
            ifl_err(err, rc, "`inputs`: image %d: %s", j->n_images, why);
            break;
        }
        j->image_data[j->n_images] = data;
        j->images[j->n_images] = (struct ifl_image_input){.data = data, .size = (int64_t)dn};
        j->n_images++;
        found = 1;
        ifl_buf_add(&b, p, (size_t)(q - p));
        ifl_buf_add(&b, marker, ml);
        p = close + 1;
    }
    if (found)
        ifl_buf_add(&b, p, (size_t)(end - p));
    if (!rc && b.oom)
        rc = ifl_err(err, IFL_ENOMEM, "out of memory");
    if (rc || !found) {
        ifl_buf_free(&b);
        return rc;
    }
    *text = b.p;
    *tn = b.len;
    return 0;
}
