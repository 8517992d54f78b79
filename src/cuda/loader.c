/* loader.c — the CUDA backend's entry point in libflashdec: the backend itself is a module loaded at run time
 * (libflashdec_cuda.so, built from cuda.cu and the CUDA runtime), so that libflashdec links no CUDA library and
 * works on any machine. The module is looked for beside the object that holds this code (libflashdec.so, or a
 * program linked with libflashdec.a), then on the loader's path (LD_LIBRARY_PATH, the program's RUNPATH, the system's
 * directories). Where it or the CUDA runtime it needs is missing, a CUDA context is FDEC_EUNSUPPORTED with a message
 * that names what is missing. */
#include "../internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MODULE_NAME "libflashdec_cuda.so"

static void *module;
static char load_error[400];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    Dl_info info;
    char path[4096];
    if (dladdr((void *)&fdec_cuda_create, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        const int dir = slash ? (int)(slash - info.dli_fname) : 0;
        if (slash && snprintf(path, sizeof path, "%.*s/%s", dir, info.dli_fname, MODULE_NAME) < (int)sizeof path)
            module = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!module) module = dlopen(MODULE_NAME, RTLD_NOW | RTLD_LOCAL);
    if (!module) snprintf(load_error, sizeof load_error, "%s", dlerror());
}

/* The module's way to say why a call failed: this library's message for the calling thread. */
static void set_error_message(fdec_status st, const char *msg) { fdec_set_error(st, "%s", msg); }

static const fdec_cuda_host host = {FDEC_CUDA_MODULE_ABI, set_error_message};

fdec_status fdec_cuda_create(const fdec_options *o, const fdec_test_options *t, void **impl,
                             const fdec_backend_ops **ops) {
    pthread_once(&load_once, load);
#ifdef FDEC_HAVE_CUDA
#define BUILD_NOTE ""
#else
#define BUILD_NOTE "; this build of flashdec was made without nvcc (CUDA=1 with nvcc on the PATH builds the module)"
#endif
    if (!module)
        return fdec_set_error(FDEC_EUNSUPPORTED, "the CUDA backend is not available: its module " MODULE_NAME
                                                 " could not be loaded (%s)" BUILD_NOTE,
                              load_error);
    const int *abi = (const int *)dlsym(module, "fdec_cuda_module_abi");
    if (!abi || *abi != FDEC_CUDA_MODULE_ABI)
        return fdec_set_error(FDEC_EUNSUPPORTED, "the CUDA backend module " MODULE_NAME " that was found belongs to "
                                                 "another flashdec version (module ABI %d, this library's %d): install "
                                                 "the module built with this library beside it",
                              abi ? *abi : 0, FDEC_CUDA_MODULE_ABI);
    fdec_cuda_module_create_fn create = (fdec_cuda_module_create_fn)dlsym(module, "fdec_cuda_module_create");
    if (!create)
        return fdec_set_error(FDEC_EUNSUPPORTED, "the CUDA backend module " MODULE_NAME " has no entry point: %s",
                              dlerror());
    return create(&host, o, t, impl, ops);
}
