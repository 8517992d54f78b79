/* kconv_move.c — whether the output pass can take over the score pass's f16 conversions at 4 query heads a KV head
 * (bench/NOTES.md, CPU log row 41): per 16 zmm FMAs, the output pass (4 V conversions, 16 FMAs with embedded
 * broadcasts) with and without converting the next score pass's 4 K vectors and storing them as f32, and the score
 * pass with conversions or reading the f32 copy. On Zen 4 (session 16): output pass 4.45 -> 5.57 ns, score pass
 * 5.78 -> 4.64: the conversions cost the same wherever they run.
 *
 *   cc -O2 -mavx512f bench/micro/kconv_move.c -o /tmp/kconv_move && /tmp/kconv_move
 */
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
float pb[64] __attribute__((aligned(64)));
float kb[1024] __attribute__((aligned(64)));
uint16_t hb[256] __attribute__((aligned(64)));
#define FB(v,o,r) "vfmadd231ps " #o "(%1)%{1to16%},%%zmm" #v ",%%zmm" #r "\n"
#define PV16 FB(0,0,8)FB(1,0,9)FB(2,0,10)FB(3,0,11)FB(0,128,12)FB(1,128,13)FB(2,128,14)FB(3,128,15)FB(0,256,16)FB(1,256,17)FB(2,256,18)FB(3,256,19)FB(0,384,20)FB(1,384,21)FB(2,384,22)FB(3,384,23)
#define VCVT "vcvtph2ps (%0),%%zmm0\n vcvtph2ps 32(%0),%%zmm1\n vcvtph2ps 64(%0),%%zmm2\n vcvtph2ps 96(%0),%%zmm3\n"
#define KCVT "vcvtph2ps 128(%0),%%zmm24\n vcvtph2ps 160(%0),%%zmm25\n vcvtph2ps 192(%0),%%zmm26\n vcvtph2ps 224(%0),%%zmm27\n"
#define KST "vmovups %%zmm24,(%2)\n vmovups %%zmm25,64(%2)\n vmovups %%zmm26,128(%2)\n vmovups %%zmm27,192(%2)\n"
#define F(a,r) "vfmadd231ps %%zmm" #a ",%%zmm4,%%zmm" #r "\n"
#define QK16 F(24,8)F(25,9)F(26,10)F(27,11)F(24,12)F(25,13)F(26,14)F(27,15)F(24,16)F(25,17)F(24,18)F(27,19)F(24,20)F(25,21)F(26,22)F(27,23)
#define KLD "vmovups (%2),%%zmm24\n vmovups 64(%2),%%zmm25\n vmovups 128(%2),%%zmm26\n vmovups 192(%2),%%zmm27\n"
#define RED "vshufps $0x44,%%zmm28,%%zmm29,%%zmm30\n vshufps $0xee,%%zmm28,%%zmm29,%%zmm31\n vaddps %%zmm30,%%zmm31,%%zmm30\n vshufps $0x44,%%zmm28,%%zmm29,%%zmm5\n vshufps $0xee,%%zmm28,%%zmm29,%%zmm6\n vaddps %%zmm5,%%zmm6,%%zmm5\n" \
            "vshufps $0x44,%%zmm28,%%zmm29,%%zmm30\n vshufps $0xee,%%zmm28,%%zmm29,%%zmm31\n vaddps %%zmm30,%%zmm31,%%zmm30\n vshuff32x4 $0x44,%%zmm28,%%zmm29,%%zmm5\n vshuff32x4 $0xee,%%zmm28,%%zmm29,%%zmm6\n vaddps %%zmm5,%%zmm6,%%zmm5\n" \
            "vaddps %%zmm5,%%zmm6,%%zmm7\n vaddps %%zmm5,%%zmm6,%%zmm7\n"
int main(){
  long N=20000000;
  const char *names[]={"PV: 4 cvt + 16 bcast FMA","PV + next K: 4 cvt + 4 cvt + 4 st + 16 FMA","QK now: 4 cvt + 16 FMA + 6 shufps 1.5 shuff 3.75 add (approx)","QK from f32: 4 loads + 16 FMA + same reduction"};
  for(int v=0;v<4;v++) for(int rep=0;rep<2;rep++){
    double t=now();
    for(long i=0;i<N;i++){
      switch(v){
      case 0: asm volatile(VCVT PV16 :: "r"(hb),"r"(pb),"r"(kb):"memory"); break;
      case 1: asm volatile(VCVT KCVT PV16 KST :: "r"(hb),"r"(pb),"r"(kb):"memory"); break;
      case 2: asm volatile(KCVT QK16 RED :: "r"(hb),"r"(pb),"r"(kb):"memory"); break;
      case 3: asm volatile(KLD QK16 RED :: "r"(hb),"r"(pb),"r"(kb):"memory"); break;
      }
    }
    t=now()-t; printf("%-70s %.2f ns\n", names[v], t/N*1e9);
  }
}
