/* The CPU kernel for the scalar path (see kern.h); the Makefile gives this file its -m flags. */
#define FDEC_ISA 0
#include "kern.h"
