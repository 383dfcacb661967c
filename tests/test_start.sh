#!/usr/bin/env bash
# Loading progress people can see: `inflight serve` answers /health with
# 503 {"status":"loading","progress":F} (F rising, below 1) until the model
# is ready, then 200; it prints loading progress on a terminal and one
# closing line elsewhere; `inflight run` shows progress only for loads of
# a second or more; --repack-cache gives the same tokens as no cache and
# says when it rebuilds a damaged cache file.
#
# The model is a mkmodel llama Q8_0 (2 layers, 15 repacked matrices) in a
# temporary directory. Loads are slowed on purpose with
# IFL_TEST_LOAD_DELAY_MS, which makes the loader sleep that long after each
# matrix it repacks or checks; it changes nothing else.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0
fail=0
. "$(dirname "$0")/lib.sh"
has() { # name, needle, haystack
    case "$3" in *"$2"*) ok "$1" ;; *) bad "$1"; echo "  missing: $2"; echo "  in: ${3:0:600}" ;; esac
}
hasnt() {
    case "$3" in *"$2"*) bad "$1"; echo "  unexpected: $2"; echo "  in: ${3:0:600}" ;; *) ok "$1" ;; esac
}

M=$tmp/llama-q8_0.gguf
if ! "$BUILD/tools/mkmodel" -o "$M" --vocab "$SHARED/models/stories260K.gguf" --arch llama \
    --type q8_0 --n-embd 512 --n-layer 2 --n-head 8 --n-head-kv 4 --n-ff 2048 --seed 3 >/dev/null 2>&1; then
    echo "FAIL mkmodel"; echo "0 passed, 1 failed"; exit 1
fi

# ---- serve: /health while loading ----
( IFL_TEST_LOAD_DELAY_MS=400 exec "$BIN" serve -m "$M" --port 0 -t 2 --quiet 2>"$tmp/serve.log" ) &
SPID=$!
pids+=("$SPID")
PORT=
for _ in $(seq 100); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/serve.log" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$PORT" ] && break
    sleep 0.1
done
loading=0 ready=0 rising=1 last=0 shape=1 first=
for _ in $(seq 600); do
    code=$(curl -s -m 5 -o "$tmp/h" -w '%{http_code}' "http://127.0.0.1:$PORT/health")
    body=$(cat "$tmp/h" 2>/dev/null)
    if [ "$code" = 503 ]; then
        loading=$((loading + 1))
        [ -z "$first" ] && first=$body
        if [[ $body =~ ^\{\"status\":\"loading\",\"progress\":(0\.[0-9][0-9])\}$ ]]; then
            p=${BASH_REMATCH[1]}
            awk -v a="$p" -v b="$last" 'BEGIN { exit !(a + 0 >= b + 0) }' || rising=0
            last=$p
        else
            shape=0; echo "  503 body: $body"
        fi
    elif [ "$code" = 200 ]; then
        ready=1; break
    fi
    sleep 0.05
done
[ "$loading" -ge 3 ] && ok "serve: /health 503 while loading ($loading probes)" || bad "serve: /health 503 while loading ($loading probes)"
[ "$shape" = 1 ] && ok "serve: 503 body is {\"status\":\"loading\",\"progress\":F}" || bad "serve: 503 body shape"
[ "$rising" = 1 ] && ok "serve: progress never falls (last $last)" || bad "serve: progress fell"
awk -v a="$last" 'BEGIN { exit !(a + 0 > 0.2 && a + 0 <= 0.99) }' && ok "serve: progress reached $last before ready" || bad "serve: progress stayed at $last"
[ "$ready" = 1 ] && ok "serve: /health 200 once loaded" || bad "serve: never ready"
has "serve: 200 body" '{"status":"ok"}' "$(curl -s -m 5 "http://127.0.0.1:$PORT/health")"
kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
log=$(cat "$tmp/serve.log")
has "serve (not a terminal): one closing line" "inflight serve: loaded " "$log"
hasnt "serve (not a terminal): no progress redraws" $'\r' "$log"
[ "$(grep -c 'loaded ' "$tmp/serve.log")" = 1 ] && ok "serve: the closing line once" || bad "serve: closing line count"

# ---- on a terminal: the line redrawn in place (run, with a load over 1 s) ----
if command -v script >/dev/null; then
    IFL_TEST_LOAD_DELAY_MS=300 timeout 60 script -qfec "'$BIN' run -m '$M' -p hi -n 1 --ids -t 2" "$tmp/tty.log" >/dev/null 2>&1
    log=$(cat "$tmp/tty.log")
    has "run (terminal): a progress line" "inflight run: loading " "$log"
    has "run (terminal): MiB and rate" " MiB/s, repacking" "$log"
    has "run (terminal): redrawn in place" $'\r\033[K' "$log"
    has "run (terminal): closing line" "inflight run: loaded " "$log"
fi

# ---- run: progress only for loads of a second or more ----
out=$("$BIN" run -m "$M" -p hi -n 2 --temp 0 --ids -t 2 2>&1 >/dev/null)
hasnt "run: a fast load prints no progress" "loaded" "$out"
out=$(IFL_TEST_LOAD_DELAY_MS=200 "$BIN" run -m "$M" -p hi -n 2 --temp 0 --ids -t 2 2>&1 >/dev/null)
has "run: a slow load prints a closing line" "inflight run: loaded " "$out"

# ---- --repack-cache: same tokens, damaged cache rebuilt with a notice ----
want=$("$BIN" run -m "$M" -p "once upon" -n 8 --temp 0 --ids -t 2 2>/dev/null)
mkdir -p "$tmp/cache"
a=$("$BIN" run -m "$M" -p "once upon" -n 8 --temp 0 --ids -t 2 --repack-cache "$tmp/cache" 2>"$tmp/e1")
b=$("$BIN" run -m "$M" -p "once upon" -n 8 --temp 0 --ids -t 2 --repack-cache "$tmp/cache" 2>"$tmp/e2")
[ -n "$want" ] && [ "$a" = "$want" ] && [ "$b" = "$want" ] && ok "run --repack-cache: same ids built and mapped ($want)" || bad "run --repack-cache: ids '$want' / '$a' / '$b'"
hasnt "run --repack-cache: no notice on a good cache" "repack cache" "$(cat "$tmp/e1" "$tmp/e2")"
f=$(ls "$tmp"/cache/*.x16)
size=$(stat -c %s "$f")
printf 'zz' | dd of="$f" bs=1 seek=$((size - 3000)) conv=notrunc 2>/dev/null
c=$("$BIN" run -m "$M" -p "once upon" -n 8 --temp 0 --ids -t 2 --repack-cache "$tmp/cache" 2>"$tmp/e3")
[ "$c" = "$want" ] && ok "run --repack-cache: same ids after a rebuild" || bad "run --repack-cache: '$c' after a rebuild"
has "run --repack-cache: names the corrupt cache" "is corrupt: matrix" "$(cat "$tmp/e3")"
has "run --repack-cache: says it rebuilds" "rebuilding it" "$(cat "$tmp/e3")"
# --repack-cache-max: a new file makes the least recently used others go
truncate -s 3M "$tmp/cache/gone.gguf.0123456789abcdef.x16"
touch -d '2 days ago' "$tmp/cache/gone.gguf.0123456789abcdef.x16"
rm -f "$f"
d=$("$BIN" run -m "$M" -p "once upon" -n 8 --temp 0 --ids -t 2 --repack-cache "$tmp/cache" --repack-cache-max 1M 2>"$tmp/e5")
[ "$d" = "$want" ] && ok "run --repack-cache-max: same ids" || bad "run --repack-cache-max: '$d'"
check "run --repack-cache-max: the old file went, its own stayed" "1 0" \
    "$(ls "$tmp"/cache/*.x16 | wc -l) $(ls "$tmp"/cache/gone.* 2>/dev/null | wc -l)"
has "run --repack-cache-max: says what went" "removed 1 least recently used file (3.0 MiB)" "$(cat "$tmp/e5")"
"$BIN" run -m "$M" -p hi --repack-cache "$tmp/cache" --repack-cache-max 12Q >/dev/null 2>"$tmp/e6"
rc=$?
[ $rc = 2 ] && ok "run --repack-cache-max 12Q: exit 2" || bad "run --repack-cache-max 12Q: exit $rc"
has "run --repack-cache-max 12Q: says so" "--repack-cache-max wants a size" "$(cat "$tmp/e6")"
"$BIN" run -m "$M" -p hi --repack-cache "$tmp/none" >/dev/null 2>"$tmp/e4"
rc=$?
[ $rc = 2 ] && ok "run --repack-cache missing dir: exit 2" || bad "run --repack-cache missing dir: exit $rc"
has "run --repack-cache missing dir: says so" "--repack-cache '$tmp/none'" "$(cat "$tmp/e4")"

# ---- the default repack cache: models of 64 MiB or more, in the cache dir ----
BIG=$tmp/big-q8_0.gguf
"$BUILD/tools/mkmodel" -o "$BIG" --vocab "$SHARED/models/stories260K.gguf" --arch llama \
    --type q8_0 --n-embd 1024 --n-layer 4 --n-head 8 --n-head-kv 4 --n-ff 4096 --seed 5 >/dev/null 2>&1 \
    || bad "mkmodel (big)"
want=$(INFLIGHT_CACHE_DIR= XDG_CACHE_HOME= HOME= "$BIN" run -m "$BIG" -p "once upon" -n 6 --temp 0 --ids -t 2 2>/dev/null)
a=$(INFLIGHT_CACHE_DIR="$tmp/dc" "$BIN" run -m "$BIG" -p "once upon" -n 6 --temp 0 --ids -t 2 2>"$tmp/d1")
has "default cache: says where it saved the weights" "saved the weights repacked for this CPU" "$(cat "$tmp/d1")"
check "default cache: one file" 1 "$(ls "$tmp"/dc/*.x16 2>/dev/null | wc -l)"
b=$(INFLIGHT_CACHE_DIR="$tmp/dc" "$BIN" run -m "$BIG" -p "once upon" -n 6 --temp 0 --ids -t 2 2>"$tmp/d2")
hasnt "default cache: mapped the second time, no note" "saved the weights" "$(cat "$tmp/d2")"
[ -n "$want" ] && [ "$a" = "$want" ] && [ "$b" = "$want" ] && ok "default cache: same ids without, built and mapped" || bad "default cache: '$want' / '$a' / '$b'"
rm -f "$tmp"/dc/*.x16
c=$(INFLIGHT_CACHE_DIR="$tmp/dc" "$BIN" run -m "$BIG" -p "once upon" -n 6 --temp 0 --ids -t 2 --repack-cache off 2>"$tmp/d3")
check "--repack-cache off: no file" 0 "$(ls "$tmp"/dc/*.x16 2>/dev/null | wc -l)"
[ "$c" = "$want" ] && ok "--repack-cache off: same ids" || bad "--repack-cache off: '$c'"
INFLIGHT_CACHE_DIR="$tmp/dc" "$BIN" run -m "$M" -p "once upon" -n 2 --temp 0 --ids -t 2 >/dev/null 2>&1
check "default cache: a small model is not cached" 0 "$(ls "$tmp"/dc/*.x16 2>/dev/null | wc -l)"
INFLIGHT_CACHE_DIR= XDG_CACHE_HOME= HOME="$tmp/home" "$BIN" run -m "$BIG" -p "once" -n 1 --ids -t 2 >/dev/null 2>&1
check "default cache: under HOME/.cache/inflight" 1 "$(ls "$tmp"/home/.cache/inflight/*.x16 2>/dev/null | wc -l)"
check "default cache: the directory is the owner's only" 700 "$(stat -c %a "$tmp/home/.cache/inflight" 2>/dev/null)"
# serve takes the same default and says so before it is ready
rm -f "$tmp"/dc/*.x16
( INFLIGHT_CACHE_DIR="$tmp/dc" exec "$BIN" serve -m "$BIG" --host 127.0.0.1 --port 0 -t 2 2>"$tmp/s.log" ) &
SP=$!
pids+=("$SP")
for _ in $(seq 300); do grep -q "ready on" "$tmp/s.log" 2>/dev/null && break; sleep 0.1; done
has "serve: default cache note" "saved the weights repacked for this CPU" "$(cat "$tmp/s.log")"
check "serve: default cache file" 1 "$(ls "$tmp"/dc/*.x16 2>/dev/null | wc -l)"
kill -TERM "$SP" 2>/dev/null; wait "$SP" 2>/dev/null

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
