/*
 * Images of chat requests (OpenAI's image_url content parts) as RFC 2397
 * data URLs: "data:image/png;base64,..." or image/jpeg. The server does
 * not fetch remote URLs: a request naming one gets 400 with a sentence
 * saying so. What the URL holds is untrusted: the base64 text is checked
 * character by character, and the bytes are only decoded here; the image
 * itself is checked when the executor takes it (src/vision/image.c).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/err.h"
#include "server/internal.h"

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

int ifl_server_data_url(const char *url, size_t len, unsigned char **out, size_t *n, char *err)
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
    if ((len >= 7 && !strncasecmp(url, "http://", 7)) ||
        (len >= 8 && !strncasecmp(url, "https://", 8)))
        return ifl_err(err, IFL_EINVAL,
                       "this server does not fetch remote URLs; send the image inline as a data "
                       "URL (data:image/png;base64,... or data:image/jpeg;base64,...)");
    return ifl_err(err, IFL_EINVAL,
                   "must be a data URL (data:image/png;base64,... or data:image/jpeg;base64,...)");
}
