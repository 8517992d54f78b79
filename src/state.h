/* state.h — the online-softmax partial state and its merge, the one definition every backend uses.
 *
 * A partial state over a set of positions S for one query head is (m, l, o):
 *     m = max_{t in S} s_t,  l = sum_{t in S} exp(s_t - m),  o = sum_{t in S} exp(s_t - m) * V_t
 * Two states over disjoint sets merge exactly: m = max(m1, m2), l = l1*e1 + l2*e2, o = o1*e1 + o2*e2 with
 * e_i = exp(m_i - m). An empty set is m = -inf, l = 0, o = 0 and merges as the identity. The final output is
 * o / l and lse = m + log(l). The GPU kernels keep m in base 2 inside a block (fdec_state_weight2) and hand
 * natural-log states to the merges.
 *
 * Every merge of states (the CPU's chunks and groups, fdec_merge, the GPU's block tails and chunk merges) takes its
 * weights here. The functions are plain C that also compiles as CUDA device code (FDEC_HD).
 */
#ifndef FDEC_STATE_H
#define FDEC_STATE_H

#include "hd.h"

#include <math.h>

/* Weight of a state with max m_i in a merge whose max is m. An empty state (m_i = -inf) weighs 0, also when
 * every state is empty (which would give exp(-inf - -inf) = NaN). */
FDEC_HD float fdec_state_weight(float m_i, float m) { return m_i == -INFINITY ? 0.0f : expf(m_i - m); }
/* The same in double (the CPU's group totals) and for base-2 maxima (the GPU kernels). */
FDEC_HD double fdec_state_weight_d(double m_i, double m) { return m_i == -INFINITY ? 0.0 : exp(m_i - m); }
FDEC_HD float fdec_state_weight2(float m_i, float m) { return m_i == -INFINITY ? 0.0f : exp2f(m_i - m); }

/* Natural-log sum of exponentials of a final state; -inf for an empty one. */
FDEC_HD float fdec_state_lse(float m, float l) { return l == 0.0f ? -INFINITY : m + logf(l); }

/* The larger of a and b, NaN if either is NaN: a NaN max makes a merge NaN. */
FDEC_HD float fdec_max_nan(float a, float b) { return (b > a || b != b) && a == a ? b : a; }

/* The merge of n states over disjoint position sets: w[i] = fdec_state_weight(m_i, M) with M the largest m_i
 * (NaN if any m_i is NaN), *total = sum_i w[i] * l_i (l_i = 1 when l is NULL: states already normalised, as
 * (out, lse) pairs are). Returns M; the merged lse is fdec_state_lse(M, *total). */
FDEC_HD float fdec_merge_weights(unsigned n, const float *m, unsigned mstride, const float *l, unsigned lstride,
                                 float *w, float *total) {
    float M = -INFINITY, T = 0.0f;
    for (unsigned i = 0; i < n && M == M; i++) M = fdec_max_nan(M, m[(unsigned long)i * mstride]);
    for (unsigned i = 0; i < n; i++) {
        w[i] = fdec_state_weight(m[(unsigned long)i * mstride], M);
        T += l ? w[i] * l[(unsigned long)i * lstride] : w[i];
    }
    *total = T;
    return M;
}

/* Folds a sink logit into a merged state (M, L): the sink is the state m = sink, l = 1, o = 0 (a logit without a
 * value), merged once, at the end. Returns the factor that the merged o (its states' weights) takes; a sink of -inf
 * is no sink (factor 1). A NaN M stays NaN. */
FDEC_HD float fdec_state_sink(float *M, float *L, float sink) {
    if (sink == -INFINITY) return 1.0f;
    const float m = fdec_max_nan(*M, sink), f = fdec_state_weight(*M, m);
    *L = *L * f + fdec_state_weight(sink, m);
    *M = m;
    return f;
}

/* One state's share of a merged o: acc[d] += w * o[d] for d < D (the first state: acc[d] = w * o[d]). */
FDEC_HD void fdec_state_add(float *acc, const float *o, float w, unsigned D, int first) {
    if (first)
        for (unsigned d = 0; d < D; d++) acc[d] = w * o[d];
    else
        for (unsigned d = 0; d < D; d++) acc[d] += w * o[d];
}

#endif
