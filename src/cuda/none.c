/* none.c — the CUDA backend's entry point in a build without CUDA (CUDA=0 or no nvcc). */
#include "../internal.h"

fdec_status fdec_cuda_create(const fdec_options *o, const fdec_test_options *t, void **impl,
                             const fdec_backend_ops **ops) {
    (void)o, (void)t, (void)impl, (void)ops;
    return fdec_set_error(FDEC_EUNSUPPORTED, "the CUDA backend is not compiled into this build of flashdec "
                                             "(rebuild with nvcc on the PATH and CUDA=1)");
}
