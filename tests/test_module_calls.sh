#!/usr/bin/env bash
# No two files of src/runtime/, nor two of src/server/, call each other
# both ways (scripts/calls.sh over their objects): within each module the
# calls run one way, so a file can be read, changed or replaced with only
# the files below it in mind.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
. tests/lib.sh
for m in runtime server; do
    objs=("$BUILD"/src/$m/*.o)
    if [ ! -f "${objs[0]}" ]; then
        bad "$m objects in $BUILD/src/$m (build first)"
        continue
    fi
    check "$m objects found" yes "$([ ${#objs[@]} -ge 10 ] && echo yes || echo no)"
    out=$(bash scripts/calls.sh "${objs[@]}")
    check "no $m files call each other both ways" "" "$out"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
