/*
 * kbench's `ports` mode: which instructions of the int8 gemm tiles share
 * the vector pipes that run zmm vpdpbusd. Part of tools/kbench.c, included
 * by it after kbench_peak.h (whose clock and PK_Z it uses).
 *
 * Each loop issues 12 independent vpdpbusd (enough chains for their
 * throughput, kbench peak) and beside them four instructions of one kind
 * whose results nothing reads. With 12 vpdpbusd alone an iteration takes
 * 12 / (vpdpbusd a cycle) cycles; the four cost nothing more when they
 * issue on other pipes (or other ports: loads), and about half a cycle
 * each more when they take the two pipes vpdpbusd runs on. That share is
 * what bounds a tile: per 32-element block, 16 weight rows and one
 * activation row, the x16 tiles issue 8 vpdpbusd, then a multiply of the
 * two scales, a conversion of the integer sum and an FMA into the row's
 * sum. Times by CPU time; cycles from kbench peak's clock (a dependent
 * chain of scalar adds); the best of 5 trials.
 */

#define PT_DP12                                                                                    \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n\tvpdpbusd %%zmm30, %%zmm31, %%zmm1\n\t"                   \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm2\n\tvpdpbusd %%zmm30, %%zmm31, %%zmm3\n\t"                   \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm4\n\tvpdpbusd %%zmm30, %%zmm31, %%zmm5\n\t"                   \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n\tvpdpbusd %%zmm30, %%zmm31, %%zmm7\n\t"                   \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm8\n\tvpdpbusd %%zmm30, %%zmm31, %%zmm9\n\t"                   \
    "vpdpbusd %%zmm30, %%zmm31, %%zmm10\n\tvpdpbusd %%zmm30, %%zmm31, %%zmm11\n\t"
/* four of one instruction: OP's operands for destinations 12 .. 15 */
#define PT_4(A, B, C, D) A "\n\t" B "\n\t" C "\n\t" D "\n\t"

static char pt_buf[512] __attribute__((aligned(64)));

#define PT_DEF(NAME, EXTRA)                                                                        \
    static PK_Z long NAME(long iters)                                                              \
    {                                                                                              \
        __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n\t"                                    \
                         "vpxord %%zmm31, %%zmm31, %%zmm31\n\t"                                    \
                         "1:\n\t" PT_DP12 EXTRA "dec %[n]\n\t"                                     \
                         "jnz 1b\n\t"                                                              \
                         : [n] "+r"(iters)                                                         \
                         : [p] "r"(pt_buf)                                                         \
                         : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", \
                           "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",    \
                           "xmm15", "xmm30", "xmm31");                                             \
        return iters;                                                                              \
    }

/* clang-format off */
PT_DEF(pt_none, "")
PT_DEF(pt_mul, PT_4("vmulps %%zmm30, %%zmm31, %%zmm12", "vmulps %%zmm30, %%zmm31, %%zmm13",
                    "vmulps %%zmm30, %%zmm31, %%zmm14", "vmulps %%zmm30, %%zmm31, %%zmm15"))
PT_DEF(pt_fma, PT_4("vfmadd231ps %%zmm30, %%zmm31, %%zmm12", "vfmadd231ps %%zmm30, %%zmm31, %%zmm13",
                    "vfmadd231ps %%zmm30, %%zmm31, %%zmm14", "vfmadd231ps %%zmm30, %%zmm31, %%zmm15"))
PT_DEF(pt_add, PT_4("vaddps %%zmm30, %%zmm31, %%zmm12", "vaddps %%zmm30, %%zmm31, %%zmm13",
                    "vaddps %%zmm30, %%zmm31, %%zmm14", "vaddps %%zmm30, %%zmm31, %%zmm15"))
PT_DEF(pt_cvt, PT_4("vcvtdq2ps %%zmm30, %%zmm12", "vcvtdq2ps %%zmm30, %%zmm13",
                    "vcvtdq2ps %%zmm31, %%zmm14", "vcvtdq2ps %%zmm31, %%zmm15"))
PT_DEF(pt_cvtph, PT_4("vcvtph2ps %%ymm30, %%zmm12", "vcvtph2ps %%ymm30, %%zmm13",
                      "vcvtph2ps %%ymm31, %%zmm14", "vcvtph2ps %%ymm31, %%zmm15"))
PT_DEF(pt_shuf, PT_4("vpshufd $0x55, %%zmm30, %%zmm12", "vpshufd $0xaa, %%zmm30, %%zmm13",
                     "vpshufd $0x00, %%zmm31, %%zmm14", "vpshufd $0xff, %%zmm31, %%zmm15"))
PT_DEF(pt_iadd, PT_4("vpaddd %%zmm30, %%zmm31, %%zmm12", "vpaddd %%zmm30, %%zmm31, %%zmm13",
                     "vpaddd %%zmm30, %%zmm31, %%zmm14", "vpaddd %%zmm30, %%zmm31, %%zmm15"))
PT_DEF(pt_ld, PT_4("vmovdqu64 (%[p]), %%zmm12", "vmovdqu64 64(%[p]), %%zmm13",
                   "vmovdqu64 128(%[p]), %%zmm14", "vmovdqu64 192(%[p]), %%zmm15"))
PT_DEF(pt_bc32, PT_4("vpbroadcastd (%[p]), %%zmm12", "vpbroadcastd 4(%[p]), %%zmm13",
                     "vpbroadcastd 8(%[p]), %%zmm14", "vpbroadcastd 12(%[p]), %%zmm15"))
PT_DEF(pt_bc128, PT_4("vbroadcasti32x4 (%[p]), %%zmm12", "vbroadcasti32x4 16(%[p]), %%zmm13",
                      "vbroadcasti32x4 32(%[p]), %%zmm14", "vbroadcasti32x4 48(%[p]), %%zmm15"))
PT_DEF(pt_st, PT_4("vmovdqu64 %%zmm30, 256(%[p])", "vmovdqu64 %%zmm31, 320(%[p])",
                   "vmovdqu64 %%zmm30, 384(%[p])", "vmovdqu64 %%zmm31, 448(%[p])"))
/* clang-format on */

static int ports_main(void)
{
    if (!ifl_kernels_by_name("avx512")) {
        printf("ports: this CPU has no AVX-512 VNNI; nothing to measure\n");
        return 0;
    }
    static const struct {
        const char *name;
        pk_loop_fn fn;
    } mix[] = {
        {"(nothing)", pt_none},
        {"vmulps zmm", pt_mul},
        {"vfmadd231ps zmm", pt_fma},
        {"vaddps zmm", pt_add},
        {"vcvtdq2ps zmm", pt_cvt},
        {"vcvtph2ps ymm->zmm", pt_cvtph},
        {"vpshufd zmm", pt_shuf},
        {"vpaddd zmm", pt_iadd},
        {"load zmm", pt_ld},
        {"vpbroadcastd m32", pt_bc32},
        {"vbroadcasti32x4 m128", pt_bc128},
        {"store zmm", pt_st},
    };
    const int nm = (int)(sizeof(mix) / sizeof(mix[0]));
    double ghz = pk_rate(pk_clock, 4, 1, 5, NULL) * 1e-9;
    printf("12 zmm vpdpbusd + 4 other instructions a loop; 1 thread by CPU time, best of 5\n");
    printf("clock (a dependent chain of scalar adds): %.2f GHz\n", ghz);
    printf("%-22s %12s %22s\n", "the 4 instructions", "cycles/loop", "more cycles each");
    double base = 0;
    for (int m = 0; m < nm; m++) {
        /* pk_rate counts "operations" per iteration: 1 gives iterations a second */
        double cyc = ghz * 1e9 / pk_rate(mix[m].fn, 1, 1, 5, NULL);
        if (m == 0)
            base = cyc;
        printf("%-22s %12.2f %22.2f\n", mix[m].name, cyc, m ? (cyc - base) / 4 : 0.0);
        fflush(stdout);
    }
    return 0;
}
