# What the shell tests share: named checks that count into $pass and $fail
# (each script prints its own closing "N passed, N failed"). Sourced, not run.
pass=${pass:-0}
fail=${fail:-0}
# the script's scratch folder and the servers it starts (start_server adds
# to pids), removed and stopped when it exits; a script that must clean up
# otherwise sets tmp and its own trap before sourcing this
if [ -z "${tmp:-}" ]; then
    tmp=$(mktemp -d)
    pids=()
    cleanup() {
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        rm -rf "$tmp"
    }
    trap cleanup EXIT
fi
START_ARGS=("${START_ARGS[@]}") # flags every start_server of the script adds
# skip WHY: the script cannot run here (missing data or a Python module): says
# so, counts nothing, and exits 0
skip() {
    echo "skip: $1"
    echo "0 passed, 0 failed"
    exit 0
}
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { # name, expected, actual
    if [ "$2" = "$3" ]; then ok "$1"; else bad "$1"; echo "  expected: $2"; echo "  actual:   $3"; fi
}
has() { # name, needle, haystack
    case "$3" in *"$2"*) ok "$1" ;; *) bad "$1"; echo "  missing: $2"; echo "  in: ${3:0:400}" ;; esac
}

# start_server NAME ARGS...: `$BIN serve -m $M ${START_ARGS[@]} ARGS` on
# 127.0.0.1 and a free port, stderr in $tmp/NAME.log, its pid added to
# $pids; sets PORT and SPID once /health answers 200 (10 s each for the port
# and the health), else prints the log and returns 1. ARGS may hold -m and
# --port: the later ones win.
start_server() {
    local name=$1; shift
    ( exec "$BIN" serve -m "$M" --host 127.0.0.1 --port 0 "${START_ARGS[@]}" "$@" \
        2>"$tmp/$name.log" ) &
    SPID=$!
    pids+=("$SPID")
    PORT=
    for _ in $(seq 100); do
        PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/$name.log" 2>/dev/null | grep -o '[0-9]*$')
        [ -n "$PORT" ] && break
        sleep 0.1
    done
    for _ in $(seq 100); do
        [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
        sleep 0.1
    done
    echo "server $name did not start:"; cat "$tmp/$name.log"
    return 1
}

# npm_ready: node and tests/server/package.json's packages (the openai npm
# client and the rest) at their versions, installed when they are not;
# otherwise a failed check and 1.
npm_ready() {
    command -v node >/dev/null || { bad "node is needed for the npm client tests"; return 1; }
    node -e 'const p = require("./tests/server/package.json").dependencies;
      for (const [n, v] of Object.entries(p))
        if (require("./tests/server/node_modules/" + n + "/package.json").version !== v) process.exit(1)' \
        2>/dev/null && return 0
    (cd tests/server && timeout 300 npm install --no-audit --no-fund --no-package-lock --prefer-offline) \
        >"$tmp/npm.log" 2>&1 && return 0
    bad "npm install of tests/server/package.json failed (no network and nothing in npm's cache?)"
    tail -5 "$tmp/npm.log"
    return 1
}

# add_counts LOG [RC]: the closing "N passed, M failed" line of LOG (a
# Python or node script's) added into pass and fail, and kept in cnt_p and
# cnt_f; no such line counts as one failure, and so does a non-zero exit
# status RC with none failed. Status 1 when LOG had no such line.
add_counts() {
    local line rc=${2:-0}
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    cnt_p=${line%% passed*}; cnt_f=${line#*, }; cnt_f=${cnt_f%% failed*}
    [ -z "$line" ] && { cnt_p=0; cnt_f=1; }
    [ "$rc" -ne 0 ] && [ "$cnt_f" -eq 0 ] && cnt_f=1
    pass=$((pass + cnt_p)); fail=$((fail + cnt_f))
    [ -n "$line" ]
}

# run_node NAME SECONDS SCRIPT [VAR=VALUE ...]: a node test script under
# those variables, counted by add_counts, and its lines that are not "ok"
# shown when one failed.
run_node() {
    local name=$1 secs=$2 script=$3; shift 3
    env "$@" timeout "$secs" node "$script" >"$tmp/node.log" 2>&1
    add_counts "$tmp/node.log" $?
    [ "$cnt_f" -ne 0 ] && grep -v '^ok' "$tmp/node.log" | head -40
    echo "$name: $cnt_p passed, $cnt_f failed"
}
