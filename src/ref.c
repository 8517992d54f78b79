/* ref.c — the float64 reference: the oracle for the tests, `flashdec verify` and the benchmark's checks.
 * Straight from the definition in flashdec.h, two passes over the scores, no cleverness; it reads the cache through
 * the same address rule (kv.h), type table (dtype.h) and logits hook (logits.h) as the kernels. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

static double elem(const void *base, size_t i, fdec_dtype t) { return (double)fdec_load_elem(base, i, t); }

void fdec_reference(const fdec_problem *p, const void *q, const void *k, const void *v, double *out,
                    double *lse) {
    const uint64_t n = (uint64_t)p->seq_len - p->lo;
    double *s = malloc(n * sizeof *s);
    if (!s) abort(); /* test-only code path: the library's own calls never use the reference */
    for (uint32_t i = 0; i < p->nq; i++) { /* query token i at position qpos, attending [lo, qpos] */
        const uint64_t qpos = fdec_token_pos(p, i), lo = fdec_token_lo(p, i), m = qpos + 1 - lo;
        for (uint32_t h = 0; h < p->H; h++) {
            const size_t row = (size_t)i * p->H + h;
            const uint32_t g = h / p->R;
            const double ks = fdec_kv_scale_at(&p->scales, g, 0), vs = fdec_kv_scale_at(&p->scales, g, 1);
            double mx = -INFINITY;
            for (uint64_t j = 0; j < m; j++) {
                const size_t base = fdec_kv_offset(&p->kv, 0, lo + j, g);
                double acc = 0;
                for (uint32_t d = 0; d < p->D; d++)
                    acc += elem(q, row * p->D + d, p->qt) * elem(k, base + d, p->kvt) * ks;
                s[j] = fdec_logit_ref(&p->logits, acc, h, lo + j, qpos);
                if (s[j] > mx) mx = s[j];
            }
            const double sink = fdec_logit_sink(&p->logits, h); /* a logit in the denominator only (-inf: none) */
            if (sink > mx) mx = sink;
            double sum = sink == -INFINITY ? 0 : exp(sink - mx);
            for (uint64_t j = 0; j < m; j++) sum += (s[j] = exp(s[j] - mx));
            double *o = out + row * p->D;
            for (uint32_t d = 0; d < p->D; d++) o[d] = 0;
            for (uint64_t j = 0; j < m; j++) {
                const size_t base = fdec_kv_offset(&p->kv, 0, lo + j, g);
                for (uint32_t d = 0; d < p->D; d++) o[d] += s[j] * elem(v, base + d, p->kvt) * vs;
            }
            for (uint32_t d = 0; d < p->D; d++) o[d] /= sum;
            if (lse) lse[row] = mx + log(sum);
        }
    }
    free(s);
}
