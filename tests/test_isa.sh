#!/usr/bin/env bash
# Which instructions each kernel object may hold. dispatch.c runs a table's
# functions only on a CPU that has its instruction sets, so an instruction
# from a larger set inside a smaller table's object faults on the CPUs that
# table is chosen for: a BF16 one in the plain avx512 table on Ice Lake, an
# AVX-512 one in the avx2 table on Zen 3. The compiler may use any
# instruction its flags allow, intrinsics or not, so the flags are checked
# (make -n) and then the objects themselves (objdump).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BUILD=${BUILD:-build}
K=$BUILD/src/kernels
BF16_RE='vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16'
# EVEX-only registers: zmm, opmasks, xmm/ymm 16-31
EVEX_RE='%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])'

if ! command -v objdump >/dev/null; then
    echo "objdump not found (Debian: binutils)"
    echo "0 passed, 1 failed"
    exit 1
fi

# The compile commands make would run (nothing is built: -n).
flags_of() { make -n -B V=1 BUILD="$BUILD" "$K/$1.o" 2>/dev/null | grep -F -- "$1.c"; }
for s in src/kernels/x86_avx512*.c src/kernels/x86_avx2*.c; do
    b=$(basename "$s" .c)
    cmd=$(flags_of "$b")
    if [ -z "$cmd" ]; then bad "make -n names the command for $b"; continue; fi
    case "$b:$cmd" in
    x86_avx512_bf16:*-mavx512bf16*) ok "$b is compiled with -mavx512bf16" ;;
    x86_avx512_bf16:*) bad "$b is compiled with -mavx512bf16" ;;
    *:*-mavx512bf16*) bad "$b is compiled without -mavx512bf16"; echo "  $cmd" ;;
    *) ok "$b is compiled without -mavx512bf16" ;;
    esac
done

# Which instructions the built objects hold (the objects of this $BUILD).
count() { objdump -d --no-show-raw-insn "$1" | grep -cE "$2"; }
if [ ! -f "$K/x86_avx512_bf16.o" ]; then
    bad "$K/x86_avx512_bf16.o is built (run make first)"
else
    n=$(count "$K/x86_avx512_bf16.o" 'vdpbf16ps')
    [ "$n" -gt 0 ] && ok "x86_avx512_bf16.o holds vdpbf16ps ($n)" || bad "x86_avx512_bf16.o holds vdpbf16ps"
fi
nobj=0
offenders=
while IFS= read -r o; do
    nobj=$((nobj + 1))
    [ "$(basename "$o")" = x86_avx512_bf16.o ] && continue
    n=$(count "$o" "$BF16_RE")
    [ "$n" -gt 0 ] && offenders="$offenders $o($n)"
done < <(find "$BUILD/src" "$BUILD/gen" -name '*.o' 2>/dev/null)
[ "$nobj" -gt 10 ] && ok "$nobj objects found" || bad "objects found in $BUILD/src ($nobj)"
check "no BF16 instruction outside x86_avx512_bf16.o" "" "$offenders"
offenders=
for o in "$K"/x86_avx2*.o; do
    [ -f "$o" ] || continue
    n=$(count "$o" "$EVEX_RE")
    [ "$n" -gt 0 ] && offenders="$offenders $o($n)"
done
check "no AVX-512 register in the avx2 objects" "" "$offenders"
n=$(count "$K/x86_avx512_gemm.o" '%zmm')
[ "$n" -gt 0 ] && ok "the EVEX pattern finds zmm in x86_avx512_gemm.o ($n)" ||
    bad "the EVEX pattern finds zmm in x86_avx512_gemm.o"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
