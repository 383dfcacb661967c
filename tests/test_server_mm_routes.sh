#!/usr/bin/env bash
# Images on the routes beside chat (issue 43): TGI's /generate and
# /generate_stream take ![](URL) in `inputs` (data URLs, or remote URLs
# under --image-url-allow); /v1/completions takes llama.cpp's prompt object
# {"prompt_string", "multimodal_data"}; a server without --mmproj reads the
# markdown as text, as TGI does for a text model. Each image request's
# greedy text equals `inflight run --image` on the same prompt. Remote URLs:
# refused without --image-url-allow; with it, fetched (libcurl) from a local
# Python HTTP server when under a prefix, refused outside, a 404 and a
# redirect are 400s naming the cause. Clients: curl, and the `openai` npm
# client for completions (tests/server/mm_routes.test.mjs). Then InternVL:
# a qwen2 model with a tiling mmproj, a 70 x 40 image through chat and TGI
# equal to `run` on the same text.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
MK=${MKMODEL:-$BUILD/tools/mkmodel}
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
pass=0
fail=0
START_ARGS=(--quiet --parallel 8)
. "$(dirname "$0")/lib.sh"
stop_server() { kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; }

"$MK" -o "$tmp/p64.gguf" --mmproj --proj-dim 64 --seed 5 >/dev/null 2>&1 || bad "mkmodel --mmproj"
python3 - "$tmp" <<'PY'
import base64, struct, sys, zlib
d = sys.argv[1]
def png(w, h, salt):
    raw = b''.join(b'\0' + bytes((x * 7 + y * 13 + c * 29 + salt * 71) % 256
                                 for x in range(w) for c in range(3)) for y in range(h))
    def chunk(t, b):
        return struct.pack('>I', len(b)) + t + b + struct.pack('>I', zlib.crc32(t + b) & 0xffffffff)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
for name, w, h, s in (('a', 40, 30, 1), ('b', 40, 30, 2), ('t', 70, 40, 3)):
    p = png(w, h, s)
    open(f'{d}/{name}.png', 'wb').write(p)
    open(f'{d}/{name}.b64', 'w').write(base64.b64encode(p).decode())
PY
A64=$(cat "$tmp/a.b64")
B64=$(cat "$tmp/b.b64")
J() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$tmp/body" "$1"; }
code() { curl -s -m 60 -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$U$1"; }
run_img() { # image, prompt
    "$BIN" run -m "$M" --mmproj "$tmp/p64.gguf" --image "$1" -n 8 --temp 0 -p "$2" 2>/dev/null
}
want_a=$(run_img "$tmp/a.png" "Once upon a time <__media__> and")
want_b=$(run_img "$tmp/b.png" "Once upon a time <__media__> and")
[ -n "$want_a" ] && [ "$want_a" != "$want_b" ] && ok "run: two images, two texts" || bad "run: two images, two texts"

# ---- a server with an encoder ----
start_server mm --mmproj "$tmp/p64.gguf" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
gen() { printf '{"inputs":"%s","parameters":{"max_new_tokens":8}}' "$1"; }
check "TGI /generate: ![](data URL) is 200" 200 "$(code /generate "$(gen "Once upon a time ![](data:image/png;base64,$A64) and")")"
check "TGI /generate: the text run gives for that image" "$want_a" "$(J 'd["generated_text"]')"
check "TGI /generate: another image" 200 "$(code /generate "$(gen "Once upon a time ![](data:image/png;base64,$B64) and")")"
check "TGI /generate: ... the text run gives for it" "$want_b" "$(J 'd["generated_text"]')"
curl -s -N -m 60 -H 'Content-Type: application/json' -d "$(gen "Once upon a time ![](data:image/png;base64,$A64) and")" \
    "$U/generate_stream" >"$tmp/sse"
streamed=$(python3 - "$tmp/sse" <<'PY'
import json, sys
evs = [json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith('data:')]
print(len(evs), evs[-1].get('generated_text') if evs else '')
PY
)
check "TGI /generate_stream: 8 events, the last with the same text" "8 $want_a" "$streamed"
check "TGI /: the same with stream false" 200 "$(code / "$(gen "Once upon a time ![](data:image/png;base64,$A64) and")")"
check "TGI /: ... the same text" "$want_a" "$(J 'd["generated_text"]')"
check "TGI: a remote URL without --image-url-allow is 422" 422 "$(code /generate "$(gen "x ![](https://example.com/a.png)")")"
has "TGI: ... says it does not fetch" "does not fetch remote URLs" "$(cat "$tmp/body")"
check "TGI: bad base64 is 422" 422 "$(code /generate "$(gen "x ![](data:image/png;base64,@@@@)")")"
has "TGI: ... names the image" "\`inputs\`: image 0: its base64 data has a bad character" "$(cat "$tmp/body")"
junk=$(python3 -c "import base64; print(base64.b64encode(b'\x89PNG\r\n\x1a\n' + b'\0' * 500).decode())")
c=$(code /generate "$(gen "x ![](data:image/png;base64,$junk)")")
check "TGI: a corrupt image is 422" 422 "$c"
has "TGI: ... names it" "images[0]" "$(cat "$tmp/body")"
check "TGI: truncate into an image's prompt is 422" 422 "$(code /generate "{\"inputs\":\"Once upon a time ![](data:image/png;base64,$A64)\",\"parameters\":{\"truncate\":4}}")"
has "TGI: ... says why" "would cut a prompt with images" "$(cat "$tmp/body")"
check "TGI: text without images still works" 200 "$(code /generate "$(gen "Once upon a time")")"
check "TGI: an unclosed ![]( is text" 200 "$(code /generate "$(gen "Once upon ![](data:image/png")")"

# /v1/completions: llama.cpp's prompt object
cp_obj() { printf '{"max_tokens":8,"temperature":0,"prompt":{"prompt_string":"%s","multimodal_data":["%s"]}}' "$1" "$2"; }
check "completions: a prompt object is 200" 200 "$(code /v1/completions "$(cp_obj "Once upon a time <__media__> and" "$A64")")"
check "completions: the text run gives" "$want_a" "$(J 'd["choices"][0]["text"]')"
check "completions: a data URL in multimodal_data" 200 "$(code /v1/completions "$(cp_obj "Once upon a time <__media__> and" "data:image/png;base64,$B64")")"
check "completions: ... the text run gives for it" "$want_b" "$(J 'd["choices"][0]["text"]')"
check "completions: in a one-element list" 200 "$(code /v1/completions "{\"max_tokens\":8,\"temperature\":0,\"prompt\":[{\"prompt_string\":\"Once upon a time <__media__> and\",\"multimodal_data\":[\"$A64\"]}]}")"
check "completions: ... the same text" "$want_a" "$(J 'd["choices"][0]["text"]')"
check "completions: two markers, one image: 400" 400 "$(code /v1/completions "$(cp_obj "<__media__> and <__media__>" "$A64")")"
has "completions: ... says so" "marks 2 image places" "$(cat "$tmp/body")"
check "completions: beside another prompt: 400" 400 "$(code /v1/completions "{\"prompt\":[\"a\",{\"prompt_string\":\"b\"}]}")"
has "completions: ... says why" "must be the request's only prompt" "$(cat "$tmp/body")"
check "completions: an unknown key: 400" 400 "$(code /v1/completions '{"prompt":{"prompt_string":"a","images":[]}}')"
check "completions: a remote URL: 400" 400 "$(code /v1/completions "$(cp_obj "a <__media__>" "http://example.com/a.png")")"
has "completions: ... names the image" "prompt.multimodal_data[0]: this server does not fetch" "$(cat "$tmp/body")"
if npm_ready; then
    run_node "openai client" 200 tests/server/mm_routes.test.mjs \
        BASE_URL="$U" MODEL=stories260K IMG_A="$tmp/a.b64" WANT_A="$want_a"
fi
check "after everything: /health" 200 "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")"
stop_server

# ---- a text model: the markdown is text ----
start_server plain || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
check "no --mmproj: TGI takes ![](...) as text" 200 "$(code /generate "$(gen "Once upon a time ![](data:image/png;base64,AAAA) and")")"
want_txt=$("$BIN" run -m "$M" -n 8 --temp 0 -p "Once upon a time ![](data:image/png;base64,AAAA) and" 2>/dev/null)
check "no --mmproj: ... as run gives for that text" "$want_txt" "$(J 'd["generated_text"]')"
check "no --mmproj: a completions prompt object with images is 400" 400 "$(code /v1/completions "$(cp_obj "a <__media__>" "$A64")")"
has "no --mmproj: ... says why" "no vision encoder" "$(cat "$tmp/body")"
check "no --mmproj: a prompt object without images works" 200 "$(code /v1/completions '{"max_tokens":4,"prompt":{"prompt_string":"Once upon a time"}}')"
stop_server

# ---- remote images under --image-url-allow ----
mkdir -p "$tmp/www/img" "$tmp/www/other"
cp "$tmp/a.png" "$tmp/www/img/a.png"
cp "$tmp/a.png" "$tmp/www/other/a.png"
python3 - "$tmp/www" >"$tmp/www.port" 2>/dev/null <<'PY' &
import http.server, os, sys
os.chdir(sys.argv[1])
class H(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/img/moved.png':
            self.send_response(302); self.send_header('Location', '/other/a.png'); self.end_headers()
            return
        super().do_GET()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
PY
pids+=("$!")
for _ in $(seq 50); do [ -s "$tmp/www.port" ] && break; sleep 0.1; done
W="http://127.0.0.1:$(cat "$tmp/www.port")"
start_server remote --mmproj "$tmp/p64.gguf" --image-url-allow "$W/img/" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
check "allowed: TGI fetches ![]($W/img/a.png)" 200 "$(code /generate "$(gen "Once upon a time ![]($W/img/a.png) and")")"
check "allowed: ... the text run gives for that image" "$want_a" "$(J 'd["generated_text"]')"
chat() { printf '{"max_tokens":8,"temperature":0,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"%s"}}]}]}' "$1"; }
check "allowed: chat fetches an image_url" 200 "$(code /v1/chat/completions "$(chat "$W/img/a.png")")"
by_url=$(J 'd["choices"][0]["message"]["content"]')
check "allowed: chat with the same image as a data URL" 200 "$(code /v1/chat/completions "$(chat "data:image/png;base64,$A64")")"
check "allowed: ... the same answer" "$by_url" "$(J 'd["choices"][0]["message"]["content"]')"
check "outside the prefix: 400" 400 "$(code /v1/chat/completions "$(chat "$W/other/a.png")")"
has "outside the prefix: ... says so" "is not under an allowed prefix" "$(cat "$tmp/body")"
check "a 404 under the prefix: 400" 400 "$(code /v1/chat/completions "$(chat "$W/img/none.png")")"
has "a 404: ... says so" "HTTP 404" "$(cat "$tmp/body")"
check "a redirect: 400" 400 "$(code /v1/chat/completions "$(chat "$W/img/moved.png")")"
has "a redirect: ... not followed" "redirects are not followed" "$(cat "$tmp/body")"
check "completions: multimodal_data may be an allowed URL" 200 "$(code /v1/completions "$(cp_obj "Once upon a time <__media__> and" "$W/img/a.png")")"
check "completions: ... the text run gives" "$want_a" "$(J 'd["choices"][0]["text"]')"
stop_server
"$BIN" serve -m "$M" --image-url-allow ftp://x/ >/dev/null 2>"$tmp/err"
check "--image-url-allow ftp://: exit 2" 2 "$?"
has "--image-url-allow ftp://: says why" "is not an http:// or https:// prefix" "$(cat "$tmp/err")"

# ---- InternVL: a qwen2 model and a tiling mmproj ----
Q=$tmp/qwen2.gguf
"$MK" -o "$Q" --vocab "$SHARED/models/vocab/ggml-vocab-qwen2.gguf" --arch qwen2 --n-embd 64 \
    --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f32 --seed 1 >/dev/null 2>&1 || bad "mkmodel qwen2"
"$MK" -o "$tmp/ivl.gguf" --mmproj --projector internvl --proj-dim 64 --seed 5 >/dev/null 2>&1 || bad "mkmodel internvl"
ivl_run() { "$BIN" run -m "$Q" --mmproj "$tmp/ivl.gguf" --image "$tmp/t.png" -n 8 --temp 0 -p "$1" 2>"$tmp/run.err"; }
want_t=$(ivl_run "Look <__media__> here")
has "InternVL run: 28 rows and the markers in the prompt" "prompt:" "$(cat "$tmp/run.err")"
start_server ivl -m "$Q" --mmproj "$tmp/ivl.gguf" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
T64=$(cat "$tmp/t.b64")
check "InternVL TGI: a tiled image is 200" 200 "$(code /generate "$(gen "Look ![](data:image/png;base64,$T64) here")")"
check "InternVL TGI: the text run gives" "$want_t" "$(J 'd["generated_text"]')"
check "InternVL completions: 200" 200 "$(code /v1/completions "$(cp_obj "Look <__media__> here" "$T64")")"
check "InternVL completions: the text run gives" "$want_t" "$(J 'd["choices"][0]["text"]')"
n_prompt=$(J 'd["usage"]["prompt_tokens"]')
check "InternVL completions: the prompt holds the 28 rows" 1 "$([ "$n_prompt" -gt 28 ] && echo 1)"
stop_server
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
