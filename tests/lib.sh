# What the shell tests share: named checks that count into $pass and $fail
# (each script prints its own closing "N passed, N failed"). Sourced, not run.
pass=${pass:-0}
fail=${fail:-0}
START_ARGS=("${START_ARGS[@]}") # flags every start_server of the script adds
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
