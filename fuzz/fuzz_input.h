/* fuzz_input.h — reading a fuzzer's bytes as numbers, shared by the harnesses. */
#ifndef FDEC_FUZZ_INPUT_H
#define FDEC_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

/* The next `bytes` bytes, big-endian; zeros once the input runs out. */
static uint32_t take(reader *r, unsigned bytes) {
    uint32_t x = 0;
    for (unsigned i = 0; i < bytes; i++) x = x << 8 | (r->n ? (r->n--, *r->p++) : 0);
    return x;
}

#endif
