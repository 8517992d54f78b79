/* plan.c — split-KV geometry and the work list, one rule for every backend.
 *
 * The attended range [lo, hi) is cut into num_chunks chunks of chunk_len positions (the last may be shorter).
 * Each chunk yields one partial state per query head; the states merge by log-sum-exp (state.h), so the
 * result does not depend on the split beyond rounding, and a given split always gives the same bits.
 *
 * The backend says how much parallelism it has (`lanes`), the shortest chunk that is worth its own partial
 * state (`min_chunk`, where fixed costs per chunk stop mattering) and the most chunks its scratch allows.
 *
 * The work of a call is a list of items (sequence, KV heads, positions), each into a partial state of its own
 * (fdec_work_list). A single call is a batch of one sequence. The CPU runs the list as it is; the CUDA grid is the
 * same list laid out densely (KV head z, chunk y). */
#include "internal.h"

/* Chunk starts are kept on multiples of this many positions, so that a chunk's blocks line up with the
 * kernels' position blocks (the CPU kernels work in blocks of 32, see cpu/kern.h). */
#define CHUNK_ALIGN 32u

/* The chunk count before the chunk length is rounded up: min(ceil(n / min_chunk), lanes, max_chunks), at least 1.
 * A call of n' <= n positions takes at most this many chunks, as rounding the length up only lowers the count. */
uint32_t fdec_split_bound(const fdec_problem *p, uint32_t lanes, uint32_t min_chunk, uint32_t max_chunks) {
    const uint64_t n = (uint64_t)p->seq_len - p->lo;
    if (min_chunk < 1) min_chunk = 1;
    if (lanes < 1) lanes = 1;
    if (max_chunks < 1) max_chunks = 1;
    uint64_t nc = (n + min_chunk - 1) / min_chunk;
    if (nc > lanes) nc = lanes;
    if (nc > max_chunks) nc = max_chunks;
    return nc < 1 ? 1 : (uint32_t)nc;
}

fdec_split fdec_make_split(const fdec_problem *p, uint32_t lanes, uint32_t min_chunk, uint32_t max_chunks) {
    fdec_split s;
    s.lo = p->lo;
    s.hi = p->seq_len;
    const uint64_t n = (uint64_t)s.hi - s.lo, nc = fdec_split_bound(p, lanes, min_chunk, max_chunks); /* n >= 1 */
    uint64_t len = (n + nc - 1) / nc;
    if (nc > 1) len = (len + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
    s.chunk_len = (uint32_t)len;
    s.num_chunks = (uint32_t)((n + len - 1) / len);
    return s;
}

uint32_t fdec_work_list(const fdec_split *s, uint32_t seq, uint32_t G, uint32_t runs, uint32_t cut, uint32_t align,
                        uint32_t max_items, fdec_work *w, uint32_t *first) {
    const uint32_t n = s->num_chunks;
    const int cutting = cut > 1 && n > runs && n + (cut - 1) * runs <= max_items;
    uint32_t nc = 0;
    for (uint32_t i = 0; i < runs; i++) {
        const uint32_t u0 = (uint32_t)((uint64_t)i * n / runs), u1 = (uint32_t)((uint64_t)(i + 1) * n / runs);
        if (first) first[i] = nc;
        for (uint32_t u = u0; u < u1; u++) {
            const uint64_t a0 = (uint64_t)s->lo + (uint64_t)u * s->chunk_len, e = a0 + s->chunk_len;
            const uint64_t a1 = e < s->hi ? e : s->hi;
            const uint64_t part = (a1 - a0) / cut / align * align;
            const uint32_t parts = cutting && u + 1 == u1 && part > 0 ? cut : 1;
            for (uint32_t g = 0; g < parts; g++, nc++)
                if (w) {
                    w[nc].seq = seq, w[nc].g0 = 0, w[nc].g1 = G;
                    w[nc].t0 = a0 + g * part;
                    w[nc].t1 = g + 1 < parts ? a0 + (g + 1) * part : a1;
                }
        }
    }
    if (first) first[runs] = nc;
    return nc;
}
