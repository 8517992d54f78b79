/* wino_qk.c — the Gemma 4 full layer's score tile (8 heads x 2 positions, head_dim 512, f16 K, 32-row blocks) as
 * kern.h computes it ("standard": q pinned, 16 FMAs a d step) against a mix that puts part of the work on Zen 4's
 * add pipes (fadd_pipes.c): of every 4 chunks of 16 dimensions, chunks c and c + 1 by Winograd's inner product,
 * sum (q_c + K_c+1)(q_c+1 + K_c) - sum q_c q_c+1 - sum K_c K_c+1 (one FMA and two adds for 32 products; the K term
 * once a row, the q term once a call), chunks c + 2 and c + 3 as before (bench/NOTES.md, CPU log row 60). Prints the
 * largest score error of each against a double sum, then us a block and the ratio (medians of 21 alternated runs).
 * Argument: bytes of K cycled through (131072: L2-resident blocks). -DPINHALF keeps one of a pair's two q vectors
 * in a register (the other is the add's memory operand); without it both are.
 *
 *   cc -O2 -march=native bench/micro/wino_qk.c -o /tmp/wino -lm && /tmp/wino 131072 && /tmp/wino 1048576
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <math.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define D 512
#define S 2048
#define NBR 32
static inline void pin(__m512*x){__asm__("":"+v"(*x));}
static inline __m512 cv(const char*p){return _mm512_cvtph_ps(_mm256_loadu_si256((const void*)p));}
static inline float hs(__m512 x){return _mm512_reduce_add_ps(x);}
/* standard: 8 heads x 2 positions, q pinned per d step; sums by horizontal add (same in all variants) */
__attribute__((noinline)) void qkS(const char*k,const float*q,float*s){
  for(int j0=0;j0<NBR;j0+=2){
    __m512 a[16]; _Pragma("GCC unroll 16") for(int i=0;i<16;i++)a[i]=_mm512_setzero_ps();
    const char*r0=k+(size_t)j0*S,*r1=r0+S;
    for(int d=0;d<D;d+=16){
      __m512 qv[8]; _Pragma("GCC unroll 8") for(int h=0;h<8;h++){qv[h]=_mm512_loadu_ps(q+h*D+d);pin(&qv[h]);}
      __m512 k0=cv(r0+d*2),k1=cv(r1+d*2);
      _Pragma("GCC unroll 8") for(int h=0;h<8;h++){a[h*2]=_mm512_fmadd_ps(k0,qv[h],a[h*2]);a[h*2+1]=_mm512_fmadd_ps(k1,qv[h],a[h*2+1]);}
    }
    _Pragma("GCC unroll 16") for(int i=0;i<16;i++)s[(i>>1)*NBR+j0+(i&1)]=hs(a[i]);
  }
}
/* mixed: of every 4 chunks, chunks 0,1 as a Winograd pair ((q_c + K_c+1)(q_c+1 + K_c), q from memory), 2,3 standard.
   qs holds q with each head's pair-chunks as they are; eta per row: sum over W pairs of K_c*K_c+1; xi per head. */
__attribute__((noinline)) void qkW(const char*k,const float*q,float*s,const float*xi){
  for(int j0=0;j0<NBR;j0+=2){
    __m512 a[16]; _Pragma("GCC unroll 16") for(int i=0;i<16;i++)a[i]=_mm512_setzero_ps();
    __m512 e0=_mm512_setzero_ps(),e1=_mm512_setzero_ps();
    const char*r0=k+(size_t)j0*S,*r1=r0+S;
    for(int d=0;d<D;d+=64){
      { __m512 k0a=cv(r0+d*2),k0b=cv(r0+d*2+32),k1a=cv(r1+d*2),k1b=cv(r1+d*2+32);
        e0=_mm512_fmadd_ps(k0a,k0b,e0); e1=_mm512_fmadd_ps(k1a,k1b,e1);
        _Pragma("GCC unroll 8") for(int h=0;h<8;h++){
          const float*qh=q+h*D+d;
#ifdef PINHALF
          __m512 qa=_mm512_loadu_ps(qh); pin(&qa);
#else
          __m512 qa=_mm512_loadu_ps(qh);
#endif
          a[h*2]  =_mm512_fmadd_ps(_mm512_add_ps(k0b,qa),_mm512_add_ps(k0a,_mm512_loadu_ps(qh+16)),a[h*2]);
          a[h*2+1]=_mm512_fmadd_ps(_mm512_add_ps(k1b,qa),_mm512_add_ps(k1a,_mm512_loadu_ps(qh+16)),a[h*2+1]);
        } }
      _Pragma("GCC unroll 2") for(int dd=d+32;dd<d+64;dd+=16){
        __m512 qv[8]; _Pragma("GCC unroll 8") for(int h=0;h<8;h++){qv[h]=_mm512_loadu_ps(q+h*D+dd);pin(&qv[h]);}
        __m512 k0=cv(r0+dd*2),k1=cv(r1+dd*2);
        _Pragma("GCC unroll 8") for(int h=0;h<8;h++){a[h*2]=_mm512_fmadd_ps(k0,qv[h],a[h*2]);a[h*2+1]=_mm512_fmadd_ps(k1,qv[h],a[h*2+1]);}
      }
    }
    float E0=hs(e0),E1=hs(e1);
    _Pragma("GCC unroll 16") for(int i=0;i<16;i++)s[(i>>1)*NBR+j0+(i&1)]=hs(a[i])-xi[i>>1]-((i&1)?E1:E0);
  }
}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t span=argc>1?atol(argv[1]):32768*4; int nblk=span/(S*NBR); if(nblk<1)nblk=1;
  char*k=aligned_alloc(64,(size_t)S*NBR*nblk); for(size_t i=0;i<(size_t)S*NBR*nblk;i+=2)*(uint16_t*)(k+i)=_cvtss_sh((rand()/(float)RAND_MAX)*2-1,0);
  static float q[8*D],s1[8*NBR],s2[8*NBR],xi[8];
  for(int i=0;i<8*D;i++)q[i]=(rand()/(float)RAND_MAX*2-1)*0.05f;
  for(int h=0;h<8;h++){double x=0;for(int d=0;d<D;d+=64)for(int l=0;l<16;l++)x+=(double)q[h*D+d+l]*q[h*D+d+16+l];xi[h]=x;}
  /* accuracy against double */
  qkS(k,q,s1);qkW(k,q,s2,xi); double es=0,ew=0;
  for(int h=0;h<8;h++)for(int j=0;j<NBR;j++){double r=0;for(int d=0;d<D;d++)r+=(double)q[h*D+d]*_cvtsh_ss(*(uint16_t*)(k+(size_t)j*S+d*2));
    double a=fabs(s1[h*NBR+j]-r),b=fabs(s2[h*NBR+j]-r); if(a>es)es=a; if(b>ew)ew=b;}
  printf("max score error: standard %.3g, mixed %.3g\n",es,ew);
  long it=20000; double tm[2][21];
  for(int r=0;r<21;r++){double t=now();for(long i=0;i<it;i++)qkS(k+(i%nblk)*S*NBR,q,s1);tm[0][r]=now()-t;
    t=now();for(long i=0;i<it;i++)qkW(k+(i%nblk)*S*NBR,q,s2,xi);tm[1][r]=now()-t;}
  for(int m=0;m<2;m++)qsort(tm[m],21,sizeof(double),cmpd);
  printf("standard %.1f us per 32-row block, mixed %.1f us: mixed/standard %.3f\n",tm[0][10]/it*1e6,tm[1][10]/it*1e6,tm[1][10]/tm[0][10]);
}
