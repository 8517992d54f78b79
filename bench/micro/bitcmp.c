/* bitcmp.c — two builds of libflashdec given the same random inputs, their outputs and lse compared bit for bit: for a
 * change that should not move a result (bench/NOTES.md, CPU log row 61). 480 cases: 1 and 2 threads x the four
 * cpu_path settings x 60 shapes (the presets' first, then random head_dim, GQA ratio, K/V type, length up to 40k,
 * windows and rings). Exit status 1 when any differs.
 *
 *   cc -O2 -Iinclude bench/micro/bitcmp.c -ldl -o /tmp/bitcmp && /tmp/bitcmp /tmp/a/libflashdec.so /tmp/b/libflashdec.so
 */
#include "flashdec.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
typedef fdec_status (*create_fn)(fdec_backend, const fdec_options *, fdec_context **);
typedef fdec_status (*decode_fn)(fdec_context *, const fdec_layer *, uint32_t, const void *, const void *, const void *, void *, float *);
typedef fdec_options (*defopts_fn)(void);
static uint64_t st=88172645463325252ull; static uint32_t rnd(void){st^=st<<13;st^=st>>7;st^=st<<17;return (uint32_t)st;}
static float rf(void){return (rnd()>>8)/8388608.0f*2-1;}
static uint16_t f2h(float f){ /* crude: via _Float16 */ _Float16 h=(_Float16)f; uint16_t u; memcpy(&u,&h,2); return u;}
int main(int c,char**v){
  void*la=dlopen(v[1],RTLD_NOW|RTLD_LOCAL),*lb=dlopen(v[2],RTLD_NOW|RTLD_LOCAL); if(!la||!lb){printf("dlopen %s\n",dlerror());return 1;}
  create_fn ca=(create_fn)dlsym(la,"fdec_context_create"),cb=(create_fn)dlsym(lb,"fdec_context_create");
  decode_fn da=(decode_fn)dlsym(la,"fdec_decode"),db=(decode_fn)dlsym(lb,"fdec_decode");
  defopts_fn oa=(defopts_fn)dlsym(la,"fdec_default_options");
  int bad=0,n=0;
  for(int th=1;th<=2;th++) for(int path=0;path<=3;path++){
    fdec_options o=oa(); o.threads=th; o.cpu_path=path==0?FDEC_CPU_AUTO:path==1?FDEC_CPU_SCALAR:path==2?FDEC_CPU_AVX2:FDEC_CPU_AVX512;
    fdec_context *xa,*xb; if(ca(FDEC_BACKEND_CPU,&o,&xa)||cb(FDEC_BACKEND_CPU,&o,&xb)){printf("ctx\n");return 1;}
    for(int it=0;it<60;it++){
      static const uint32_t dims[]={512,256,128,64,1,3,17,100,200,511,33};
      fdec_layer L={0}; L.head_dim=dims[rnd()%11]; L.num_kv_heads=1+rnd()%4; L.num_q_heads=L.num_kv_heads*(1+rnd()%8);
      if(it<6){ static const uint32_t pd[][3]={{512,16,2},{128,32,8},{64,32,8},{256,16,8},{512,8,1},{256,8,8}}; L.head_dim=pd[it][0];L.num_q_heads=pd[it][1];L.num_kv_heads=pd[it][2];}
      L.kv_dtype=rnd()%3==0?FDEC_BF16:rnd()%4==0?FDEC_F32:FDEC_F16; L.q_dtype=FDEC_F32; L.out_dtype=FDEC_F32;
      uint32_t len=1+rnd()%5000; if(it%7==0) len=20000+rnd()%20000;
      if(rnd()%3==0){L.window=1+rnd()%2000; if(rnd()%2){L.ring_capacity=L.window+rnd()%100;}}
      uint32_t rows=L.ring_capacity?L.ring_capacity:len; size_t es=L.kv_dtype==FDEC_F32?4:2;
      size_t ne=(size_t)rows*L.num_kv_heads*L.head_dim;
      char*k=malloc(ne*es),*vv=malloc(ne*es); float*q=malloc(4*L.num_q_heads*L.head_dim);
      for(size_t i=0;i<ne;i++){float a=rf()*2,b=rf(); if(es==4){((float*)k)[i]=a;((float*)vv)[i]=b;} else if(L.kv_dtype==FDEC_F16){((uint16_t*)k)[i]=f2h(a);((uint16_t*)vv)[i]=f2h(b);} else {uint32_t u; memcpy(&u,&a,4); ((uint16_t*)k)[i]=u>>16; memcpy(&u,&b,4); ((uint16_t*)vv)[i]=u>>16;}}
      for(uint32_t i=0;i<L.num_q_heads*L.head_dim;i++)q[i]=rf()*(1+rnd()%4);
      size_t no=(size_t)L.num_q_heads*L.head_dim; float*o1=malloc(4*no),*o2=malloc(4*no),l1[64],l2[64];
      memset(o1,0xff,4*no);memset(o2,0xee,4*no);
      fdec_status s1=da(xa,&L,len,q,k,vv,o1,l1),s2=db(xb,&L,len,q,k,vv,o2,l2);
      n++;
      if(s1!=s2||(s1==0&&(memcmp(o1,o2,4*no)||memcmp(l1,l2,4*L.num_q_heads)))){bad++; printf("DIFF th=%d path=%d D=%u H=%u G=%u len=%u win=%u ring=%u kv=%d st=%d/%d\n",th,path,L.head_dim,L.num_q_heads,L.num_kv_heads,len,L.window,L.ring_capacity,L.kv_dtype,s1,s2);}
      free(k);free(vv);free(q);free(o1);free(o2);
    }
  }
  printf("%d cases, %d differ\n",n,bad); return bad!=0;
}
