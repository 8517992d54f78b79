/* cvt_cost.c — what an f16 -> f32 conversion (`vcvtph2ps` zmm from memory) costs beside 16 independent zmm FMAs on
 * this CPU (bench/NOTES.md, CPU log row 77): each variant is one asm block of 16 FMAs with N 512-bit conversions (16
 * values each), or with N/2 "integer" conversions of 32 f16 values each (a 64-byte load, two word unpacks against
 * zero, two shifts and two ternary logic ops: the f32 bits of the value times 2^-112, lanes permuted), or with
 * conversions and adds, or with 2N 256-bit conversions (the same values, 8 each), or with N pairs of 256-bit
 * conversions joined by a `vinsertf32x8` into 512-bit vectors. Prints ns per block, two rounds.
 *
 *   cc -O2 -mavx512f -mavx512bw -mavx512dq bench/micro/cvt_cost.c -o /tmp/cvt_cost && /tmp/cvt_cost
 */
#include <stdint.h>
#include <stdio.h>

#include "fma16.h" /* now() */
static uint16_t hb[1024] __attribute__((aligned(64)));
#define F(a, r) "vfmadd231ps %%zmm" #a ",%%zmm1,%%zmm" #r "\n"
/* fma16.h's FMA16 reads zmm0-2; these 16 read zmm2-5, which the first conversions write, as a kernel's FMAs read
 * its converted K */
#define F16                                                                                                     \
    F(2, 8) F(3, 9) F(4, 10) F(5, 11) F(2, 12) F(3, 13) F(4, 14) F(5, 15) F(2, 16) F(3, 17) F(4, 18) F(5, 19)   \
    F(2, 20) F(3, 21) F(4, 22) F(5, 23)
#define C(o, r) "vcvtph2ps " #o "(%0),%%zmm" #r "\n"
#define CVT2 C(0, 2) C(32, 3)
#define CVT4 C(0, 2) C(32, 3) C(64, 4) C(96, 5)
#define CVT8 CVT4 C(128, 24) C(160, 25) C(192, 26) C(224, 27)
#define CVT12 CVT8 C(256, 28) C(288, 29) C(320, 30) C(352, 31)
#define CVT16 CVT12 C(384, 24) C(416, 25) C(448, 26) C(480, 27)
/* the integer form: 32 f16 values (one 64-byte load) -> 2 vectors of f32 bits, the value times 2^-112 */
#define I1(o, ra, rb)                                                                                           \
    "vmovdqu16 " #o "(%0),%%zmm6\n vpunpcklwd %%zmm6,%%zmm0,%%zmm7\n vpunpckhwd %%zmm6,%%zmm0,%%zmm6\n"          \
    "vpsrld $3,%%zmm7,%%zmm" #ra "\n vpsrld $3,%%zmm6,%%zmm" #rb "\n"                                            \
    "vpternlogd $0xe4,%%zmm7,%%zmm31,%%zmm" #ra "\n vpternlogd $0xe4,%%zmm6,%%zmm31,%%zmm" #rb "\n"
#define I2 I1(0, 2, 3)
#define I4 I1(0, 2, 3) I1(64, 4, 5)
#define I8 I4 I1(128, 24, 25) I1(192, 26, 27)
#define CY(o, r) "vcvtph2ps " #o "(%0),%%ymm" #r "\n"
#define Y8 CY(0, 24) CY(16, 25) CY(32, 26) CY(48, 27) CY(64, 28) CY(80, 29) CY(96, 30) CY(112, 31)
#define Y16 Y8 CY(128, 24) CY(144, 25) CY(160, 26) CY(176, 27) CY(192, 28) CY(208, 29) CY(224, 30) CY(240, 31)
#define Y24 Y16 CY(256, 24) CY(272, 25) CY(288, 26) CY(304, 27) CY(320, 28) CY(336, 29) CY(352, 30) CY(368, 31)
#define Y32 Y24 CY(384, 24) CY(400, 25) CY(416, 26) CY(432, 27) CY(448, 28) CY(464, 29) CY(480, 30) CY(496, 31)
/* a 512-bit vector from two 256-bit conversions and an insert (lane-crossing) */
#define CI(o, r)                                                                                                \
    "vcvtph2ps " #o "(%0),%%ymm" #r "\n vcvtph2ps 16+" #o "(%0),%%ymm7\n"                                       \
    "vinsertf32x8 $1,%%ymm7,%%zmm" #r ",%%zmm" #r "\n"
#define CI8 CI(0, 24) CI(32, 25) CI(64, 26) CI(96, 27) CI(128, 28) CI(160, 29) CI(192, 30) CI(224, 31)
#define CI16 CI8 CI(256, 24) CI(288, 25) CI(320, 26) CI(352, 27) CI(384, 28) CI(416, 29) CI(448, 30) CI(480, 31)
#define A4                                                                                                      \
    "vaddps %%zmm26,%%zmm27,%%zmm26\n vaddps %%zmm28,%%zmm29,%%zmm28\n vaddps %%zmm30,%%zmm25,%%zmm30\n"          \
    "vaddps %%zmm24,%%zmm7,%%zmm6\n"
#define RUN(s) asm volatile(s ::"r"(hb) : "memory")
int main(void) {
    const long N = 20000000;
    const char *names[] = {"16 FMA",          "+2 cvt",          "+4 cvt",          "+8 cvt",          "+12 cvt",
                           "+16 cvt",         "+2 int-cvt",      "+4 int-cvt",      "+8 int-cvt",      "+8 cvt +4 add",
                           "+4 cvt +4 add",   "+16 ymm cvt",     "+32 ymm cvt",     "+8 ymm pair+ins",
                           "+16 ymm pair+ins"};
    for (int rep = 0; rep < 2; rep++)
        for (int v = 0; v < 15; v++) {
            double t = now();
            for (long i = 0; i < N; i++) {
                switch (v) {
                case 0: RUN(F16); break;
                case 1: RUN(CVT2 F16); break;
                case 2: RUN(CVT4 F16); break;
                case 3: RUN(CVT8 F16); break;
                case 4: RUN(CVT12 F16); break;
                case 5: RUN(CVT16 F16); break;
                case 6: RUN(I2 F16); break;
                case 7: RUN(I4 F16); break;
                case 8: RUN(I8 F16); break;
                case 9: RUN(CVT8 F16 A4); break;
                case 10: RUN(CVT4 F16 A4); break;
                case 11: RUN(Y16 F16); break;
                case 12: RUN(Y32 F16); break;
                case 13: RUN(CI8 F16); break;
                case 14: RUN(CI16 F16); break;
                }
            }
            t = now() - t;
            printf("%-20s %.2f ns\n", names[v], t / N * 1e9);
        }
    return 0;
}
