/*
 * The playground's files (src/server/web/), embedded in the binary at build
 * time by src/server/web/embed.sh into $(BUILD)/gen/web_assets.c: the page
 * served at / and /dashboard, its script and style sheet, and the OpenAPI
 * document. Immutable: read from any thread.
 */
#ifndef IFL_SERVER_WEB_H
#define IFL_SERVER_WEB_H

#include <stddef.h>

struct ifl_web_asset {
    const char *path;          /* "/index.html": the file's name under src/server/web/ */
    const char *type;          /* Content-Type */
    const unsigned char *data; /* [len] bytes, then a NUL */
    size_t len;
    const char *etag; /* "\"<32 hex of the content's SHA-256>\"", quotes included */
};

extern const struct ifl_web_asset ifl_web_assets[];
extern const int ifl_web_n_assets;

#endif
