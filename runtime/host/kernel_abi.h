/* The C ABI between kiln and JIT-compiled host kernels.
 *
 * A host kernel is an `extern "C"` function `void entry(const kiln_host_ctx* ctx, const void* args)`:
 * `args` points to the family's packed argument struct (copied at launch, like CUDA kernel
 * parameters), `ctx` gives the kernel the thread pool of the executor running it and a scratch
 * buffer of the size the launch asked for (the host analogue of dynamic shared memory). Host
 * kernels do not link against libstdc++; everything they need from kiln goes through this struct.
 *
 * templates/host/prelude.hpp declares the same layout for the kernel side; both sides carry
 * KILN_HOST_ABI_VERSION and a kernel refuses (does nothing and sets ctx->status) a context of
 * another version. Bump the version whenever this struct changes.
 */
#ifndef KILN_RUNTIME_HOST_KERNEL_ABI_H
#define KILN_RUNTIME_HOST_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_HOST_ABI_VERSION 1

/* One chunk [begin, end) of a parallel loop; `arg` is the kernel's closure. */
typedef void (*kiln_host_range_fn)(void* arg, int64_t begin, int64_t end);

typedef struct kiln_host_ctx {
    uint32_t abi_version;  /* KILN_HOST_ABI_VERSION */
    uint32_t num_threads;  /* threads that may run chunks of one parallel_for (>= 1) */
    void* pool;            /* opaque: the executor's thread pool */
    /* Runs fn over [0, n) in chunks of at least `grain` items (grain <= 0: chosen by the pool) and
     * returns when every chunk has run. Chunks may run concurrently on num_threads threads.
     * Nested calls from inside a chunk run inline on the calling thread. */
    void (*parallel_for)(void* pool, int64_t n, int64_t grain, kiln_host_range_fn fn, void* arg);
    /* Set to a non-zero code by a kernel that refuses to run: 1 = wrong ABI version,
     * 2 = scratch buffer too small. */
    int32_t* status;
    /* Scratch memory for this launch (64-byte aligned, contents undefined), scratch_bytes long. */
    void* scratch;
    uint64_t scratch_bytes;
} kiln_host_ctx;

typedef void (*kiln_host_entry)(const kiln_host_ctx* ctx, const void* args);

#ifdef __cplusplus
}
#endif

#endif
