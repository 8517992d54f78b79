/* logits.h — the logits hook: the one place that turns a query head's dot product with a K row into the logit
 * its softmax sees. First the scale, then the layer's variant. 0.1 has the plain variant only; soft-capping and
 * ALiBi are cases of fdec_logit_variant, and an attention sink is one more state in the merge (state.h), so that a
 * new rule is a line here and a line in the reference, not an edit in each kernel.
 *
 * The kernels fold the scale into q (q * scale, then dot products), so they call fdec_logit_variant on the scaled
 * dot product (the GPU's fdec_logit2 on it in base 2); the reference calls fdec_logit_ref. All three must say the
 * same thing. */
#ifndef FDEC_LOGITS_H
#define FDEC_LOGITS_H

#include "hd.h"

#include <stdint.h>

typedef enum { FDEC_LOGITS_PLAIN = 0 } fdec_logits_variant;

typedef struct {
    float scale;                 /* resolved: 0 in the layer became 1/sqrt(head_dim) */
    fdec_logits_variant variant;
} fdec_logits;

/* The logit of a scaled dot product s of query head h at key position t, for the query at position qpos. */
FDEC_HD float fdec_logit_variant(const fdec_logits *L, float s, uint32_t h, uint64_t t, uint64_t qpos) {
    (void)L, (void)h, (void)t, (void)qpos;
    return s;
}

/* The GPU kernels' form: the same variant for a scaled logit held in base 2 (times log2 e). */
FDEC_HD float fdec_logit2(const fdec_logits *L, float s2, uint32_t h, uint64_t t, uint64_t qpos) {
    (void)L, (void)h, (void)t, (void)qpos;
    return s2;
}

/* The reference's form, in double: scale, then the same variant. */
FDEC_HD double fdec_logit_ref(const fdec_logits *L, double dot, uint32_t h, uint64_t t, uint64_t qpos) {
    (void)h, (void)t, (void)qpos;
    return dot * (double)L->scale;
}

#endif
