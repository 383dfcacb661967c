#!/usr/bin/env bash
# Tensor parallelism across processes (src/model/shard.c, forward_tp.c,
# src/dist/tp.c, --tp): mpirun -np 2 over shared memory (btl vader) and
# over TCP on the loopback interface. The forward pass of every rank's
# shard against one process running the whole model, on stories260K,
# every reference model (all have an even number of KV heads) and
# synthetic gemma3, gemma2, phi3, qwen3moe, Mixtral-style llama and gpt-oss. Runs as root
# (OMPI_ALLOW_RUN_AS_ROOT). Every wait is bounded.
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
# and gemma3, gemma2, phi3 (sliding windows of 8 positions, soft-caps,
# fused QKV and gate/up sliced by rows)
V=../shared/models/stories260K.gguf
S="--n-embd 256 --n-head 8 --n-head-kv 2 --n-ff 512"
# shellcheck disable=SC2086
"$BUILD/tools/mkmodel" -o "$tmp/g3.gguf" --vocab $V $S --arch gemma3 --n-layer 6 --type q8_0 \
    --n-swa 8 2>/dev/null &&
    "$BUILD/tools/mkmodel" -o "$tmp/g2.gguf" --vocab $V $S --arch gemma2 --n-layer 4 --type f16 \
        --n-swa 8 --softcap 0.5,2 2>/dev/null &&
    "$BUILD/tools/mkmodel" -o "$tmp/p3.gguf" --vocab $V $S --arch phi3 --n-layer 4 --type q4_k_m \
        2>/dev/null || bad "mkmodel gemma3 / gemma2 / phi3"
MODELS+=("$tmp/g3.gguf" "$tmp/g2.gguf" "$tmp/p3.gguf")
# and experts, each expert's n_ff split as a dense FFN's (the router whole
# on every rank): qwen3moe (Q8_0), Mixtral-style llama (Q4_K_M: n_ff two
# K-quant blocks, one a rank) and gpt-oss
# (F16: gate/up biases sliced, down's added once, sinks, windows)
E="--n-embd 256 --n-head 8 --n-head-kv 2 --n-expert 8 --n-expert-used 2"
# shellcheck disable=SC2086
"$BUILD/tools/mkmodel" -o "$tmp/q3m.gguf" --vocab $V $E --arch qwen3moe --n-layer 2 --type q8_0 --n-ff 256 \
    2>/dev/null &&
    "$BUILD/tools/mkmodel" -o "$tmp/mx.gguf" --vocab $V $E --arch llama --n-layer 2 \
        --type q4_k_m --n-ff 512 2>/dev/null &&
    "$BUILD/tools/mkmodel" -o "$tmp/oss.gguf" --vocab $V $E --arch gpt-oss --n-layer 2 \
        --type f16 --n-ff 256 --n-swa 8 2>/dev/null || bad "mkmodel qwen3moe / llama experts / gpt-oss"
MODELS+=("$tmp/q3m.gguf" "$tmp/mx.gguf" "$tmp/oss.gguf")

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
    # one process with --tp-emulate 2: the job's bits on every model
    check "$name: --tp-emulate 2 bit for bit on ${#MODELS[@]} models" "${#MODELS[@]}" \
        "$(grep -ac 'against one process with --tp-emulate 2: max |logit diff| 0, bit for bit' "$tmp/$name")"
    check "$name: rank 0 compared ${#MODELS[@]} models" "rank 0: ${#MODELS[@]} passed, 0 failed" \
        "$(grep -a '^rank 0: ' "$tmp/$name" | tail -1)"
    check "$name: rank 1" "rank 1: ${#MODELS[@]} passed, 0 failed" \
        "$(grep -a '^rank 1: ' "$tmp/$name" | tail -1)"
    check "$name: mpirun exit" 0 "$RC"
    [ "$RC" = 0 ] || tail -n 30 "$tmp/$name"
}
t0=$SECONDS
logits vader-f32 f32+gen "${VADER[@]}"
grep -a " ids: " "$tmp/vader-f32" | sed "s/^/  [vader-f32] /"
grep -a " ids against one process" "$tmp/vader-f32" | grep -v "the same$" | sed "s/^/  [vader-f32] /"
check "vader-f32: greedy and seeded ids of --tp-emulate 2 the job's on ${#MODELS[@]} models" \
    "$((2 * ${#MODELS[@]}))" "$(grep -ac 'ids against one process with --tp-emulate 2: the same$' "$tmp/vader-f32")"
logits tcp-f32 f32 "${TCP[@]}"
# over one rank the shard is the whole model: bitwise
mpi_run one 60 -np 1 "${VADER[@]}" "$T" logits f32 ../shared/models/stories260K.gguf \
    ../shared/models/ref/llama-q8_0.gguf
check "TP 1: logits bitwise those of one process" 2 "$(grep -ac 'against one rank = 0 over' "$tmp/one")"
echo "  (forward pass checks: $((SECONDS - t0)) s)"

# ---- inflight run --tp (the executor on rank 0): the same ids ----
t0=$SECONDS
BIN=$BUILD/inflight
PROMPT="Once upon a time, there was a little robot"
run_ids() { # out, args...: $BIN run under RUN_PRE (empty: the plain build)
    local out=$1; shift
    timeout 60 "${RUN_PRE[@]}" "$BIN" run -p "$PROMPT" -n 24 --ids -t 1 "$@" >"$out" 2>"$out.err"
    echo $? >"$out.rc"
}
same_ids() { # name, plain output, TP output
    if [ -s "$2" ] && [ "$(cat "$3.rc")" = 0 ]; then
        check "$1" "$(cat "$2")" "$(cat "$3")"
    else
        bad "$1"; tail -3 "$3.err"
    fi
}
M=../shared/models/stories260K.gguf
Q=../shared/models/ref/qwen2-f16.gguf
RUN_PRE=()
run_ids "$tmp/g" -m "$M" --temp 0
run_ids "$tmp/s" -m "$M" --temp 0.9 --seed 7
run_ids "$tmp/qg" -m "$Q" --temp 0
RUN_PRE=(timeout -k 5 60 "${MPIRUN[@]}" -np 2 "${VADER[@]}")
run_ids "$tmp/g2" -m "$M" --temp 0 --tp 2
run_ids "$tmp/s2" -m "$M" --temp 0.9 --seed 7 --tp 2
same_ids "run --tp 2: greedy ids as one process" "$tmp/g" "$tmp/g2"
same_ids "run --tp 2: seeded sampled ids as one process" "$tmp/s" "$tmp/s2"
RUN_PRE=(timeout -k 5 60 "${MPIRUN[@]}" -np 2 "${TCP[@]}")
run_ids "$tmp/qg2" -m "$Q" --temp 0 --tp 2
same_ids "run --tp 2 over TCP, qwen2 (biases): greedy ids as one process" "$tmp/qg" "$tmp/qg2"
RUN_PRE=(timeout -k 5 60 "${MPIRUN[@]}" -np 1 "${VADER[@]}")
run_ids "$tmp/s1" -m "$M" --temp 0.9 --seed 7 --tp 1
same_ids "run --tp 1 under mpirun: as the plain build" "$tmp/s" "$tmp/s1"
# orchestrator mode: no mpirun, the process spawns its worker itself
RUN_PRE=(timeout -k 5 60)
run_ids "$tmp/so" -m "$M" --temp 0.9 --seed 7 --tp 2
same_ids "run --tp 2 without mpirun (spawned worker): seeded sampled ids as leader mode" "$tmp/s2" "$tmp/so"
run_ids "$tmp/qgo" -m "$Q" --temp 0 --tp 2
same_ids "run --tp 2 without mpirun, qwen2: greedy ids as one process" "$tmp/qg" "$tmp/qgo"
# --tp-emulate 2: one process with the job's tokens, where the plain sums
# draw another (llama-q8_0's seeded ids part from the job's at token 15)
Q8=../shared/models/ref/llama-q8_0.gguf
P0=$PROMPT PROMPT="Once upon a time"
RUN_PRE=()
run_ids "$tmp/q8" -m "$Q8" --temp 0.9 --seed 3
run_ids "$tmp/q8e" -m "$Q8" --temp 0.9 --seed 3 --tp-emulate 2
# two threads: a one-row decode splits attention by heads over them
run_ids "$tmp/q8e2" -m "$Q8" --temp 0.9 --seed 3 --tp-emulate 2 -t 2
run_ids "$tmp/se2" -m "$M" --temp 0.9 --seed 3 --tp-emulate 2 -t 2
run_ids "$tmp/se1" -m "$M" --temp 0.9 --seed 3 --tp-emulate 2
RUN_PRE=(timeout -k 5 60 "${MPIRUN[@]}" -np 2 "${VADER[@]}")
run_ids "$tmp/q82" -m "$Q8" --temp 0.9 --seed 3 --tp 2
PROMPT=$P0
same_ids "run --tp-emulate 2: llama-q8_0's seeded ids those of run --tp 2" "$tmp/q82" "$tmp/q8e"
same_ids "run --tp-emulate 2 -t 2: llama-q8_0's ids those of -t 1" "$tmp/q8e" "$tmp/q8e2"
same_ids "run --tp-emulate 2 -t 2: stories260K's ids those of -t 1" "$tmp/se1" "$tmp/se2"
[ "$(cat "$tmp/q8")" != "$(cat "$tmp/q82")" ] && ok "llama-q8_0: the plain sums draw other ids (what --tp-emulate is for)" ||
    bad "llama-q8_0: the plain sums draw other ids (what --tp-emulate is for)"
"$BIN" run -m "$M" -p x -n 2 --tp 2 --tp-emulate 2 >/dev/null 2>"$tmp/ee"
check "--tp-emulate with --tp 2: exit 2" 2 $?
has "--tp-emulate with --tp 2: says why" "--tp-emulate is for one process" "$(cat "$tmp/ee")"
"$BIN" run -m "$M" -p x -n 2 --tp-emulate 3 >/dev/null 2>"$tmp/e3"
check "--tp-emulate 3 on 4 KV heads: exit 2" 2 $?
has "--tp-emulate 3 on 4 KV heads: says why" "4 KV heads, which 3 ranks cannot share" "$(cat "$tmp/e3")"
"$BIN" run -m "$M" -p x -n 2 --tp-emulate 2 --lora "$tmp/none.gguf" >/dev/null 2>"$tmp/el"
has "--tp-emulate with an adapter: refused" "summing as tensor parallel ranks do" "$(cat "$tmp/el")"
timeout -k 5 60 "$BIN" bench -m "$M" --pp 8 --tg 4 -r 1 -t 1 --tp 2 >"$tmp/bo" 2>&1
check "bench --tp 2 without mpirun: exit 0" 0 $?
has "bench --tp 2 without mpirun: the collectives' share" "2 ranks" "$(cat "$tmp/bo")"
echo "  (run checks: $((SECONDS - t0)) s)"

# ---- refusals: a clear error, every rank ends ----
"$BIN" tp-worker -m "$M" --tp 2 >/dev/null 2>"$tmp/e1"
check "tp-worker by hand: exit 2" 2 $?
has "tp-worker by hand: says what it is" "is a worker of 'inflight run|bench|serve --tp N'" "$(cat "$tmp/e1")"
mpi_run e2 60 -np 2 "${VADER[@]}" "$BIN" run -m "$M" -p x -n 2 --tp 3
has "--tp 3 in a job of 2: says so" "--tp 3, but this process is one of an MPI job of 2 ranks" "$(cat "$tmp/e2")"
check "--tp 3 in a job of 2: mpirun fails" 1 "$([ "$RC" != 0 ] && [ "$RC" != 124 ] && echo 1)"
mpi_run e3 60 -np 3 "${VADER[@]}" "$BIN" run -m "$M" -p x -n 2 --tp 3
has "--tp 3 over 4 KV heads: names both" "3 ranks: the model has 4 KV heads" "$(cat "$tmp/e3")"
check "--tp 3 over 4 KV heads: the job ends, failed" 1 "$([ "$RC" != 0 ] && [ "$RC" != 124 ] && echo 1)"
mpi_run e4 60 -np 2 "${VADER[@]}" "$BIN" run -m "$M" -p x -n 2 --tp 2 --spec-type draft -md "$M"
has "--tp with a draft model: refused" "not available with tensor parallelism" "$(cat "$tmp/e4")"
check "--tp with a draft model: the job ends, failed" 1 "$([ "$RC" != 0 ] && [ "$RC" != 124 ] && echo 1)"

# ---- the server: rank 0 serves, rank 1 computes ----
# a wrapper notes each rank's pid and exit status (mpirun's own status
# does not tell rank 0's under --enable-recovery)
cat >"$tmp/rank.sh" <<'WRAP'
#!/bin/sh
"$@" &
p=$!
echo "rank $OMPI_COMM_WORLD_RANK pid $p" >>"$RANKS"
wait $p
rc=$?
echo "rank $OMPI_COMM_WORLD_RANK exit $rc" >>"$RANKS"
exit $rc
WRAP
export RANKS=$tmp/ranks
# a seeded sampled completion with its log-probabilities (17 digits each),
# without the fields that differ between two servers
SEEDED='{"prompt":"Once upon a time","max_tokens":24,"temperature":0.9,"seed":7,"logprobs":3}'
seeded() { curl -s "$1/v1/completions" -d "$SEEDED" | sed -E 's/"id":"[^"]*",//; s/"created":[0-9]*,//'; }
# start_tp NAME MODEL ARGS...: PORT set once /health answers, MPID mpirun's pid
start_tp() {
    local name=$1 model=$2; shift 2
    : >"$RANKS"
    ( exec timeout -k 5 120 "${MPIRUN[@]}" --enable-recovery -np 2 "${VADER[@]}" -x RANKS \
        sh "$tmp/rank.sh" "$BIN" serve -m "$model" --host 127.0.0.1 --port 0 -t 1 --tp 2 "$@" \
        >"$tmp/$name.log" 2>&1 ) &
    MPID=$!
    pids+=("$MPID")
    PORT=
    for _ in $(seq 300); do
        PORT=$(grep -ao 'listening on http://127.0.0.1:[0-9]*' "$tmp/$name.log" | grep -o '[0-9]*$')
        [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
        sleep 0.1
    done
    echo "TP server $name did not start:"; cat "$tmp/$name.log"
    return 1
}
if start_tp srv "$M"; then
    B="http://127.0.0.1:$PORT"
    info=$(curl -s "$B/info")
    has "/info: two shards" '"num_shard":2,"sharded":true' "$info"
    greedy=$(curl -s "$B/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}')
    has "greedy text as one process" '"text":", there was a little girl named Lily.' "$greedy"
    seeded "$B" >"$tmp/seeded-leader"
    has "/metrics: the ranks" 'inflight_tp_ranks{model_name="stories260K"} 2' "$(curl -s "$B/metrics")"
    if command -v node >/dev/null && [ -d tests/server/node_modules/openai ]; then
        for js in openai guide; do
            env BASE_URL="$B" MODEL=stories260K timeout 100 node "tests/server/$js.test.mjs" >"$tmp/node.log" 2>&1
            line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/node.log" | tail -1)
            check "$js client tests against TP 2: none failed" 0 "$(echo "${line:-x, 1 failed}" | sed 's/.*, \([0-9]*\) failed/\1/')"
            grep -a '^FAIL' "$tmp/node.log" | head -10
            echo "  $js.test.mjs against TP 2: $line"
        done
    else
        echo "  (node or tests/server/node_modules missing: test_server.sh installs them; client tests skipped)"
    fi
    kill -TERM "$(grep -a 'rank 0 pid' "$RANKS" | awk '{print $4}')" 2>/dev/null
    for _ in $(seq 150); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.1; done
    check "SIGTERM to rank 0: both ranks exit 0" "rank 0 exit 0 rank 1 exit 0" \
        "$(grep -a exit "$RANKS" | sort | tr '\n' ' ' | sed 's/ $//')"
fi

# ---- faults: rank 1 killed mid-stream ----
TPT=2   # --tp-timeout: rank 0 notices within it, idle or not
BOUND=8 # from the kill to rank 0's exit: the deadline, a keep-alive period, the shutdown
# the stream must still be running when rank 1 dies, on any CPU: 480
# tokens of the 512-token reference model can be done before the kill,
# so it asks for 30000 of a 32768-token model of the same shape
R=$tmp/long.gguf
"$BUILD/tools/mkmodel" -o "$R" --vocab "$M" --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 2 \
    --n-ff 768 --ctx 32768 --type f32 >/dev/null 2>&1 || bad "mkmodel a 32768-token model"
if start_tp fault "$R" -c 32768 --tp-timeout $TPT; then
    B="http://127.0.0.1:$PORT"
    curl -sN -m 60 "$B/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":30000,"ignore_eos":true,"stream":true}' >"$tmp/stream" 2>&1 &
    cpid=$!
    for _ in $(seq 100); do [ "$(grep -c '^data:' "$tmp/stream")" -ge 3 ] && break; sleep 0.05; done
    r1=$(grep -a 'rank 1 pid' "$RANKS" | awk '{print $4}')
    t0=$(date +%s%N)
    kill -KILL "$r1"
    code=$(curl -s -m 30 -o "$tmp/late" -w '%{http_code}' "$B/v1/completions" -d '{"prompt":"x","max_tokens":4}')
    exited=
    for _ in $(seq 300); do
        grep -aq 'rank 0 exit' "$RANKS" && { exited=$((($(date +%s%N) - t0) / 1000000)); break; }
        sleep 0.05
    done
    wait "$cpid"
    check "killed rank 1: a new request gets 503" 503 "$code"
    has "killed rank 1: the 503 says why" "lost a rank" "$(cat "$tmp/late")"
    has "killed rank 1: the stream under way ends with the error" "lost a rank" "$(cat "$tmp/stream")"
    check "killed rank 1: the stream had not finished" 0 "$(grep -c '"finish_reason":"length"' "$tmp/stream")"
    check "killed rank 1: rank 0 exits non-zero" "rank 0 exit 1" "$(grep -a 'rank 0 exit' "$RANKS")"
    echo "  rank 0 exited ${exited:-never (within 15 s)} ms after the kill (--tp-timeout $TPT, bound ${BOUND} s)"
    check "killed rank 1: rank 0 gone within ${BOUND} s" 1 "$([ -n "$exited" ] && [ "$exited" -le $((BOUND * 1000)) ] && echo 1)"
    for _ in $(seq 100); do kill -0 "$MPID" 2>/dev/null || break; sleep 0.1; done
    check "killed rank 1: mpirun ends" 1 "$(kill -0 "$MPID" 2>/dev/null || echo 1)"
fi

# ---- orchestrator mode: serve --tp 2 without mpirun spawns its worker ----
# start_orch NAME MODEL ARGS...: PORT set once /health answers, OPID the
# leader's pid; WPID its worker's, ORTED Open MPI's daemon (its child)
start_orch() {
    local name=$1 model=$2; shift 2
    : >"$tmp/$name.log"
    "$BIN" serve -m "$model" --host 127.0.0.1 --port 0 -t 1 --tp 2 "$@" >"$tmp/$name.log" 2>&1 &
    OPID=$!
    pids+=("$OPID")
    PORT=
    for _ in $(seq 300); do
        PORT=$(grep -ao 'listening on http://127.0.0.1:[0-9]*' "$tmp/$name.log" | grep -o '[0-9]*$')
        [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
        sleep 0.1
    done
    ORTED=$(ps -o pid= --ppid "$OPID" | tr -d ' ' | head -1)
    WPID=$(pgrep -P "$ORTED" 2>/dev/null | head -1)
    [ -n "$PORT" ] && [ -n "$ORTED" ] && [ -n "$WPID" ] && return 0
    bad "orchestrator server $name: started (port '$PORT', daemon '$ORTED', worker '$WPID')"
    cat "$tmp/$name.log"
    return 1
}
# the worker's and the daemon's processes still there (zombies count as gone)
alive() {
    local n=0 p
    for p in "$@"; do
        [ -n "$p" ] && [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && n=$((n + 1))
    done
    echo $n
}
# wait_exit PID SECS: XRC is the exit status of the server PID (a child of
# this shell: not to be called in a subshell), or "hung" (then killed) if
# it has not exited within SECS; XMS the milliseconds it took
wait_exit() {
    local t0
    t0=$(date +%s%N)
    XRC=hung
    for _ in $(seq $(($2 * 100))); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.01
    done
    kill -0 "$1" 2>/dev/null && kill -KILL "$1" 2>/dev/null && { wait "$1" 2>/dev/null; XMS=$((($(date +%s%N) - t0) / 1000000)); return; }
    wait "$1"
    XRC=$?
    XMS=$((($(date +%s%N) - t0) / 1000000))
}
# gone_within SECS PIDS...: polls until none of them is alive; echoes the ms it took, or "never"
gone_within() {
    local limit=$1 t0; shift
    t0=$(date +%s%N)
    for _ in $(seq $((limit * 20))); do
        [ "$(alive "$@")" = 0 ] && { echo $((($(date +%s%N) - t0) / 1000000)); return; }
        sleep 0.05
    done
    echo never
}
if start_orch orch "$M"; then
    B="http://127.0.0.1:$PORT"
    has "orchestrator: the worker is this binary's tp-worker" "tp-worker -m $M --tp 2" "$(tr '\0' ' ' </proc/$WPID/cmdline)"
    has "orchestrator /info: two shards" '"num_shard":2,"sharded":true' "$(curl -s "$B/info")"
    greedy=$(curl -s "$B/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}')
    has "orchestrator: greedy text as one process" '"text":", there was a little girl named Lily.' "$greedy"
    seeded "$B" >"$tmp/seeded-orch"
    if [ -s "$tmp/seeded-leader" ]; then
        check "orchestrator: a seeded sampled completion and its logprobs as leader mode's, bit for bit" \
            "$(cat "$tmp/seeded-leader")" "$(cat "$tmp/seeded-orch")"
    else
        bad "orchestrator: leader mode's seeded completion is missing"
    fi
    if command -v node >/dev/null && [ -d tests/server/node_modules/openai ]; then
        env BASE_URL="$B" MODEL=stories260K timeout 100 node tests/server/openai.test.mjs >"$tmp/node.log" 2>&1
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$tmp/node.log" | tail -1)
        check "openai client tests against orchestrator mode: none failed" 0 "$(echo "${line:-x, 1 failed}" | sed 's/.*, \([0-9]*\) failed/\1/')"
        grep -a '^FAIL' "$tmp/node.log" | head -10
        echo "  openai.test.mjs against orchestrator mode: $line"
    fi
    kill -TERM "$OPID"
    wait_exit "$OPID" 30
    check "orchestrator, SIGTERM: the server exits 0" 0 "$XRC"
    check "orchestrator, SIGTERM: the worker gone when the server has exited" 0 "$(alive "$WPID")"
    ms=$(gone_within 10 "$ORTED")
    echo "  Open MPI's daemon gone ${ms} ms after the server"
    check "orchestrator, SIGTERM: Open MPI's daemon gone within 10 s" 1 "$([ "$ms" != never ] && echo 1)"
fi

# a worker killed mid-stream: 503, the stream ends with the error, the
# leader exits 1 within the bound and leaves no worker behind
if start_orch ofault "$R" -c 32768 --tp-timeout $TPT; then
    B="http://127.0.0.1:$PORT"
    curl -sN -m 60 "$B/v1/completions" -d '{"prompt":"Once upon a time","max_tokens":30000,"ignore_eos":true,"stream":true}' >"$tmp/ostream" 2>&1 &
    cpid=$!
    for _ in $(seq 100); do [ "$(grep -c '^data:' "$tmp/ostream")" -ge 3 ] && break; sleep 0.05; done
    t0=$(date +%s%N)
    kill -KILL "$WPID"
    code=$(curl -s -m 30 -o "$tmp/olate" -w '%{http_code}' "$B/v1/completions" -d '{"prompt":"x","max_tokens":4}')
    wait_exit "$OPID" 15
    orc=$XRC
    exited=$((($(date +%s%N) - t0) / 1000000))
    [ "$orc" = hung ] && exited=
    left=$(alive "$WPID")
    wait "$cpid"
    # a spawned worker's death is seen at once, so the server may have
    # answered and gone before a client started after the kill connects:
    # then the connection is refused (000) and the stream carries the why
    if [ "$code" = 000 ] && [ "$orc" = 1 ]; then
        ok "orchestrator, killed worker: a new request refused, the server already gone"
        why=$tmp/ostream
    else
        check "orchestrator, killed worker: a new request gets 503" 503 "$code"
        why=$tmp/olate
    fi
    has "orchestrator, killed worker: the error names the dead rank" "rank 1 (process $WPID, which this process spawned) died" "$(cat "$why")"
    has "orchestrator, killed worker: the stream under way ends with the error" "lost a rank" "$(cat "$tmp/ostream")"
    check "orchestrator, killed worker: the stream had not finished" 0 "$(grep -c '"finish_reason":"length"' "$tmp/ostream")"
    check "orchestrator, killed worker: the server exits 1" 1 "$orc"
    echo "  the server exited ${exited:-never (within 15 s)} ms after the kill (--tp-timeout $TPT, bound ${BOUND} s)"
    check "orchestrator, killed worker: the server gone within ${BOUND} s" 1 "$([ -n "$exited" ] && [ "$exited" -le $((BOUND * 1000)) ] && echo 1)"
    check "orchestrator, killed worker: no worker left when the server has exited" 0 "$left"
    ms=$(gone_within 10 "$ORTED")
    check "orchestrator, killed worker: Open MPI's daemon gone within 10 s (${ms} ms)" 1 "$([ "$ms" != never ] && echo 1)"
fi

# the leader killed: Open MPI's daemon ends the worker (and the worker's
# own deadline would)
if start_orch okill "$M" --tp-timeout $TPT; then
    kill -KILL "$OPID"
    ms=$(gone_within 10 "$WPID" "$ORTED")
    echo "  worker and daemon gone ${ms} ms after the leader's SIGKILL"
    check "orchestrator, leader killed: worker and daemon gone within 10 s" 1 "$([ "$ms" != never ] && echo 1)"
fi
# a worker stopped (not dead): the leader's deadline, then SIGKILL of the worker
if start_orch ostop "$M" --tp-timeout $TPT; then
    B="http://127.0.0.1:$PORT"
    kill -STOP "$WPID"
    t0=$(date +%s%N)
    code=$(curl -s -m 30 -o /dev/null -w '%{http_code}' "$B/v1/completions" -d '{"prompt":"x","max_tokens":4}')
    wait_exit "$OPID" 20
    orc=$XRC
    ms=$((($(date +%s%N) - t0) / 1000000))
    check "orchestrator, stopped worker: 503" 503 "$code"
    check "orchestrator, stopped worker: the server exits 1 within ${BOUND} s (${ms} ms)" 1 "$([ "$orc" = 1 ] && [ "$ms" -le $((BOUND * 1000)) ] && echo 1)"
    check "orchestrator, stopped worker: no worker left when the server has exited" 0 "$(alive "$WPID")"
fi

# a worker killed while the model loads (a model that takes about half a
# second, the kill as soon as the server says it is loading): a failure
# while running, exit 1 naming the lost rank, not a usage error's 2
if "$BUILD/tools/mkmodel" -o "$tmp/slow.gguf" --vocab $V --n-embd 1024 --n-head 8 --n-head-kv 4 \
    --n-ff 2816 --n-layer 12 --type q8_0 >/dev/null 2>&1; then
    "$BIN" serve -m "$tmp/slow.gguf" --host 127.0.0.1 --port 0 -t 1 --tp 2 --tp-timeout $TPT \
        >"$tmp/oload.log" 2>&1 &
    OPID=$!
    pids+=("$OPID")
    for _ in $(seq 1000); do grep -aq "listening on" "$tmp/oload.log" && break; sleep 0.01; done
    W=$(pgrep -f "tp-worker -m $tmp/slow.gguf" | head -1)
    [ -n "$W" ] && kill -KILL "$W"
    wait_exit "$OPID" 20
    check "orchestrator, worker killed while loading: the server exits 1" 1 "$XRC"
    has "orchestrator, worker killed while loading: it says the job lost a rank while loading" \
        "lost a rank while loading" "$(cat "$tmp/oload.log")"
    rm -f "$tmp/slow.gguf"
else
    bad "mkmodel a model that takes a while to load"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
