#!/usr/bin/env bash
# The Python package: its pytest suite (python/tests) run by Debian's
# python3-pytest against the package `make python` built, then an offline
# `pip install ./python` into a fresh venv, used from another directory.
# Under a sanitized build the extension and libinflight.so come from
# $BUILD/python, and the sanitizer's runtime is preloaded into python3.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

export BUILD
if [ "$BUILD" != build ]; then
    export INFLIGHT_PYTHONPATH=$BUILD/python INFLIGHT_SANITIZED=1
    case "$BUILD" in
    *address*) pre=$(gcc -print-file-name=libasan.so) ;;
    *thread*) pre=$(gcc -print-file-name=libtsan.so) ;;
    *undefined*) pre=$(gcc -print-file-name=libubsan.so) ;;
    esac
    case "$BUILD" in *undefined*) [ -n "${pre:-}" ] && pre="$pre $(gcc -print-file-name=libubsan.so)" ;; esac
    # Python keeps much of its memory until exit by design: no leak report
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
    export LD_PRELOAD="${pre:-}"
fi

log=$(mktemp)
# -s: a sanitizer's report goes straight to stderr, not into a capture
# that an abort would lose
$PY -m pytest -q -s -p no:cacheprovider python/tests >"$log" 2>&1
rc=$?
unset LD_PRELOAD
tail -n 40 "$log"
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$log" | tail -n 1)
p=$(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
f=$(echo "$summary" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || true)
e=$(echo "$summary" | grep -oE '[0-9]+ error' | grep -oE '[0-9]+' || true)
pass=$((pass + ${p:-0}))
fail=$((fail + ${f:-0} + ${e:-0}))
if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ] && [ "${e:-0}" -eq 0 ]; then bad "pytest exited $rc"; fi
rm -f "$log"

if [ "$BUILD" = build ]; then
    venv=$(mktemp -d)
    trap 'rm -rf "$venv"' EXIT
    if $PY -m venv "$venv/env" >/dev/null 2>&1 &&
        "$venv/env/bin/pip" install --no-index --no-cache-dir ./python >"$venv/pip.log" 2>&1; then
        ok "pip install --no-index ./python into a venv"
        model=$PWD/../shared/models/stories260K.gguf
        out=$(cd "$venv" && "$venv/env/bin/python" - "$model" <<'PYEOF'
import sys, inflight
assert "site-packages" in inflight.__file__, inflight.__file__
with inflight.LLM(sys.argv[1], n_threads=1) as llm:
    o = llm.generate("Once upon a time", inflight.SamplingParams(max_tokens=8, temperature=0))
    print(o[0].outputs[0].token_ids)
PYEOF
        )
        if [ "$out" = "[432, 383, 286, 261, 376, 298, 315, 421]" ]; then
            ok "the installed package generates (from another directory)"
        else
            bad "the installed package: got '$out'"
        fi
    else
        tail -n 20 "$venv/pip.log" 2>/dev/null
        bad "pip install --no-index ./python"
    fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
