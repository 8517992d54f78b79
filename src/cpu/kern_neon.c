/* The CPU kernel for the neon path (AArch64 Advanced SIMD; see kern.h). */
#define FDEC_ISA 3
#include "kern.h"
