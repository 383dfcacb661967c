#!/usr/bin/env bash
# Runs every test binary in $BUILD/tests and every tests/*.sh script, each
# with a time limit, and adds up their closing "N passed, N failed" lines.
set -u
BUILD=${BUILD:-build}
export BUILD
# the default repack cache goes to a directory of the run's own, not ~/.cache
if [ -z "${INFLIGHT_CACHE_DIR:-}" ]; then
    INFLIGHT_CACHE_DIR=$(mktemp -d)
    trap 'rm -rf "$INFLIGHT_CACHE_DIR"' EXIT
fi
export INFLIGHT_CACHE_DIR
cd "$(dirname "$0")/.."
total_pass=0
total_fail=0
broken=()
run_one() {
    local name=$1; shift
    local log
    log=$(mktemp)
    local t0=$SECONDS
    timeout -k 10 600 "$@" >"$log" 2>&1
    local rc=$?
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    local p=0 f=0
    if [ -n "$line" ]; then
        p=$(echo "$line" | awk '{print $1}')
        f=$(echo "$line" | awk '{print $3}')
    fi
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; broken+=("$name (exit $rc)"); fi
    if [ "$f" -ne 0 ] || [ "$rc" -ne 0 ]; then
        echo "---- $name: output ----"
        tail -n 60 "$log"
        echo "---- end $name ----"
    fi
    printf '%-28s %5d passed, %3d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    rm -f "$log"
}
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in tests/*.sh; do
    case "$(basename "$s")" in run.sh | lib.sh) continue ;; esac
    [ -f "$s" ] || continue
    run_one "$(basename "$s")" bash "$s"
done
for b in "${broken[@]}"; do echo "broken: $b"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
