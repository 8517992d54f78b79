/* pass_pv.c — the output pass of the Gemma 4 full layer alone (kern.h's pv_tile: 8 heads x 2 vectors, 2 f16->f32
 * conversions and 16 FMAs with embedded broadcasts a row), over 32-row blocks at two row strides A and B, alternated
 * call for call 41 times: % of two 512-bit FMAs a cycle at 2.66 GHz and the median time ratio B/A (bench/NOTES.md,
 * CPU log row 39). Arguments: stride A, stride B (bytes), bytes of V cycled through (32768: L1; 1 MiB: L2).
 *   cc -O2 -march=native -Iinclude bench/micro/pass_pv.c -o /tmp/pv && /tmp/pv 2048 2112 1048576
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define FDEC_ISA 2
#include "../../src/cpu/simd.h" /* vfma_bcast: kern.h's FMA with the weight broadcast from memory */
__attribute__((noinline)) void tile(const char*v,size_t S,int nb,const float*sT,float*o,int dtiles){
  for(int t0=0;t0<dtiles;t0++){
   __m512 a[8][2];
   _Pragma("GCC unroll 8") for(int h=0;h<8;h++)_Pragma("GCC unroll 2") for(int t=0;t<2;t++)a[h][t]=_mm512_loadu_ps(o+h*512+t0*32+t*16);
   for(int j=0;j<nb;j++){
     const char*r=v+(size_t)j*S+t0*64;
     __m512 v0=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)r)),v1=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)(r+32)));
     _Pragma("GCC unroll 8") for(int h=0;h<8;h++){a[h][0]=vfma_bcast(sT+h*32+j,v0,a[h][0]);a[h][1]=vfma_bcast(sT+h*32+j,v1,a[h][1]);}
   }
   _Pragma("GCC unroll 8") for(int h=0;h<8;h++)_Pragma("GCC unroll 2") for(int t=0;t<2;t++)_mm512_storeu_ps(o+h*512+t0*32+t*16,a[h][t]);
  }
}

static double run1(char*v,size_t S,int nb,int nblk,float*sT,float*o,long iters){double t=now();for(long i=0;i<iters;i++)tile(v+(i%nblk)*S*nb,S,nb,sT,o,16);return now()-t;}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int c,char**av){
  size_t SA=atoi(av[1]),SB=atoi(av[2]); int nb=32; size_t span=atol(av[3]);
  int na=span/(SA*nb), nbk=span/(SB*nb); if(na<1)na=1; if(nbk<1)nbk=1;
  char*va=aligned_alloc(64,SA*nb*na+4096),*vb=aligned_alloc(64,SB*nb*nbk+4096);
  for(size_t i=0;i<SA*nb*na;i+=2)*(uint16_t*)(va+i)=0x3800|(rand()&0x3ff);
  for(size_t i=0;i<SB*nb*nbk;i+=2)*(uint16_t*)(vb+i)=0x3800|(rand()&0x3ff);
  static float sT[8*32],o[8*512]; for(int i=0;i<256;i++)sT[i]=0.001f*(i%7);
  long iters=20000000L/(nb*16*16); double r[41], ta=0,tb=0;
  for(int k=0;k<41;k++){double a=run1(va,SA,nb,na,sT,o,iters),b=run1(vb,SB,nb,nbk,sT,o,iters),a2=run1(va,SA,nb,na,sT,o,iters);r[k]=2*b/(a+a2);ta+=a+a2;tb+=b;}
  qsort(r,41,sizeof r[0],cmpd);
  double fm=(double)iters*nb*16*16; printf("A S=%zu %.1f%%  B S=%zu %.1f%%  median B/A %.3f (q1 %.3f q3 %.3f)\n",SA,100*fm*41*2/2/2.66e9/ta,SB,100*fm*41/2/2.66e9/tb,r[20],r[10],r[30]);
}
