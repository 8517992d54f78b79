/* logits.h — the logits hook: the one place that turns a query head's dot product with a K row into the logit its
 * softmax sees (flashdec.h, "Logit variants"): the scale, then the layer's variants in their order, soft-cap then
 * ALiBi. A sink is no logit of a position but one more state in the merge (state.h's fdec_state_sink), which every
 * backend's final merge takes from here (fdec_logits.sinks).
 *
 * The kernels fold the scale into q (q * scale, then dot products), so they apply the variants to the scaled dot
 * product: the GPU's fdec_logit2 in base 2, the CPU's kern.h logits_hook a vector at a time (the same formulas in
 * base e); the reference calls fdec_logit_ref. All must say the same thing, and the tests hold each to the
 * reference. A new variant is a bit here, its line in the two functions below and in logits_hook. */
#ifndef FDEC_LOGITS_H
#define FDEC_LOGITS_H

#include "hd.h"

#include <math.h>
#include <stdint.h>

/* Variant bits: FDEC_LOGITS_PLAIN (none) is the fast path every kernel tests first. */
enum { FDEC_LOGITS_PLAIN = 0, FDEC_LOGITS_SOFTCAP = 1, FDEC_LOGITS_ALIBI = 2 };

typedef struct {
    float scale;          /* resolved: 0 in the layer became 1/sqrt(head_dim) */
    unsigned variant;     /* FDEC_LOGITS_* bits */
    float softcap;        /* > 0 where FDEC_LOGITS_SOFTCAP */
    const float *alibi;   /* [H] slopes where FDEC_LOGITS_ALIBI (a device pointer on CUDA) */
    const float *sinks;   /* [H] or NULL: the sink logits, merged by fdec_state_sink */
} fdec_logits;

/* tanh(x) for the soft-cap: 1 - 2 / (e^2x + 1), in the form the CPU's vector copy uses (simd.h's vtanh) (its absolute error, a few
 * 1e-8, is what a logit sees). The argument is clamped where tanh is +-1 in f32; a NaN stays NaN. */
FDEC_HD float fdec_softcap_tanh(float x) {
    const float c = x > 9.0f ? 9.0f : x < -9.0f ? -9.0f : x;
    return 1.0f - 2.0f / (expf(2.0f * (x != x ? x : c)) + 1.0f);
}

/* The GPU kernels' form, for a scaled dot product s2 held in base 2 (times log2 e) of query head h at key position t,
 * the query at qpos. An infinite s2 (an inf in q or K) stays infinite, so that the kernel makes the head NaN; an ALiBi
 * bias past f32's range gives -inf, which the kernels weigh 0. */
FDEC_HD float fdec_logit2(const fdec_logits *L, float s2, uint32_t h, uint64_t t, uint64_t qpos) {
    if (L->variant == FDEC_LOGITS_PLAIN) return s2;
    const float log2e = 1.4426950408889634f;
    if (L->variant & FDEC_LOGITS_SOFTCAP && s2 - s2 == 0.0f) {
        const float c2 = L->softcap * log2e; /* c tanh(s / c) in base 2: c2 tanh(s2 / c2) */
        s2 = c2 * fdec_softcap_tanh(s2 / c2);
    }
    if (L->variant & FDEC_LOGITS_ALIBI) s2 -= L->alibi[h] * ((float)(qpos - t) * log2e); /* slope x 0 at qpos */
    return s2;
}

/* The reference's form, in double: scale, then the same variants. */
FDEC_HD double fdec_logit_ref(const fdec_logits *L, double dot, uint32_t h, uint64_t t, uint64_t qpos) {
    double s = dot * (double)L->scale;
    if (L->variant & FDEC_LOGITS_SOFTCAP && isfinite(s)) s = (double)L->softcap * tanh(s / (double)L->softcap);
    if (L->variant & FDEC_LOGITS_ALIBI) s -= (double)L->alibi[h] * (double)(qpos - t);
    return s;
}

/* The sink logit of head h, -inf where there is none. */
FDEC_HD float fdec_logit_sink(const fdec_logits *L, uint32_t h) { return L->sinks ? L->sinks[h] : -INFINITY; }

#endif
