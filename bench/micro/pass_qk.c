/* pass_qk.c — the score pass of the Gemma 4 full layer (head_dim 512, 8 heads a KV head) alone: tiles of 8 heads x 2
 * positions over 32-row blocks of f16 K at a row stride S, q (8 x 512 f32) in registers a d-step, the 16 sums
 * reduced by kern.h's transposing tree; % of two 512-bit FMAs a cycle at 2.66 GHz (bench/NOTES.md, CPU log row 39).
 * VAR 1: K read as f32 words (no conversion); VAR 2: no reduction (lane 0 taken).
 *   for V in 0 1 2; do cc -O2 -march=native -Iinclude -DVAR=$V bench/micro/pass_qk.c -o /tmp/qk$V; /tmp/qk$V 2048 1048576; done
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define FDEC_ISA 2
#include "../../src/cpu/simd.h" /* vreduce_all: kern.h's transposing reduction */
#define DIM 512
#define ROWS 32
#ifndef VAR
#define VAR 0
#endif
__attribute__((noinline)) void qk(const char*kb,size_t S,const float*q,float*sT){
  for(int j0=0;j0<ROWS;j0+=2){
    __m512 acc[16]; for(int i=0;i<16;i++)acc[i]=_mm512_setzero_ps();
    const char*k0=kb+(size_t)j0*S,*k1=k0+S;
    _Pragma("GCC unroll 2")
    for(int d=0;d<DIM;d+=16){
      __m512 qv[8];
      _Pragma("GCC unroll 8") for(int h=0;h<8;h++){qv[h]=_mm512_loadu_ps(q+h*DIM+d);vpin(&qv[h]);}
#if VAR==1
      __m512 a=_mm512_loadu_ps((const float*)(k0+d*2)), b=_mm512_loadu_ps((const float*)(k1+d*2)); // no cvt
#else
      __m512 a=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)(k0+d*2))), b=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)(k1+d*2)));
#endif
      _Pragma("GCC unroll 8") for(int h=0;h<8;h++){acc[h*2]=_mm512_fmadd_ps(a,qv[h],acc[h*2]);acc[h*2+1]=_mm512_fmadd_ps(b,qv[h],acc[h*2+1]);}
    }
    float sums[16];
#if VAR==2
    for(int i=0;i<16;i++)sums[i]=acc[i][0];
#else
    vreduce_all(acc,sums);
#endif
    for(int h=0;h<8;h++){sT[h*ROWS+j0]=sums[h*2];sT[h*ROWS+j0+1]=sums[h*2+1];}
  }
}
int main(int c,char**av){
  size_t S=atoi(av[1]); size_t span=atol(av[2]); int nblk=span/(S*ROWS); if(nblk<1)nblk=1;
  char*v=aligned_alloc(64,S*ROWS*nblk+4096); for(size_t i=0;i<S*ROWS*nblk+2048;i+=2)*(uint16_t*)(v+i)=0x3800|(rand()&0x3ff);
  static float q[8*DIM],sT[8*ROWS]; for(int i=0;i<8*DIM;i++)q[i]=0.001f*(i%7);
  long iters=40000000L/(ROWS*DIM/16*16)*16; double best=1e9;
  for(int r=0;r<7;r++){double t=now();for(long i=0;i<iters;i++)qk(v+(i%nblk)*S*ROWS,S,q,sT);t=now()-t;if(t<best)best=t;}
  double fm=(double)iters*ROWS*DIM/16*8;
  printf("VAR %d S=%zu span %zuK: %.1f%% of 2 FMA/cycle @2.66 (%g)\n",VAR,S,span>>10,100*fm/2/2.66e9/best,sT[3]);
}
