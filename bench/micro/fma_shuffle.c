/* fma_shuffle.c — which shuffles take FP-pipe time beside the score pass's FMAs and f16 conversions on this CPU
 * (bench/NOTES.md, CPU log row 41). Each variant is one asm block of 16 independent zmm FMAs with 4 vcvtph2ps (the
 * score pass at head_dim 64 and 4 heads a KV head: one conversion per 4 FMAs) and the named extra instructions;
 * it prints ns per block, two runs each. On Zen 4 (session 16): 4.55 alone; + 8 vshufps 4.5; + 8 vshuff32x4 5.6;
 * + 4 adds 4.5; + 8 vshufps and 4 adds 5.3-5.5; + 8 vshuff32x4 and 4 adds 6.1; without the conversions 8
 * vshuff32x4 and 4 adds are free (4.65): a lane-crossing shuffle competes with the conversions, an in-lane one
 * does not.
 *
 *   cc -O2 -mavx512f bench/micro/fma_shuffle.c -o /tmp/fma_shuffle && /tmp/fma_shuffle
 */
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
uint16_t hb[256] __attribute__((aligned(64)));
#define F(a,r) "vfmadd231ps %%zmm" #a ",%%zmm1,%%zmm" #r "\n"
#define F16 F(2,8)F(3,9)F(4,10)F(5,11)F(2,12)F(3,13)F(4,14)F(5,15)F(2,16)F(3,17)F(4,18)F(5,19)F(2,20)F(3,21)F(4,22)F(5,23)
#define CVT4 "vcvtph2ps (%0),%%zmm2\n vcvtph2ps 32(%0),%%zmm3\n vcvtph2ps 64(%0),%%zmm4\n vcvtph2ps 96(%0),%%zmm5\n"
#define X8(op) op " $0x44,%%zmm24,%%zmm25,%%zmm26\n" op " $0xee,%%zmm24,%%zmm25,%%zmm27\n" op " $0x44,%%zmm24,%%zmm25,%%zmm28\n" op " $0xee,%%zmm24,%%zmm25,%%zmm29\n" \
               op " $0x44,%%zmm24,%%zmm25,%%zmm30\n" op " $0xee,%%zmm24,%%zmm25,%%zmm31\n" op " $0x44,%%zmm24,%%zmm25,%%zmm6\n" op " $0xee,%%zmm24,%%zmm25,%%zmm7\n"
#define A4 "vaddps %%zmm26,%%zmm27,%%zmm26\n vaddps %%zmm28,%%zmm29,%%zmm28\n vaddps %%zmm30,%%zmm31,%%zmm30\n vaddps %%zmm6,%%zmm7,%%zmm6\n"
int main(){
  long N=20000000;
  const char *names[]={"16 FMA + 4 cvt","+ 8 vshufps + 4 add","+ 8 vshuff32x4 + 4 add","+ 8 vshufps","+ 8 vshuff32x4", "+ 4 add", "16 FMA + 8 vshuff32x4 + 4 add (no cvt)", "16 FMA + 4 cvt + 8 vunpcklps"};
  for(int v=0;v<8;v++) for(int rep=0;rep<2;rep++){
    double t=now();
    for(long i=0;i<N;i++){
      switch(v){
      case 0: asm volatile(CVT4 F16 :: "r"(hb):"memory"); break;
      case 1: asm volatile(CVT4 F16 X8("vshufps") A4 :: "r"(hb):"memory"); break;
      case 2: asm volatile(CVT4 F16 X8("vshuff32x4") A4 :: "r"(hb):"memory"); break;
      case 3: asm volatile(CVT4 F16 X8("vshufps") :: "r"(hb):"memory"); break;
      case 4: asm volatile(CVT4 F16 X8("vshuff32x4") :: "r"(hb):"memory"); break;
      case 5: asm volatile(CVT4 F16 A4 :: "r"(hb):"memory"); break;
      case 6: asm volatile(F16 X8("vshuff32x4") A4 :: "r"(hb):"memory"); break;
      case 7: asm volatile(CVT4 F16 "vunpcklps %%zmm24,%%zmm25,%%zmm26\n vunpckhps %%zmm24,%%zmm25,%%zmm27\n vunpcklps %%zmm24,%%zmm25,%%zmm28\n vunpckhps %%zmm24,%%zmm25,%%zmm29\n vunpcklps %%zmm24,%%zmm25,%%zmm30\n vunpckhps %%zmm24,%%zmm25,%%zmm31\n vunpcklps %%zmm24,%%zmm25,%%zmm6\n vunpckhps %%zmm24,%%zmm25,%%zmm7\n" :: "r"(hb):"memory"); break;
      }
    }
    t=now()-t; printf("%-45s %.2f ns\n", names[v], t/N*1e9);
  }
}
