/* fma_mix.c — how the FP pipes of this CPU take a mix of FMAs and other vector instructions (bench/NOTES.md, CPU
 * log row 23). Each variant is one asm block of 16 independent zmm FMAs, with:
 *   0  nothing else (the FMA rate)
 *   1  the output pass's old pattern: 2 f16->f32 conversions (vcvtph2ps from memory) and 8 vbroadcastss, each
 *      broadcast used by 2 FMAs
 *   2  the same with the broadcasts embedded in the FMAs' memory operands ({1to16}): what kern.h now does
 *   3  the 2 conversions alone
 *   4  the score pass: 2 conversions and 8 q vectors loaded into registers
 *   5  the score pass with q as the FMAs' (full-vector) memory operands
 * and prints ns per 16 FMAs, two runs each. On Zen 4 (session 5): 4.46, 5.19-5.25, 4.41, 4.42-4.44, 4.38-4.40,
 * 5.08-5.14: a vbroadcastss takes an FP pipe slot, an embedded broadcast or a conversion does not.
 *
 *   cc -O2 -mavx512f bench/micro/fma_mix.c -o /tmp/fma_mix && /tmp/fma_mix
 */
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
float pbuf[64] __attribute__((aligned(64)));
uint16_t hbuf[64] __attribute__((aligned(64)));
#define FMA16(m) \
 "vfmadd231ps %%zmm0," m ",%%zmm8\n vfmadd231ps %%zmm1," m ",%%zmm9\n vfmadd231ps %%zmm0," m ",%%zmm10\n vfmadd231ps %%zmm1," m ",%%zmm11\n" \
 "vfmadd231ps %%zmm0," m ",%%zmm12\n vfmadd231ps %%zmm1," m ",%%zmm13\n vfmadd231ps %%zmm0," m ",%%zmm14\n vfmadd231ps %%zmm1," m ",%%zmm15\n" \
 "vfmadd231ps %%zmm0," m ",%%zmm16\n vfmadd231ps %%zmm1," m ",%%zmm17\n vfmadd231ps %%zmm0," m ",%%zmm18\n vfmadd231ps %%zmm1," m ",%%zmm19\n" \
 "vfmadd231ps %%zmm0," m ",%%zmm20\n vfmadd231ps %%zmm1," m ",%%zmm21\n vfmadd231ps %%zmm0," m ",%%zmm22\n vfmadd231ps %%zmm1," m ",%%zmm23\n"
int main(){
  long N=20000000; double t;
  for(int variant=0;variant<6;variant++){
   for(int rep=0;rep<2;rep++){
    t=now();
    for(long i=0;i<N;i++){
      switch(variant){
      case 0: asm volatile(FMA16("%%zmm2") ::: "memory"); break;
      case 1: asm volatile( /* PV now: 8 bcast, each used by 2 FMAs, + 2 cvt */
        "vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n"
        "vbroadcastss 0(%1),%%zmm2\n vfmadd231ps %%zmm0,%%zmm2,%%zmm8\n vfmadd231ps %%zmm1,%%zmm2,%%zmm9\n"
        "vbroadcastss 4(%1),%%zmm3\n vfmadd231ps %%zmm0,%%zmm3,%%zmm10\n vfmadd231ps %%zmm1,%%zmm3,%%zmm11\n"
        "vbroadcastss 8(%1),%%zmm4\n vfmadd231ps %%zmm0,%%zmm4,%%zmm12\n vfmadd231ps %%zmm1,%%zmm4,%%zmm13\n"
        "vbroadcastss 12(%1),%%zmm5\n vfmadd231ps %%zmm0,%%zmm5,%%zmm14\n vfmadd231ps %%zmm1,%%zmm5,%%zmm15\n"
        "vbroadcastss 16(%1),%%zmm2\n vfmadd231ps %%zmm0,%%zmm2,%%zmm16\n vfmadd231ps %%zmm1,%%zmm2,%%zmm17\n"
        "vbroadcastss 20(%1),%%zmm3\n vfmadd231ps %%zmm0,%%zmm3,%%zmm18\n vfmadd231ps %%zmm1,%%zmm3,%%zmm19\n"
        "vbroadcastss 24(%1),%%zmm4\n vfmadd231ps %%zmm0,%%zmm4,%%zmm20\n vfmadd231ps %%zmm1,%%zmm4,%%zmm21\n"
        "vbroadcastss 28(%1),%%zmm5\n vfmadd231ps %%zmm0,%%zmm5,%%zmm22\n vfmadd231ps %%zmm1,%%zmm5,%%zmm23\n"
        :: "r"(hbuf), "r"(pbuf) : "memory"); break;
      case 2: asm volatile( /* embedded broadcast */
        "vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n"
        "vfmadd231ps 0(%1)%{1to16%},%%zmm0,%%zmm8\n vfmadd231ps 0(%1)%{1to16%},%%zmm1,%%zmm9\n"
        "vfmadd231ps 4(%1)%{1to16%},%%zmm0,%%zmm10\n vfmadd231ps 4(%1)%{1to16%},%%zmm1,%%zmm11\n"
        "vfmadd231ps 8(%1)%{1to16%},%%zmm0,%%zmm12\n vfmadd231ps 8(%1)%{1to16%},%%zmm1,%%zmm13\n"
        "vfmadd231ps 12(%1)%{1to16%},%%zmm0,%%zmm14\n vfmadd231ps 12(%1)%{1to16%},%%zmm1,%%zmm15\n"
        "vfmadd231ps 16(%1)%{1to16%},%%zmm0,%%zmm16\n vfmadd231ps 16(%1)%{1to16%},%%zmm1,%%zmm17\n"
        "vfmadd231ps 20(%1)%{1to16%},%%zmm0,%%zmm18\n vfmadd231ps 20(%1)%{1to16%},%%zmm1,%%zmm19\n"
        "vfmadd231ps 24(%1)%{1to16%},%%zmm0,%%zmm20\n vfmadd231ps 24(%1)%{1to16%},%%zmm1,%%zmm21\n"
        "vfmadd231ps 28(%1)%{1to16%},%%zmm0,%%zmm22\n vfmadd231ps 28(%1)%{1to16%},%%zmm1,%%zmm23\n"
        :: "r"(hbuf), "r"(pbuf) : "memory"); break;
      case 3: asm volatile("vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n" FMA16("%%zmm2") :: "r"(hbuf) : "memory"); break;
      case 4: asm volatile( /* QK now: 2 cvt, 8 q loads, 16 FMA */
        "vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n"
        "vmovups 0(%1),%%zmm2\n vmovups 64(%1),%%zmm3\n vmovups 128(%1),%%zmm4\n vmovups 192(%1),%%zmm5\n"
        "vmovups 0(%1),%%zmm24\n vmovups 64(%1),%%zmm25\n vmovups 128(%1),%%zmm26\n vmovups 192(%1),%%zmm27\n"
        "vfmadd231ps %%zmm0,%%zmm2,%%zmm8\n vfmadd231ps %%zmm1,%%zmm2,%%zmm9\n vfmadd231ps %%zmm0,%%zmm3,%%zmm10\n vfmadd231ps %%zmm1,%%zmm3,%%zmm11\n"
        "vfmadd231ps %%zmm0,%%zmm4,%%zmm12\n vfmadd231ps %%zmm1,%%zmm4,%%zmm13\n vfmadd231ps %%zmm0,%%zmm5,%%zmm14\n vfmadd231ps %%zmm1,%%zmm5,%%zmm15\n"
        "vfmadd231ps %%zmm0,%%zmm24,%%zmm16\n vfmadd231ps %%zmm1,%%zmm24,%%zmm17\n vfmadd231ps %%zmm0,%%zmm25,%%zmm18\n vfmadd231ps %%zmm1,%%zmm25,%%zmm19\n"
        "vfmadd231ps %%zmm0,%%zmm26,%%zmm20\n vfmadd231ps %%zmm1,%%zmm26,%%zmm21\n vfmadd231ps %%zmm0,%%zmm27,%%zmm22\n vfmadd231ps %%zmm1,%%zmm27,%%zmm23\n"
        :: "r"(hbuf), "r"(pbuf) : "memory"); break;
      case 5: asm volatile( /* QK with q as memory operands (no separate loads) */
        "vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n"
        "vfmadd231ps 0(%1),%%zmm0,%%zmm8\n vfmadd231ps 0(%1),%%zmm1,%%zmm9\n vfmadd231ps 64(%1),%%zmm0,%%zmm10\n vfmadd231ps 64(%1),%%zmm1,%%zmm11\n"
        "vfmadd231ps 128(%1),%%zmm0,%%zmm12\n vfmadd231ps 128(%1),%%zmm1,%%zmm13\n vfmadd231ps 192(%1),%%zmm0,%%zmm14\n vfmadd231ps 192(%1),%%zmm1,%%zmm15\n"
        "vfmadd231ps 0(%1),%%zmm0,%%zmm16\n vfmadd231ps 0(%1),%%zmm1,%%zmm17\n vfmadd231ps 64(%1),%%zmm0,%%zmm18\n vfmadd231ps 64(%1),%%zmm1,%%zmm19\n"
        "vfmadd231ps 128(%1),%%zmm0,%%zmm20\n vfmadd231ps 128(%1),%%zmm1,%%zmm21\n vfmadd231ps 192(%1),%%zmm0,%%zmm22\n vfmadd231ps 192(%1),%%zmm1,%%zmm23\n"
        :: "r"(hbuf), "r"(pbuf) : "memory"); break;
      }
    }
    t=now()-t;
    printf("variant %d: %.3f ns per 16 FMAs\n", variant, t/N*1e9);
   }
  }
}
