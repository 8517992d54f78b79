/* pv_forms.c — the Gemma 4 full layer's output pass (8 heads, head_dim 512, f16 V, 32-row blocks, 2048-byte rows)
 * in three forms against the same count of FMAs alone in registers (bench/NOTES.md, CPU log row 60):
 *   A  kern.h's pv_tile: 8 heads x 2 vectors, each FMA broadcasting its weight from memory ({1to16})
 *   B  two heads a vector (8 dimensions of heads 2k and 2k + 1), 4 head pairs x 4 vectors; the weights as
 *      pre-built pair vectors, V's 8 elements loaded into both halves (vbroadcasti128 + one conversion)
 *   C  A with the weight in a register by vbroadcastss, shared by the 2 FMAs of a head
 * ns per 16 FMAs, medians of 15 rounds. Argument: bytes of V cycled through (32768: L1, 1 MiB: L2).
 *
 *   cc -O2 -march=native bench/micro/pv_forms.c -o /tmp/pv_forms && /tmp/pv_forms 1048576 && /tmp/pv_forms 32768
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define S 2048
#define NBR 32
static inline __m512 fb(const float*p,__m512 v,__m512 a){__m512 r=a;__asm__("vfmadd231ps %1%{1to16%}, %2, %0":"+v"(r):"m"(*p),"v"(v));return r;}
/* A: kern.h's tile, 8 heads x 2 vectors, 16 tiles over 512 dims */
__attribute__((noinline)) void pvA(const char*v,const float*sT,float*o){
  for(int t0=0;t0<16;t0++){
   __m512 a[8][2];
   _Pragma("GCC unroll 8") for(int h=0;h<8;h++)_Pragma("GCC unroll 2") for(int t=0;t<2;t++)a[h][t]=_mm512_loadu_ps(o+h*512+t0*32+t*16);
   for(int j=0;j<NBR;j++){
     const char*r=v+(size_t)j*S+t0*64;
     __m512 v0=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)r)),v1=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)(r+32)));
     _Pragma("GCC unroll 8") for(int h=0;h<8;h++){a[h][0]=fb(sT+h*32+j,v0,a[h][0]);a[h][1]=fb(sT+h*32+j,v1,a[h][1]);}
   }
   _Pragma("GCC unroll 8") for(int h=0;h<8;h++)_Pragma("GCC unroll 2") for(int t=0;t<2;t++)_mm512_storeu_ps(o+h*512+t0*32+t*16,a[h][t]);
  }
}
/* B: head pairs in a vector: pp[j][k] = (p[2k][j] x8, p[2k+1][j] x8); acc[k][t] holds dims t*8.. of heads 2k,2k+1;
   DT=4 vectors of 8 dims, 16 accs; 512/32 = 16 tiles */
__attribute__((noinline)) void pvB(const char*v,const __m512*pp,float*o){
  for(int t0=0;t0<16;t0++){
   __m512 a[4][4];
   _Pragma("GCC unroll 4") for(int k=0;k<4;k++)_Pragma("GCC unroll 4") for(int t=0;t<4;t++)a[k][t]=_mm512_loadu_ps(o+k*1024+t0*64+t*16);
   for(int j=0;j<NBR;j++){
     const char*r=v+(size_t)j*S+t0*64;
     __m512 vv[4];
     _Pragma("GCC unroll 4") for(int t=0;t<4;t++) vv[t]=_mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128((const void*)(r+t*16))));
     _Pragma("GCC unroll 4") for(int k=0;k<4;k++){ __m512 p=pp[j*4+k]; _Pragma("GCC unroll 4") for(int t=0;t<4;t++) a[k][t]=_mm512_fmadd_ps(p,vv[t],a[k][t]);}
   }
   _Pragma("GCC unroll 4") for(int k=0;k<4;k++)_Pragma("GCC unroll 4") for(int t=0;t<4;t++)_mm512_storeu_ps(o+k*1024+t0*64+t*16,a[k][t]);
  }
}
/* C: A with register broadcasts via vbroadcastss (8 per row) */
__attribute__((noinline)) void pvC(const char*v,const float*sT,float*o){
  for(int t0=0;t0<16;t0++){
   __m512 a[8][2];
   _Pragma("GCC unroll 8") for(int h=0;h<8;h++)_Pragma("GCC unroll 2") for(int t=0;t<2;t++)a[h][t]=_mm512_loadu_ps(o+h*512+t0*32+t*16);
   for(int j=0;j<NBR;j++){
     const char*r=v+(size_t)j*S+t0*64;
     __m512 v0=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)r)),v1=_mm512_cvtph_ps(_mm256_loadu_si256((const void*)(r+32)));
     _Pragma("GCC unroll 8") for(int h=0;h<8;h++){__m512 p=_mm512_set1_ps(sT[h*32+j]); a[h][0]=_mm512_fmadd_ps(p,v0,a[h][0]);a[h][1]=_mm512_fmadd_ps(p,v1,a[h][1]);}
   }
   _Pragma("GCC unroll 8") for(int h=0;h<8;h++)_Pragma("GCC unroll 2") for(int t=0;t<2;t++)_mm512_storeu_ps(o+h*512+t0*32+t*16,a[h][t]);
  }
}
/* F: pure FMA reference: same count of FMAs (16 per row x 32 rows x 16 tiles), 16 chains, no loads */
__attribute__((noinline)) void pvF(const char*v,const float*sT,float*o){
  __m512 a[16]; for(int i=0;i<16;i++)a[i]=_mm512_loadu_ps(o+i*16); __m512 b=_mm512_set1_ps(sT[0]),c=_mm512_set1_ps(sT[1]);
  for(int n=0;n<16*NBR;n++){ _Pragma("GCC unroll 16") for(int i=0;i<16;i++) a[i]=_mm512_fmadd_ps(a[i],b,c); }
  for(int i=0;i<16;i++)_mm512_storeu_ps(o+i*16,a[i]);
}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t span=argc>1?atol(argv[1]):1<<20; int nblk=span/(S*NBR); if(nblk<1)nblk=1;
  char*v=aligned_alloc(64,(size_t)S*NBR*nblk); for(size_t i=0;i<(size_t)S*NBR*nblk;i+=2)*(uint16_t*)(v+i)=0x3800|(rand()&0x3ff);
  static float sT[8*32],o[8*512]; static __m512 pp[32*4]; for(int i=0;i<256;i++)sT[i]=0.001f*(i%7);
  for(int j=0;j<32;j++)for(int k=0;k<4;k++){float t[16];for(int l=0;l<16;l++)t[l]=sT[(2*k+l/8)*32+j];pp[j*4+k]=_mm512_loadu_ps(t);}
  long iters=200000; double tm[4][15];
  for(int r=0;r<15;r++){
    double t;
    t=now();for(long i=0;i<iters/10;i++)pvF(v,sT,o);tm[0][r]=now()-t;
    t=now();for(long i=0;i<iters/10;i++)pvA(v+(i%nblk)*S*NBR,sT,o);tm[1][r]=now()-t;
    t=now();for(long i=0;i<iters/10;i++)pvB(v+(i%nblk)*S*NBR,pp,o);tm[2][r]=now()-t;
    t=now();for(long i=0;i<iters/10;i++)pvC(v+(i%nblk)*S*NBR,sT,o);tm[3][r]=now()-t;
  }
  const char*nm[4]={"FMA only","A kern.h","B head pairs","C vbroadcastss"};
  double f=0; for(int m=0;m<4;m++){qsort(tm[m],15,sizeof(double),cmpd); double ns=tm[m][7]/(iters/10)/(16*NBR*16)*1e9*16; if(!m)f=ns; printf("%-16s %.3f ns per 16 FMAs (%.1f%% of FMA)\n",nm[m],ns,100*f/ns);}
  printf("%g\n",o[5]);
}
