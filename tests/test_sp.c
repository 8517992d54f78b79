/* test_sp.c — libflashdec_nccl's argument checks, which need no GPU: every bad call is refused with
 * FDEC_EINVAL and a message naming the argument, before NCCL or CUDA is touched. (The sharded decode itself
 * is checked on GPUs by `flashdec bench --gpus N`, which compares it with the single-GPU call.)
 *
 *   build/tests/test_sp     (built and run by `make test` where libflashdec_nccl is built)
 */
#include "flashdec_nccl.h"

#include <stdio.h>
#include <string.h>

static int n_pass, n_fail;

static void expect(fdec_status st, fdec_status want, const char *needle, const char *what) {
    const int ok = st == want && strstr(fdec_last_error(), needle) != NULL;
    ok ? n_pass++ : n_fail++;
    if (!ok) printf("FAIL: %s: status %d, message \"%s\" (wanted %d and \"%s\")\n", what, (int)st, fdec_last_error(),
                    (int)want, needle);
}

int main(void) {
    unsigned char id[FDEC_SP_ID_BYTES];
    memset(id, 0, sizeof id);
    fdec_sp *sp = (fdec_sp *)&id; /* must be set to NULL by a failed create */
    fdec_context *cpu = NULL;
    if (fdec_context_create(FDEC_BACKEND_CPU, NULL, &cpu) != FDEC_OK) return printf("no CPU context\n"), 1;
    expect(fdec_sp_create(NULL, NULL, 2, 0, id, &sp), FDEC_EINVAL, "ctx", "create with a NULL context");
    if (sp) n_fail++, printf("FAIL: a failed create left *out set\n");
    expect(fdec_sp_create(cpu, NULL, 2, 0, NULL, &sp), FDEC_EINVAL, "id", "create with a NULL id");
    expect(fdec_sp_create(cpu, NULL, 2, 2, id, &sp), FDEC_EINVAL, "rank (2)", "create with rank == nranks");
    expect(fdec_sp_create(cpu, NULL, 0, 0, id, &sp), FDEC_EINVAL, "nranks (0)", "create with no ranks");
    expect(fdec_sp_create(cpu, NULL, 2, -1, id, &sp), FDEC_EINVAL, "rank (-1)", "create with a negative rank");
    expect(fdec_sp_create(cpu, NULL, 1, 0, id, NULL), FDEC_EINVAL, "out", "create with a NULL out");
    expect(fdec_sp_unique_id(NULL), FDEC_EINVAL, "id", "unique id into NULL");
    fdec_layer L;
    memset(&L, 0, sizeof L);
    L.head_dim = 128, L.num_q_heads = 32, L.num_kv_heads = 8;
    expect(fdec_sp_decode(NULL, &L, 100, 0, 50, id, id, id, id, NULL), FDEC_EINVAL, "sp", "decode with a NULL handle");
    fdec_sp_destroy(NULL); /* a no-op */
    fdec_context_destroy(cpu);
    printf("libflashdec_nccl argument checks: %d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
