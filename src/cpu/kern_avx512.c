/* The CPU kernel for the avx512 path (see kern.h); the Makefile gives this file its -m flags. */
#define FDEC_ISA 2
#include "kern.h"
