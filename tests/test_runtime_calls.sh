#!/usr/bin/env bash
# No two files of src/runtime/ call each other both ways (scripts/calls.sh
# over their objects): the engine's files, the response queue and the
# executor's API form a one-way chain.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
. tests/lib.sh
objs=("$BUILD"/src/runtime/*.o)
if [ ! -f "${objs[0]}" ]; then
    bad "runtime objects in $BUILD/src/runtime (build first)"
else
    check "runtime objects found" yes "$([ ${#objs[@]} -ge 10 ] && echo yes || echo no)"
    out=$(bash scripts/calls.sh "${objs[@]}")
    check "no runtime files call each other both ways" "" "$out"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
