/* hd.h — FDEC_HD marks the small functions that the C code and the CUDA device code share (state.h, kv.h,
 * logits.h): static inline in C, __host__ __device__ under nvcc. */
#ifndef FDEC_HD_H
#define FDEC_HD_H

#if defined(__CUDACC__)
#define FDEC_HD __host__ __device__ __forceinline__
#else
#define FDEC_HD static inline
#endif

#endif
