/* qk_pairs.c — the score pass's inner pattern at 4 query heads a KV head, one position a vector against two
 * (bench/NOTES.md, CPU log row 42). Per 16 zmm FMAs with q in 4 registers: the K side and the reduction's share of
 * each pattern. "now": 4 vcvtph2ps and the one-position tree's 6 vshufps, 2 vshuff32x4 and 4 adds; "pairs": 4
 * vectors of two rows' 8 f16 each (an xmm load, then the second row by vinserti128 from memory or by a masked merge
 * load), converted, and the pair tree's 3 vshufps and 2 adds. On Zen 4 (session 16): 4.45 ns for the FMAs and
 * conversions alone, now 5.49, pairs with vinserti128 4.95, with the masked merge load 4.82. The score tile built on
 * it was faster in L3 but not from DRAM and was not kept (bench/patches/cpu-qk-pos-pairs.patch).
 *
 *   cc -O2 -mavx512f -mavx512bw bench/micro/qk_pairs.c -o /tmp/qk_pairs && /tmp/qk_pairs
 */
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
uint16_t hb[1024] __attribute__((aligned(64)));
#define F(k,q,r) "vfmadd231ps %%zmm" #k ",%%zmm" #q ",%%zmm" #r "\n"
/* per 16 FMAs: 4 K vectors x 4 q registers (24-27) */
#define F16 F(0,24,8)F(0,25,9)F(0,26,10)F(0,27,11)F(1,24,12)F(1,25,13)F(1,26,14)F(1,27,15)F(2,24,16)F(2,25,17)F(2,26,18)F(2,27,19)F(3,24,20)F(3,25,21)F(3,26,22)F(3,27,23)
#define CVT4 "vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n vcvtph2ps 64(%0),%%zmm2\n vcvtph2ps 96(%0),%%zmm3\n"
#define INS(o,r) "vmovdqu " #o "(%0),%%xmm" #r "\n vinserti128 $1," #o "+1024(%0),%%ymm" #r ",%%ymm" #r "\n vcvtph2ps %%ymm" #r ",%%zmm" #r "\n"
#define MSK(o,r) "vmovdqu " #o "(%0),%%ymm" #r "\n vmovdqu16 " #o "+1008(%0),%%ymm" #r "%{%%k1%}\n vcvtph2ps %%ymm" #r ",%%zmm" #r "\n"
#define SH(op,i) op " $" #i ",%%zmm28,%%zmm29,%%zmm30\n"
#define AD "vaddps %%zmm28,%%zmm29,%%zmm31\n"
/* the current tree per position: 6 shufps, 1.5 shuff32x4, 3.75 adds -> 6, 2, 4 */
#define REDNOW SH("vshufps",0x44)SH("vshufps",0xee)SH("vshufps",0x44)SH("vshufps",0xee)SH("vshufps",0x88)SH("vshufps",0xdd)SH("vshuff32x4",0x44)SH("vshuff32x4",0xee) AD AD AD AD
/* pairs: 3 shufps, 0.5 shuff32x4, 1.75 adds -> 3, 1 (every other), 2 */
#define REDPAIR SH("vshufps",0x44)SH("vshufps",0xee)SH("vshufps",0x88) AD AD
int main(){
  long N=20000000;
  __asm__ volatile("movl $0xff00, %%eax\n kmovw %%eax, %%k1" ::: "eax");
  const char *names[]={"16 FMA + 4 cvt","now: 16 FMA + 4 cvt + tree (6 shufps, 2 shuff32x4, 4 add)","pairs: 16 FMA + 4 (xmm ld, vinserti128 m, cvt) + (3 shufps, 2 add)","pairs: 16 FMA + 4 (ymm ld, masked merge ld, cvt) + (3 shufps, 2 add)", "pairs: 16 FMA + 4 (xmm ld, vinserti128 m, cvt), no tree"};
  for(int v=0;v<5;v++) for(int rep=0;rep<2;rep++){
    double t=now();
    for(long i=0;i<N;i++){
      switch(v){
      case 0: asm volatile(CVT4 F16 :: "r"(hb):"memory"); break;
      case 1: asm volatile(CVT4 F16 REDNOW :: "r"(hb):"memory"); break;
      case 2: asm volatile(INS(0,0) INS(16,1) INS(32,2) INS(48,3) F16 REDPAIR :: "r"(hb):"memory"); break;
      case 3: asm volatile(MSK(0,0) MSK(32,1) MSK(64,2) MSK(96,3) F16 REDPAIR :: "r"(hb):"memory"); break;
      case 4: asm volatile(INS(0,0) INS(16,1) INS(32,2) INS(48,3) F16 :: "r"(hb):"memory"); break;
      }
    }
    t=now()-t; printf("%-75s %.2f ns\n", names[v], t/N*1e9);
  }
}
