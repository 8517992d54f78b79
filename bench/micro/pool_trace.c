/* pool_trace.c — which thread runs which task of a call, and for how long (bench/NOTES.md, "The machine's two
 * states"). LFM2 geometry (64, 32/8) or another (D H G), one f16 cache kept in L3, 2 threads through a
 * caller-supplied parallel-for (fdec_options.parallel_for) that runs the even tasks on the caller and the odd ones on a spinning helper. Prints,
 * for six rounds of 200 calls a second apart: us per call, each side's us per call and CPU, and how late the
 * helper starts.
 *
 *   make && cc -O2 -Iinclude bench/micro/pool_trace.c build/libflashdec.a -lm -pthread -o /tmp/pool_trace
 *   /tmp/pool_trace [L [D H G]]       (add -L/usr/local/cuda/lib64 -lcudart -lstdc++ -ldl when CUDA is compiled in)
 */
#define _GNU_SOURCE
#include "flashdec.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec*1e-3;}
static _Atomic int gen, done; static fdec_task_fn gfn; static void *gtask; static uint32_t gn;
static double t_start[2], t_end[2]; static int cpu_of[2];
/* a decode of several chunks calls the parallel-for twice (its chunks, then the merge): only the chunks' call, the
 * function of the first call, is timed */
static fdec_task_fn chunk_fn;
static void *helper(void *x){(void)x; int seen=0; for(;;){ int g; while((g=atomic_load(&gen))==seen) ; seen=g; if(g<0) return 0;
  int rec=gfn==chunk_fn; double t=now(); if(rec) t_start[1]=t, cpu_of[1]=sched_getcpu(); for(uint32_t i=1;i<gn;i+=2) gfn(gtask,i,gn); if(rec) t_end[1]=now(); atomic_fetch_add(&done,1);} }
static void pfor(void *u, fdec_task_fn fn, void *task, uint32_t n){(void)u; if(!chunk_fn) chunk_fn=fn; int rec=fn==chunk_fn; gfn=fn; gtask=task; gn=n; atomic_store(&done,0); atomic_fetch_add(&gen,1);
  double t=now(); if(rec) t_start[0]=t, cpu_of[0]=sched_getcpu(); for(uint32_t i=0;i<n;i+=2) fn(task,i,n); if(rec) t_end[0]=now(); while(atomic_load(&done)==0) ; }
int main(int argc,char**argv){
  int L=argc>1?atoi(argv[1]):4096, D=argc>4?atoi(argv[2]):64, H=argc>4?atoi(argv[3]):32, G=argc>4?atoi(argv[4]):8;
  fdec_layer ly={0}; ly.head_dim=D; ly.num_q_heads=H; ly.num_kv_heads=G; ly.q_dtype=FDEC_F32; ly.kv_dtype=FDEC_F16; ly.out_dtype=FDEC_F32;
  fdec_options o=fdec_default_options(); o.threads=2; o.parallel_for=pfor; fdec_context*c; fdec_context_create(FDEC_BACKEND_CPU,&o,&c);
  size_t n=(size_t)L*G*D; uint16_t*k=malloc(n*2),*v=malloc(n*2); float*q=malloc(H*D*4),*out=malloc(H*D*4);
  for(size_t i=0;i<n;i++){k[i]=0x3000+(rand()&0xfff); v[i]=0x3000+(rand()&0xfff);} for(int i=0;i<H*D;i++) q[i]=rand()/(float)RAND_MAX;
  pthread_t th; pthread_create(&th,0,helper,0);
  for(int r=0;r<6;r++){ double t0=now(); int calls=200; double a0=0,a1=0,sk=0;
    for(int i=0;i<calls;i++){ fdec_decode(c,&ly,L,q,k,v,out,NULL); a0+=t_end[0]-t_start[0]; a1+=t_end[1]-t_start[1]; sk+=t_start[1]-t_start[0]; }
    double t=(now()-t0)/calls; printf("call %.1f us: caller task %.1f us on cpu %d, helper task %.1f us on cpu %d, helper start lag %.1f us\n", t, a0/calls, cpu_of[0], a1/calls, cpu_of[1], sk/calls); fflush(stdout);
    struct timespec ts={1,0}; nanosleep(&ts,0);}
  atomic_store(&gen,-1000); return 0;
}
