#!/usr/bin/env bash
# The playground of `inflight serve` (issue 44) on 127.0.0.1 with the
# stories260K model: the page's headers (Content-Security-Policy, an ETag
# that is the content's hash, 304 on If-None-Match), --no-playground, the
# page without a key while the API needs one, /openapi.json against the
# routes the router really has (read from src/server/http.c's table, so a
# route added without its OpenAPI entry fails here), then the page itself in
# Debian's headless chromium driven by playwright-core
# (tests/server/playground.test.mjs): streaming, stop, guided decoding, the
# dashboard under load (on a server with n-gram speculation), HTML in model
# text, phone width, keyboard.
# Screenshots go to $BUILD/playground/. Every server started here is
# stopped here.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
pass=0
fail=0
. "$(dirname "$0")/lib.sh"

req() { # METHOD PATH [curl args...] -> "CODE" (body in $tmp/body, headers in $tmp/hdr)
    local method=$1 path=$2; shift 2
    : >"$tmp/body" # curl leaves the file alone when no body comes (304)
    if [ "$method" = HEAD ]; then # curl -I reads no body
        curl -s -m 30 -I -D "$tmp/hdr" -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT$path" "$@"
        return
    fi
    curl -s -m 30 -D "$tmp/hdr" -o "$tmp/body" -w '%{http_code}' -X "$method" \
        "http://127.0.0.1:$PORT$path" "$@"
}
hdr() { grep -i "^$1:" "$tmp/hdr" | head -1 | cut -d' ' -f2- | tr -d '\r'; }

start_server main || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
MAIN=$PORT
B="http://127.0.0.1:$PORT"

# ---- the page's headers ----
check "GET / 200" 200 "$(req GET /)"
has "GET / is the page" '<script src="app.js" defer></script>' "$(cat "$tmp/body")"
check "GET / text/html" "text/html; charset=utf-8" "$(hdr Content-Type)"
has "CSP: scripts from the server only" "script-src 'self'" "$(hdr Content-Security-Policy)"
has "CSP: nothing by default" "default-src 'none'" "$(hdr Content-Security-Policy)"
check "Cache-Control: revalidate every load" "no-cache" "$(hdr Cache-Control)"
check "X-Content-Type-Options" "nosniff" "$(hdr X-Content-Type-Options)"
etag=$(hdr ETag)
check "the ETag is the page's SHA-256 (the build's content hash)" \
    "\"$(sha256sum src/server/web/index.html | cut -c1-32)\"" "$etag"
check "If-None-Match with the ETag: 304" 304 "$(req GET / -H "If-None-Match: $etag")"
check "304: no body" 0 "$(wc -c <"$tmp/body")"
check "304 keeps the ETag" "$etag" "$(hdr ETag)"
check "If-None-Match in a list, weak: 304" 304 "$(req GET / -H "If-None-Match: \"x\", W/$etag")"
check "If-None-Match: * 304" 304 "$(req GET / -H 'If-None-Match: *')"
check "another ETag (an upgrade): 200 with the page" "200 $(wc -c <src/server/web/index.html)" \
    "$(req GET / -H 'If-None-Match: "0123456789abcdef0123456789abcdef"') $(wc -c <"$tmp/body")"
check "HEAD / 200 with the ETag" "200 $etag" "$(req HEAD /) $(hdr ETag)"
check "GET /dashboard 200: the same page" "200 $etag" "$(req GET /dashboard) $(hdr ETag)"
check "GET /dashboard/ 200" 200 "$(req GET /dashboard/)"
check "GET /app.js 200 text/javascript" "200 text/javascript; charset=utf-8" "$(req GET /app.js) $(hdr Content-Type)"
cmp -s "$tmp/body" src/server/web/app.js && ok "/app.js is src/server/web/app.js" || bad "/app.js is src/server/web/app.js"
check "/app.js ETag" "\"$(sha256sum src/server/web/app.js | cut -c1-32)\"" "$(hdr ETag)"
check "GET /app.css 200 text/css" "200 text/css; charset=utf-8" "$(req GET /app.css) $(hdr Content-Type)"
check "GET /openapi.json 200" "200 application/json" "$(req GET /openapi.json) $(hdr Content-Type)"
cmp -s "$tmp/body" src/server/web/openapi.json && ok "/openapi.json is src/server/web/openapi.json" ||
    bad "/openapi.json is src/server/web/openapi.json"
check "POST / is still TGI's generate" 200 "$(req POST / -d '{"inputs":"Once","parameters":{"max_new_tokens":3}}')"
check "PUT / 405" 405 "$(req PUT /)"
check "PUT / Allow lists the page's GET" "POST, GET, HEAD" "$(hdr Allow)"
check "GET /index.html 404 (the page is /)" 404 "$(req GET /index.html)"

# ---- /openapi.json: OpenAPI 3, and every route the router has ----
node - src/server/http.c src/server/web/openapi.json "$B" >"$tmp/oa.log" 2>&1 <<'EOF'
const fs = require('fs');
const [src, docFile, base] = process.argv.slice(2);
let pass = 0, fail = 0;
const check = (name, cond, detail) => {
  if (cond) { pass++; console.log('ok   ' + name); }
  else { fail++; console.log('FAIL ' + name + (detail !== undefined ? ': ' + JSON.stringify(detail) : '')); }
};
// the routes, from the router's own table
const table = /static const struct route ROUTES\[\] = \{([\s\S]*?)\n\};/.exec(fs.readFileSync(src, 'utf8'));
check('the route table is found in http.c', !!table);
const routes = [...(table ? table[1] : '').matchAll(/^\s*\{"([A-Z]+)",\s*"([^"]+)",\s*([^,]+),/gm)]
  .map((m) => ({ method: m[1].toLowerCase(), path: m[2], head: /ROUTE_HEAD/.test(m[3]) }));
check('the table holds the routes (at least 19)', routes.length >= 19, routes.length);
const doc = JSON.parse(fs.readFileSync(docFile, 'utf8'));
// structure (OpenAPI 3.0)
check('openapi is 3.x', typeof doc.openapi === 'string' && /^3\.\d+\.\d+$/.test(doc.openapi), doc.openapi);
check('info has title and version', doc.info && typeof doc.info.title === 'string' && typeof doc.info.version === 'string');
check('paths is an object', doc.paths && typeof doc.paths === 'object');
const VERBS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const refs = [];
const walk = (o) => {
  if (Array.isArray(o)) o.forEach(walk);
  else if (o && typeof o === 'object') for (const [k, v] of Object.entries(o)) { if (k === '$ref') refs.push(v); else walk(v); }
};
walk(doc);
const resolve = (r) => r.startsWith('#/') && r.slice(2).split('/').reduce((o, k) => (o ? o[k] : undefined), doc);
const badRefs = refs.filter((r) => !resolve(r));
check(`every $ref resolves (${refs.length})`, refs.length > 0 && badRefs.length === 0, badRefs);
const ops = [];
let shapeOk = true;
for (const [p, item] of Object.entries(doc.paths || {})) {
  if (!p.startsWith('/')) { shapeOk = false; console.log('  path not starting with /: ' + p); }
  for (const [verb, op] of Object.entries(item)) {
    if (!VERBS.includes(verb)) { shapeOk = false; console.log('  not an operation: ' + p + ' ' + verb); continue; }
    ops.push({ method: verb, path: p });
    if (!op.responses || !Object.keys(op.responses).length) { shapeOk = false; console.log('  no responses: ' + verb + ' ' + p); }
    for (const [code, r] of Object.entries(op.responses || {}))
      if (!/^([1-5]\d\d|default)$/.test(code) || !(r.description || r.$ref)) { shapeOk = false; console.log('  bad response ' + code + ': ' + verb + ' ' + p); }
    for (const prm of op.parameters || [])
      if (!prm.name || !['query', 'header', 'path', 'cookie'].includes(prm.in) || !prm.schema) { shapeOk = false; console.log('  bad parameter: ' + verb + ' ' + p); }
    if (op.requestBody && !(op.requestBody.content && Object.keys(op.requestBody.content).length)) { shapeOk = false; console.log('  requestBody without content: ' + verb + ' ' + p); }
    if (verb === 'post' && !op.requestBody) { shapeOk = false; console.log('  POST without requestBody: ' + p); }
  }
}
check('every operation has responses, its parameters and bodies are well formed', shapeOk);
const key = (o) => o.method.toUpperCase() + ' ' + o.path;
const inDoc = new Set(ops.map(key)), inRouter = new Set(routes.map(key));
const missing = [...inRouter].filter((k) => !inDoc.has(k));
const extra = [...inDoc].filter((k) => !inRouter.has(k));
check('every route of the router is in /openapi.json', missing.length === 0, missing);
check('every operation of /openapi.json is a route of the router', extra.length === 0, extra);
// and the server answers each (neither 404 nor 405)
(async () => {
  const wrong = [];
  for (const r of routes) {
    const res = await fetch(base + r.path, r.method === 'post'
      ? { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: r.path === '/lora-adapters' ? '[]' : '{}' }
      : { method: 'GET' });
    await res.arrayBuffer();
    if (res.status === 404 || res.status === 405) wrong.push(key(r) + ': ' + res.status);
    if (r.head && r.method === 'get') {
      const h = await fetch(base + r.path, { method: 'HEAD' });
      if (h.status === 404 || h.status === 405) wrong.push('HEAD ' + r.path + ': ' + h.status);
    }
  }
  check(`the server answers every route (${routes.length})`, wrong.length === 0, wrong);
  console.log(`${pass} passed, ${fail} failed`);
})();
EOF
add_counts "$tmp/oa.log"
grep -v -e "^ok" -e " passed, " "$tmp/oa.log" | head -20
echo "openapi: $cnt_p passed, $cnt_f failed"

# ---- --no-playground ----
start_server off --no-playground || exit 1
for path in / /dashboard /app.js /app.css; do
    check "--no-playground: GET $path 404" 404 "$(req GET $path)"
done
check "--no-playground: HEAD / 404" 404 "$(req HEAD /)"
check "--no-playground: POST / is still TGI's" 200 "$(req POST / -d '{"inputs":"Once","parameters":{"max_new_tokens":3}}')"
check "--no-playground: PUT / allows POST alone" "405 POST" "$(req PUT /) $(hdr Allow)"
check "--no-playground: /openapi.json stays" 200 "$(req GET /openapi.json)"

# ---- with --api-key: the page without the key, the API with it ----
start_server keyed --api-key sesame || exit 1
check "--api-key: GET / without the key 200 (a browser's navigation has none)" 200 "$(req GET /)"
check "--api-key: GET /dashboard without the key 200" 200 "$(req GET /dashboard)"
check "--api-key: POST / without the key 401" 401 "$(req POST / -d '{"inputs":"Once"}')"
check "--api-key: /openapi.json without the key 401" 401 "$(req GET /openapi.json)"
check "--api-key: /openapi.json with the key 200" 200 "$(req GET /openapi.json -H 'Authorization: Bearer sesame')"
start_server keyed-off --api-key sesame --no-playground || exit 1
check "--api-key --no-playground: GET / without the key 401 (routes are not listed)" 401 "$(req GET /)"
check "--api-key --no-playground: GET / with the key 404" 404 "$(req GET / -H 'Authorization: Bearer sesame')"

# ---- in the browser ----
# the same npm pins as tests/test_server.sh (playwright-core among them)
npm_ok=1
npm_ready || npm_ok=0
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { npm_ok=0; bad "Debian's chromium is needed at $CHROMIUM (scripts/deps.sh installs it)"; }

# the stop test needs a reply that lasts: a 32768-token model asked for 30000
# tokens (tens of seconds), behind a key and CORS, reached through the
# page's API base URL setting
"$BUILD/tools/mkmodel" -o "$tmp/long.gguf" --vocab "$M" --n-embd 256 --n-layer 4 \
    --n-head 8 --n-head-kv 2 --n-ff 768 --ctx 32768 --type f32 >/dev/null 2>&1 ||
    bad "mkmodel a 32768-token model"
start_server long -m "$tmp/long.gguf" -c 32768 -t 1 --parallel 2 --api-key sesame --cors-origin '*' --quiet || exit 1
LONG="http://127.0.0.1:$PORT"

# the dashboard's server drafts (n-gram speculation, outputs unchanged), so
# that its acceptance chart has something to show
start_server spec --spec-type ngram --quiet || exit 1
SPEC="http://127.0.0.1:$PORT"

# a reasoning model's template (the reply begins inside its <think> block)
start_server think --chat-template "$SHARED/chat/templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja" --quiet || exit 1
THINK="http://127.0.0.1:$PORT"

# what `inflight run` prints at temperature 0 for 64 tokens (its -n is the
# request's max_tokens, --temp its temperature; top-k 0 and top-p 1 are the
# server's defaults too), which the page must show
"$BIN" run -m "$M" -p "Once upon a time" -n 64 --temp 0 >"$tmp/run.txt" 2>/dev/null
check "inflight run --temp 0" 0 $?

shots=$(pwd)/$BUILD/playground
mkdir -p "$shots"
if [ "$npm_ok" = 1 ]; then
    env BASE_URL="$B" LONG_URL="$LONG" LONG_KEY=sesame SPEC_URL="$SPEC" THINK_URL="$THINK" RUN_FILE="$tmp/run.txt" SHOTS="$shots" \
        CHROMIUM="$CHROMIUM" LOADGEN="$BIN bench --url $SPEC --prompt Once -n 4000 -c 8 --max-tokens 100 --timeout 30" \
        timeout 120 node tests/server/playground.test.mjs >"$tmp/node.log" 2>&1
    add_counts "$tmp/node.log" $?
    grep -v -e "^ok" -e " passed, " "$tmp/node.log" | head -40
    echo "browser: $cnt_p passed, $cnt_f failed (screenshots in $shots)"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
