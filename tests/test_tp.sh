#!/usr/bin/env bash
# Tensor parallelism across processes (src/model/shard.c, forward_tp.c,
# src/dist/tp.c, --tp): mpirun -np 2 over shared memory (btl vader) and
# over TCP on the loopback interface. The forward pass of every rank's
# shard against one process running the whole model, on stories260K and
# every reference model (all have an even number of KV heads). Runs as
# root (OMPI_ALLOW_RUN_AS_ROOT). Every wait is bounded.
set -u
BUILD=${BUILD:-build}
T=$BUILD/tests/test_tp
pass=0
fail=0
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
if ! command -v mpirun >/dev/null || [ "$("$T" have-mpi)" != 1 ]; then
    echo "no MPI in this build or on this machine: tensor parallelism needs it (skipped)"
    echo "$pass passed, $fail failed"
    exit 0
fi
MPIRUN=(mpirun --oversubscribe --bind-to none)
VADER=(--mca btl self,vader)
TCP=(--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
MODELS=(../shared/models/stories260K.gguf ../shared/models/ref/*.gguf)

# mpi_run NAME SECS ARGS...: output in $tmp/NAME, status in RC
mpi_run() {
    local name=$1 limit=$2; shift 2
    timeout -k 5 "$limit" "${MPIRUN[@]}" "$@" >"$tmp/$name" 2>&1
    RC=$?
}

# ---- the forward pass: logits of TP 2 against one rank ----
logits() { # name, kv type, btl args...
    local name=$1 kv=$2; shift 2
    mpi_run "$name" 120 -np 2 "$@" "$T" logits "$kv" "${MODELS[@]}"
    grep -a "max |logit diff|" "$tmp/$name" | sed "s/^/  [$name] /"
    check "$name: rank 0 compared ${#MODELS[@]} models" "rank 0: ${#MODELS[@]} passed, 0 failed" \
        "$(grep -a '^rank 0: ' "$tmp/$name" | tail -1)"
    check "$name: rank 1" "rank 1: ${#MODELS[@]} passed, 0 failed" \
        "$(grep -a '^rank 1: ' "$tmp/$name" | tail -1)"
    check "$name: mpirun exit" 0 "$RC"
    [ "$RC" = 0 ] || tail -n 30 "$tmp/$name"
}
logits vader-f32 f32 "${VADER[@]}"
logits tcp-f32 f32 "${TCP[@]}"
logits vader-f16 f16 "${VADER[@]}"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
