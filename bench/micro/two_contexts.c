/* two_contexts.c — two threads of one process, each with its own 1-thread context and its own f16 cache (kept in L2),
 * calling fdec_decode at the same time, pinned to CPUs 0 and 1 (bench/NOTES.md, CPU log row 54): whether a second
 * core slows the first when they share the process but not a context. Prints each thread's us per call for five
 * rounds of `calls` calls, started together by a barrier; `two_contexts 1` runs thread 0 alone.
 *
 *   cc -O2 -Iinclude bench/micro/two_contexts.c -Lbuild -lflashdec -Wl,-rpath,$PWD/build -lpthread -lm \
 *      -o /tmp/two_contexts && /tmp/two_contexts 2        (the Gemma 4 full geometry, 256 positions a call) */
#define _GNU_SOURCE
#include "flashdec.h"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec*1e-3;}
static uint32_t D=512,H=16,G=2,L=256; static int calls=3000; static pthread_barrier_t bar;
static void *run(void *x){ int id=(int)(intptr_t)x; cpu_set_t s; CPU_ZERO(&s); CPU_SET(id,&s); pthread_setaffinity_np(pthread_self(),sizeof s,&s);
  fdec_layer ly={0}; ly.head_dim=D; ly.num_q_heads=H; ly.num_kv_heads=G; ly.q_dtype=FDEC_F32; ly.kv_dtype=FDEC_F16; ly.out_dtype=FDEC_F32;
  fdec_options o=fdec_default_options(); o.threads=1; fdec_context *c; if(fdec_context_create(FDEC_BACKEND_CPU,&o,&c)) return 0;
  size_t n=(size_t)L*G*D; uint16_t *k=malloc(n*2), *v=malloc(n*2); float *q=malloc(H*D*4), *out=malloc(H*D*4);
  srand(id+1); for(size_t i=0;i<n;i++){k[i]=0x3000+(rand()&0x7ff); v[i]=0x3000+(rand()&0x7ff);} for(uint32_t i=0;i<H*D;i++) q[i]=(rand()%100)*0.01f;
  for(int r=0;r<5;r++){ pthread_barrier_wait(&bar); double t=now(); for(int i=0;i<calls;i++) fdec_decode(c,&ly,L,q,k,v,out,NULL); t=now()-t; printf("thread %d round %d: %.1f us a call\n",id,r,t/calls); }
  return 0; }
int main(int argc,char**argv){ int two=argc>1?atoi(argv[1]):2; pthread_barrier_init(&bar,0,two); pthread_t t[2]; for(int i=0;i<two;i++) pthread_create(&t[i],0,run,(void*)(intptr_t)i); for(int i=0;i<two;i++) pthread_join(t[i],0); }
