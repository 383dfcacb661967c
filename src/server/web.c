/*
 * The playground's routes: the page (/ and /dashboard serve the same file;
 * its script picks the view from the path), its script and style sheet,
 * and /openapi.json, all embedded at build time (web.h). Every one carries
 * the ETag of its content: the page is revalidated on each load
 * (Cache-Control: no-cache), so a browser never runs a stale script after
 * an upgrade, and an unchanged file costs a 304 without a body.
 */
#include <microhttpd.h>
#include <string.h>

#include "server/internal.h"
#include "server/web.h"

static const struct ifl_web_asset *find_asset(const char *name, size_t n)
{
    for (int i = 0; i < ifl_web_n_assets; i++)
        if (strlen(ifl_web_assets[i].path) == n && !strncmp(ifl_web_assets[i].path, name, n))
            return &ifl_web_assets[i];
    return NULL;
}

/* RFC 9110 13.1.2: If-None-Match holds "*" or a list of entity tags (weak
 * ones compare by their opaque part); our tags are 32 hex digits in quotes,
 * so finding the quoted tag in the list is the comparison. */
static int not_modified(struct ifl_hconn *c, const struct ifl_web_asset *a)
{
    const char *h = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "If-None-Match");
    if (!h)
        return 0;
    while (*h == ' ')
        h++;
    return !strcmp(h, "*") || strstr(h, a->etag) != NULL;
}

static int serve(struct ifl_hconn *c, const char *name, size_t n)
{
    const struct ifl_web_asset *a = find_asset(name, n);
    if (!a) /* the build embeds every file the routes name */
        return ifl_http_reply_oai_error(c, 500, NULL, "the playground's files are missing");
    return ifl_http_reply_asset(c, a->type, a->data, a->len, a->etag, not_modified(c, a));
}

int ifl_web_page(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    return serve(c, "/index.html", 11);
}

int ifl_web_file(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    /* the route's path is the file's name (/app.js); a trailing slash of
     * the request is not part of it */
    size_t n = strlen(c->url);
    while (n > 1 && c->url[n - 1] == '/')
        n--;
    return serve(c, c->url, n);
}
