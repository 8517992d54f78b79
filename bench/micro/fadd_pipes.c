/* fadd_pipes.c — whether zmm adds take the FMA pipes' time on this CPU (bench/NOTES.md, CPU log row 60). Each variant
 * runs NF independent FMA chains and NA independent add chains per iteration, in registers; ns per iteration, best
 * of 5. On Zen 4 (session 27): 8 FMAs 2.42-2.77 ns, with 8 adds beside them 2.37-2.50, 12 FMAs 3.53-3.68, with 12
 * adds 3.61-3.69: a 512-bit add runs beside a 512-bit FMA at no cost (Zen 4's FADD pipes are not its FMA pipes).
 *
 *   cc -O2 -mavx512f bench/micro/fadd_pipes.c -o /tmp/fadd_pipes && /tmp/fadd_pipes
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define N 20000000L
/* NF independent FMA chains, NA independent add chains per iteration */
#define KER(NAME,NF,NA) static __attribute__((noinline)) float NAME(long n){ \
  __m512 a[12],x[12],b=_mm512_set1_ps(1.0000001f),c=_mm512_set1_ps(1e-7f); \
  for(int i=0;i<12;i++){a[i]=_mm512_set1_ps(i);x[i]=_mm512_set1_ps(i*.5f);} \
  for(long k=0;k<n;k++){ \
    _Pragma("GCC unroll 12") for(int i=0;i<NF;i++) a[i]=_mm512_fmadd_ps(a[i],b,c); \
    _Pragma("GCC unroll 12") for(int i=0;i<NA;i++) x[i]=_mm512_add_ps(x[i],c); } \
  __m512 s=_mm512_setzero_ps(); for(int i=0;i<12;i++) s=_mm512_add_ps(s,_mm512_add_ps(a[i],x[i])); return _mm512_reduce_add_ps(s);}
KER(f8,8,0) KER(f8a8,8,8) KER(a8,0,8) KER(f4a8,4,8) KER(f8a4,8,4) KER(f12,12,0) KER(f12a12,12,12)
int main(){
  struct {const char*n; float(*f)(long); int nf;} t[]={{"8F",f8,8},{"8F+8A",f8a8,8},{"8A",a8,0},{"4F+8A",f4a8,4},{"8F+4A",f8a4,8},{"12F",f12,12},{"12F+12A",f12a12,12}};
  float s=0;
  for(int m=0;m<7;m++){ double best=1e9; for(int r=0;r<5;r++){double t0=now(); s+=t[m].f(N); double d=now()-t0; if(d<best)best=d;}
    printf("%-8s %.3f ns/iter\n",t[m].n,best/N*1e9);}
  printf("%g\n",s);
}
