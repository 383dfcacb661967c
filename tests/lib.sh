# What the shell tests share: named checks that count into $pass and $fail
# (each script prints its own closing "N passed, N failed"). Sourced, not run.
pass=${pass:-0}
fail=${fail:-0}
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { # name, expected, actual
    if [ "$2" = "$3" ]; then ok "$1"; else bad "$1"; echo "  expected: $2"; echo "  actual:   $3"; fi
}
has() { # name, needle, haystack
    case "$3" in *"$2"*) ok "$1" ;; *) bad "$1"; echo "  missing: $2"; echo "  in: ${3:0:400}" ;; esac
}
