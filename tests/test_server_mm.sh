#!/usr/bin/env bash
# Images through `inflight run` and `inflight serve` (issue 43): a synthetic
# mmproj (tools/mkmodel --mmproj, projection 64 = stories260K's n_embd);
# run --image with a <__media__> marker at the start gives what it gives
# with no marker (images go before the text); bad flags and images are one
# line and exit 2; serve --mmproj takes OpenAI image_url parts (the `openai`
# npm client, tests/server/mm.test.mjs); a server without --mmproj answers
# image parts with 400; a template that iterates content parts sees them.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
MK=${MKMODEL:-$BUILD/tools/mkmodel}
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
pass=0
fail=0
START_ARGS=(--quiet --parallel 16)
. "$(dirname "$0")/lib.sh"
stop_server() { # SIGTERM, bounded wait, exit status into STOP_RC
    kill -TERM "$SPID" 2>/dev/null
    STOP_RC=timeout
    for _ in $(seq 150); do
        if ! kill -0 "$SPID" 2>/dev/null; then wait "$SPID"; STOP_RC=$?; return; fi
        sleep 0.1
    done
    kill -KILL "$SPID" 2>/dev/null
}

"$MK" -o "$tmp/p64.gguf" --mmproj --proj-dim 64 --seed 5 >/dev/null 2>&1 || bad "mkmodel --mmproj"
"$MK" -o "$tmp/p32.gguf" --mmproj --proj-dim 32 --seed 5 >/dev/null 2>&1 || bad "mkmodel --mmproj (32)"
# two PNGs and a JPEG (Python's zlib writes the PNGs; the JPEG is the fuzz corpus's)
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
for name, w, h, s in (('a', 40, 30, 1), ('b', 40, 30, 2)):
    p = png(w, h, s)
    open(f'{d}/{name}.png', 'wb').write(p)
    open(f'{d}/{name}.b64', 'w').write(base64.b64encode(p).decode())
PY
cp tests/fuzz/corpus/fuzz_image/jpeg_444 "$tmp/c.jpg"
base64 -w0 "$tmp/c.jpg" >"$tmp/c.b64"

# ---- run ----
run() { "$BIN" run -m "$M" -n 12 --temp 0 --ids "$@" 2>"$tmp/run.err"; }
with_marker=$(run --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -p "<__media__>Once upon a time")
no_marker=$(run --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -p "Once upon a time")
has "run: the prompt counts the image's 16 rows" "prompt: 21 tokens" "$(cat "$tmp/run.err")"
check "run --image: 12 ids" 12 "$(echo "$no_marker" | wc -w)"
check "run: a marker at the start is the same as none" "$no_marker" "$with_marker"
# (this tiny model's greedy path hardly notices an image before the text: after it, it does)
plain=$(run -p "Once upon a time ")
after_a=$(run --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -p "Once upon a time <__media__>")
after_b=$(run --mmproj "$tmp/p64.gguf" --image "$tmp/b.png" -p "Once upon a time <__media__>")
[ "$plain" != "$after_a" ] && ok "run: the image changes the output" || bad "run: the image changes the output"
[ "$after_b" != "$after_a" ] && ok "run: another image, another output" || bad "run: another image, another output"
mid=$(run --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -p "Once upon <__media__> a time")
[ "$mid" != "$no_marker" ] && ok "run: the marker places the image" || bad "run: the marker places the image"
run_fails() { # name, needle, args...
    local name=$1 needle=$2; shift 2
    "$BIN" run -m "$M" -n 4 "$@" >/dev/null 2>"$tmp/err"
    local rc=$?
    check "run $name: exit 2" 2 "$rc"
    check "run $name: one line" 1 "$(wc -l <"$tmp/err")"
    has "run $name: says why" "$needle" "$(cat "$tmp/err")"
}
run_fails "--image without --mmproj" "needs a vision encoder" --image "$tmp/a.png" -p "x"
run_fails "a missing image" "cannot read" --mmproj "$tmp/p64.gguf" --image "$tmp/none.png" -p "x"
run_fails "a corrupt image" "images[0]" --mmproj "$tmp/p64.gguf" --image tests/fuzz/corpus/fuzz_image/png_bad_idat -p "x"
run_fails "two markers, one image" "marks 2 image places" --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -p "<__media__> and <__media__>"
run_fails "an mmproj of another width" "n_embd is 64" --mmproj "$tmp/p32.gguf" -p "x"
run_fails "an unknown --vision-precision" "wants f32 or bf16" --mmproj "$tmp/p64.gguf" --vision-precision f8 -p "x"
bf=$(run --mmproj "$tmp/p64.gguf" --vision-precision bf16 --image "$tmp/a.png" -p "Once upon a time")
check "run --vision-precision bf16: 12 ids" 12 "$(echo "$bf" | wc -w)"
"$BIN" serve -m "$M" --port 0 --mmproj "$tmp/p64.gguf" --vision-precision f8 >/dev/null 2>"$tmp/err"
check "serve --vision-precision f8: exit 2" 2 "$?"
has "serve --vision-precision f8: says why" "wants f32 or bf16" "$(cat "$tmp/err")"

# ---- serve ----
code() { curl -s -m 60 -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$U$1"; }
img_msg() { # text, b64 file
    printf '{"model":"m","max_tokens":6,"temperature":0,"messages":[{"role":"user","content":[{"type":"text","text":"%s"},{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}}]}]}' "$1" "$(cat "$2")"
}
# a server without an encoder: 400 naming the part
start_server plain || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
check "no --mmproj: an image part is 400" 400 "$(code /v1/chat/completions "$(img_msg hi "$tmp/a.b64")")"
has "no --mmproj: says why" "no vision encoder" "$(cat "$tmp/body")"
has "no --mmproj: names the part" "messages[0].content[1]" "$(cat "$tmp/body")"
check "no --mmproj: text parts still work" 200 "$(code /v1/chat/completions '{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":2}')"
stop_server

# a template that iterates content parts sees the image as {"type": "image"}
cat >"$tmp/parts.jinja" <<'T'
{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<img>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endif %}{% endfor %}
T
start_server parts --mmproj "$tmp/p64.gguf" --chat-template "$tmp/parts.jinja" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
check "parts template: an image request is 200" 200 "$(code /v1/chat/completions "$(img_msg "Once upon a time" "$tmp/a.b64")")"
ids_parts=$(python3 -c "import json; print(json.load(open('$tmp/body'))['usage']['prompt_tokens'])")
# the template wrote "<img>" for the image; the rows follow it
want=$("$BIN" run -m "$M" --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -p "Once upon a time<img><__media__>" -n 6 --temp 0 2>/dev/null)
got=$(python3 -c "import json; print(json.load(open('$tmp/body'))['choices'][0]['message']['content'])")
check "parts template: the text run gives for <img> then the image" "$want" "$got"
check "parts template: the prompt's tokens, 16 of them the image's" 1 "$([ "$ids_parts" -gt 16 ] && echo 1)"
stop_server

start_server mm --mmproj "$tmp/p64.gguf" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
# ChatML with the marker where the part was: the same as run on that text
check "mmproj: an image request is 200" 200 "$(code /v1/chat/completions "$(img_msg "Once upon a time" "$tmp/a.b64")")"
got=$(python3 -c "import json; print(json.load(open('$tmp/body'))['choices'][0]['message']['content'])")
want=$("$BIN" run -m "$M" --mmproj "$tmp/p64.gguf" --image "$tmp/a.png" -n 6 --temp 0 \
    -p $'<|im_start|>user\nOnce upon a time\n<__media__><|im_end|>\n<|im_start|>assistant\n' 2>/dev/null)
check "ChatML: the marker where the part was (as run gives)" "$want" "$got"
big=$(python3 -c "import base64; print(base64.b64encode(b'\x89PNG\r\n\x1a\n' + b'\0' * 5000).decode())")
echo "$big" >"$tmp/junk.b64"
check "a corrupt image: 400" 400 "$(code /v1/chat/completions "$(img_msg x "$tmp/junk.b64")")"
has "a corrupt image: names it" "images[0]" "$(cat "$tmp/body")"
if npm_ready; then
    run_node "openai client" 200 tests/server/mm.test.mjs \
        BASE_URL="$U" MODEL=stories260K IMG_A="$tmp/a.b64" IMG_B="$tmp/b.b64" JPEG="$tmp/c.b64"
fi
check "after everything: /health" 200 "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")"
stop_server
check "SIGTERM exits 0" 0 "$STOP_RC"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
