/* dpbf16.c — does AVX512_BF16's vdpbf16ps beat widening bf16 K to f32 and FMAs, for the CPU kernel's Q K^T?
 * One 32-element bf16 row of K against 4 heads of q, independent accumulators (throughput, not latency):
 *   A : widen K to two f32 vectors (shift), 8 FMAs                     (what the kernel does)
 *   B2: 8 vdpbf16ps, q split into 2 bf16 terms (16 significant bits)
 *   B3: 12 vdpbf16ps, q in 3 bf16 terms (f32's 24 bits: needed to stay within the accuracy bound)
 *   gcc -O2 -mavx512f -mavx512bf16 -mavx512bw -mavx512vl bench/micro/dpbf16.c -o dpbf16 && ./dpbf16
 * Result on the Zen 4 dev machine: bench/NOTES.md, CPU log row 13. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <stdint.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
/* one "row" of 32 bf16 K elements against 8 heads: A = widen to f32 + 16 FMA; B2 = 16 vdpbf16ps (q in 2 terms); B3 = 24 */
__attribute__((noinline)) float runA(const uint16_t *k, const float *q, long n){
  __m512 acc[8],acc2[8],acc3[8]; for(int h=0;h<4;h++) acc[h]=acc2[h]=acc3[h]=_mm512_setzero_ps();
  __m512 qa[8], qb[8]; for(int h=0;h<4;h++){qa[h]=_mm512_loadu_ps(q+32*h); qb[h]=_mm512_loadu_ps(q+32*h+16);}
  for(long i=0;i<n;i++){ const uint16_t *r=k+(i&1023)*32;
    __m512i x=_mm512_loadu_si512(r);
    __m512 lo=_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(x)),16));
    __m512 hi=_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(x,1)),16));
    for(int h=0;h<4;h++){acc[h]=_mm512_fmadd_ps(qa[h],lo,acc[h]);acc2[h]=_mm512_fmadd_ps(qb[h],hi,acc2[h]);}
  }
  __m512 s=acc[0]; for(int h=1;h<4;h++) s=_mm512_add_ps(s,_mm512_add_ps(acc[h],_mm512_add_ps(acc2[h],acc3[h]))); return _mm512_reduce_add_ps(s);
}
__attribute__((noinline)) float runB(const uint16_t *k, const float *q, long n, int terms){
  __m512 acc[8],acc2[8],acc3[8]; for(int h=0;h<4;h++) acc[h]=acc2[h]=acc3[h]=_mm512_setzero_ps();
  __m512bh t1[8],t2[8],t3[8]; for(int h=0;h<4;h++){__m512 a=_mm512_loadu_ps(q+32*h), b=_mm512_loadu_ps(q+32*h+16); t1[h]=_mm512_cvtne2ps_pbh(b,a); t2[h]=t1[h]; t3[h]=t1[h];}
  for(long i=0;i<n;i++){ const uint16_t *r=k+(i&1023)*32;
    __m512bh x=(__m512bh)_mm512_loadu_si512(r);
    for(int h=0;h<4;h++){acc[h]=_mm512_dpbf16_ps(acc[h],t1[h],x); acc2[h]=_mm512_dpbf16_ps(acc2[h],t2[h],x); if(terms==3) acc3[h]=_mm512_dpbf16_ps(acc3[h],t3[h],x);}
  }
  __m512 s=acc[0]; for(int h=1;h<4;h++) s=_mm512_add_ps(s,_mm512_add_ps(acc[h],_mm512_add_ps(acc2[h],acc3[h]))); return _mm512_reduce_add_ps(s);
}
int main(){ static uint16_t k[1024*32]; static float q[256]; for(int i=0;i<1024*32;i++)k[i]=0x3f80+(i&7); for(int i=0;i<256;i++)q[i]=1e-3f*i;
  long n=50000000; float s=0; double t;
  for(int rep=0;rep<3;rep++){
  t=now(); s+=runA(k,q,n); double ta=now()-t;
  t=now(); s+=runB(k,q,n,2); double tb=now()-t;
  t=now(); s+=runB(k,q,n,3); double tc=now()-t;
  printf("per 32-element row x 4 heads: convert+FMA %.2f ns, dpbf16 2 terms %.2f ns, 3 terms %.2f ns (%g)\n", ta/n*1e9, tb/n*1e9, tc/n*1e9, s);}
}
