/* The CPU kernel for the avx2 path (see kern.h); the Makefile gives this file its -m flags. */
#define FDEC_ISA 1
#include "kern.h"
