/* module.c — what libflashdec_cuda.so keeps of libflashdec's internals: error messages go to the library that loaded
 * the module (the host table), so that fdec_last_error() reports them. */
#include "../internal.h"

#include <stdarg.h>
#include <stdio.h>

static const fdec_cuda_host *host;

fdec_status fdec_set_error(fdec_status st, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (host) host->set_error(st, msg);
    return st;
}

/* The loader checks this before it calls fdec_cuda_module_create: a module of another version is refused with a
 * message. */
__attribute__((visibility("default"))) extern const int fdec_cuda_module_abi;
const int fdec_cuda_module_abi = FDEC_CUDA_MODULE_ABI;

__attribute__((visibility("default"))) fdec_status fdec_cuda_module_create(const fdec_cuda_host *h,
                                                                           const fdec_options *o,
                                                                           const fdec_test_options *t, void **impl,
                                                                           const fdec_backend_ops **ops) {
    if (!h || h->abi != FDEC_CUDA_MODULE_ABI) return FDEC_EUNSUPPORTED; /* a module of another version */
    host = h;
    return fdec_cuda_create(o, t, impl, ops);
}
