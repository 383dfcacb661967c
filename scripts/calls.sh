#!/usr/bin/env bash
# Lists the pairs of object files that call each other both ways: for each
# pair A, B of the given objects, A uses a symbol that B defines and B uses
# one that A defines. Such a pair is one idea split in two (or two ideas
# knotted together); the fix is a file of its own for what both need.
#
#   scripts/calls.sh build/src/runtime/*.o
#
# Prints one line per pair (A <-> B: A's uses of B | B's uses of A) and
# exits 1 if there is any; prints nothing and exits 0 otherwise.
set -u
declare -A def use
for o in "$@"; do
    def[$o]=" $(nm -g --defined-only "$o" | awk '{print $3}' | tr '\n' ' ') "
    use[$o]=" $(nm -u "$o" | awk '{print $2}' | tr '\n' ' ') "
done
found=0
objs=("$@")
for ((i = 0; i < ${#objs[@]}; i++)); do
    for ((j = i + 1; j < ${#objs[@]}; j++)); do
        a=${objs[i]} b=${objs[j]} ab="" ba=""
        for s in ${use[$a]}; do [[ ${def[$b]} == *" $s "* ]] && ab+=" $s"; done
        [ -n "$ab" ] || continue
        for s in ${use[$b]}; do [[ ${def[$a]} == *" $s "* ]] && ba+=" $s"; done
        [ -n "$ba" ] || continue
        echo "$(basename "$a" .o) <-> $(basename "$b" .o):$ab |$ba"
        found=1
    done
done
exit $found
