/* pass_qk.c — the score pass of the Gemma 4 full layer (head_dim 512, 8 heads a KV head) alone: tiles of 8 heads x 2
 * positions over 32-row blocks of f16 K at a row stride S, q (8 x 512 f32) in registers a d-step, the 16 sums
 * reduced by kern.h's transposing tree; ns per 16 zmm FMAs (compare bench/micro/fma_mix.c's variant 0, run beside it)
 * and % of two 512-bit FMAs a cycle at 2.66 GHz (bench/NOTES.md, CPU log rows 39 and 57).
 * VAR 1: K read as f32 words (no conversion); VAR 2: no reduction (lane 0 taken); VAR 3: the sums stored from the
 * register (64-bit halves of 128-bit extracts) instead of through a stack array; VAR 4: by masked stores.
 * QK=qkp: tiles of 4 head pairs x 4 positions, a vector holding 8 dimensions of two heads (q re-laid as qp) against one
 * K row's 8 elements in both halves, so 16 accumulators hold 32 scores and the tree has no lane-crossing stage but its
 * last (42 operations for 32 scores instead of 45 for 16). QK=qkq: 2 head quads x 8 positions, 4 dimensions of 4
 * heads a vector, a K row's 4 elements broadcast 4 times (8 conversions per 16 FMAs), an in-lane tree only.
 * Both check their scores against the base tile first.
 *   for V in 0 1 2; do cc -O2 -march=native -Iinclude -DVAR=$V bench/micro/pass_qk.c -o /tmp/qk$V; /tmp/qk$V 2048 1048576; done
 *   cc -O2 -march=native -Iinclude -DQK=qkp bench/micro/pass_qk.c -o /tmp/qkp && /tmp/qkp 2048 1048576
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
#ifndef QK
#define QK qk
#endif
#define ROWS 32
#ifndef VAR
#define VAR 0
#endif
static float qp[4*64*16] __attribute__((aligned(64)));
ALWAYS_INLINE void inlane(const V *a, V *u){ V w[8];
    for (int i = 0; i < 8; i++) w[i] = vadd(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++) u[i] = vadd(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));}
__attribute__((noinline)) void qkp(const char*kb,size_t S,const float*q,float*sT){
  (void)q;
  for(int j0=0;j0<ROWS;j0+=4){
    __m512 acc[16]; for(int i=0;i<16;i++)acc[i]=_mm512_setzero_ps();
    const char*k0=kb+(size_t)j0*S;
    for(int s=0;s<DIM/8;s++){
      __m512 qv[4];
      _Pragma("GCC unroll 4") for(int h=0;h<4;h++){qv[h]=_mm512_load_ps(qp+(h*64+s)*16);vpin(&qv[h]);}
      _Pragma("GCC unroll 4") for(int p=0;p<4;p++){
        __m512 kx=_mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(k0+p*S+s*16))));
        _Pragma("GCC unroll 4") for(int h=0;h<4;h++)acc[h*4+p]=_mm512_fmadd_ps(kx,qv[h],acc[h*4+p]);}
    }
    V u[4]; inlane(acc,u);
    for(int i=0;i<2;i++){ V z=vadd(_mm512_shuffle_f32x4(u[2*i],u[2*i+1],_MM_SHUFFLE(2,0,2,0)),_mm512_shuffle_f32x4(u[2*i],u[2*i+1],_MM_SHUFFLE(3,1,3,1)));
      _mm_storeu_ps(sT+(4*i)*ROWS+j0,_mm512_castps512_ps128(z)); _mm_storeu_ps(sT+(4*i+1)*ROWS+j0,_mm512_extractf32x4_ps(z,1));
      _mm_storeu_ps(sT+(4*i+2)*ROWS+j0,_mm512_extractf32x4_ps(z,2)); _mm_storeu_ps(sT+(4*i+3)*ROWS+j0,_mm512_extractf32x4_ps(z,3)); }
  }
}
static float qq[2*128*16] __attribute__((aligned(64)));
__attribute__((noinline)) void qkq(const char*kb,size_t S,const float*q,float*sT){
  (void)q;
  for(int j0=0;j0<ROWS;j0+=8){
    __m512 acc[16]; for(int i=0;i<16;i++)acc[i]=_mm512_setzero_ps();
    const char*k0=kb+(size_t)j0*S;
    for(int s=0;s<DIM/4;s++){
      __m512 qv[2];
      _Pragma("GCC unroll 2") for(int h=0;h<2;h++){qv[h]=_mm512_load_ps(qq+(h*128+s)*16);vpin(&qv[h]);}
      _Pragma("GCC unroll 8") for(int p=0;p<8;p++){
        __m512 kx=_mm512_cvtph_ps(_mm256_set1_epi64x(*(const long long*)(k0+p*S+s*8)));
        _Pragma("GCC unroll 2") for(int h=0;h<2;h++)acc[h*8+p]=_mm512_fmadd_ps(kx,qv[h],acc[h*8+p]);}
    }
    V u[4]; inlane(acc,u);
    for(int i=0;i<4;i++){ const int hq=i/2, p0=4*(i%2);
      _mm_storeu_ps(sT+(4*hq)*ROWS+j0+p0,_mm512_castps512_ps128(u[i])); _mm_storeu_ps(sT+(4*hq+1)*ROWS+j0+p0,_mm512_extractf32x4_ps(u[i],1));
      _mm_storeu_ps(sT+(4*hq+2)*ROWS+j0+p0,_mm512_extractf32x4_ps(u[i],2)); _mm_storeu_ps(sT+(4*hq+3)*ROWS+j0+p0,_mm512_extractf32x4_ps(u[i],3)); }
  }
}
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
#if VAR==3
    { __m512 r=vreduce_vec(acc);
      for(int l=0;l<4;l++){ __m128 x = l==0? _mm512_castps512_ps128(r) : l==1? _mm512_extractf32x4_ps(r,1) : l==2? _mm512_extractf32x4_ps(r,2) : _mm512_extractf32x4_ps(r,3);
        _mm_storel_pi((__m64*)(sT+(2*l)*ROWS+j0),x); _mm_storeh_pi((__m64*)(sT+(2*l+1)*ROWS+j0),x);}
      continue; }
#elif VAR==4
    { __m512 r=vreduce_vec(acc);
      for(int h=0;h<8;h++) _mm512_mask_storeu_ps(sT+h*ROWS+j0-2*h,(__mmask16)(3u<<(2*h)),r);
      continue; }
#elif VAR==2
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
  static float q[8*DIM],sT[8*ROWS+64]; for(int i=0;i<8*DIM;i++)q[i]=0.001f*(i%7);
  for(int hp=0;hp<4;hp++)for(int s=0;s<64;s++)for(int l=0;l<16;l++)qp[(hp*64+s)*16+l]=q[(2*hp+l/8)*DIM+8*s+l%8];
  for(int hq=0;hq<2;hq++)for(int s=0;s<128;s++)for(int l=0;l<16;l++)qq[(hq*128+s)*16+l]=q[(4*hq+l/4)*DIM+4*s+l%4];
  static float ref[8*ROWS+64]; qk(v,S,q,ref); qkp(v,S,q,sT); qkq(v,S,q,sT+0); {double e=0; for(int i=0;i<8*ROWS;i++){double d=ref[i]-sT[i]; if(d<0)d=-d; if(d>e)e=d;} printf("check max diff %g (ref %g)\n",e,ref[5]);}
  long iters=40000000L/(ROWS*DIM/16*16)*16; double best=1e9;
  for(int r=0;r<7;r++){double t=now();for(long i=0;i<iters;i++)QK(v+(i%nblk)*S*ROWS,S,q,sT);t=now()-t;if(t<best)best=t;}
  double fm=(double)iters*ROWS*DIM/16*8;
  printf("ns/16FMA %.3f VAR %d S=%zu span %zuK: %.1f%% of 2 FMA/cycle @2.66 (%g)\n",best/(fm/16)*1e9,VAR,S,span>>10,100*fm/2/2.66e9/best,sT[3]);
}
