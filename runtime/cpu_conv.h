/* cpu_conv.h — the CPU device's direct convolutions (oneDNN), private to
 * the CPU device (runtime/cpu_device.c).
 *
 * A GEMM step that carries a convolution (sc_gemm.conv, codegen/program.h)
 * is run, when the checks below pass, as oneDNN direct convolutions from
 * its input x, and the steps of its prep kernels (the padded copy and
 * im2col) are skipped. The work is cut into tiles (image x a block of
 * output channels) whose boundaries depend only on the shape, each one
 * single-threaded oneDNN call, so results are the same with 1 or N threads.
 * docs/runtime.md#convolutions. */
#ifndef SHARDC_RUNTIME_CPU_CONV_H
#define SHARDC_RUNTIME_CPU_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/cpu/cpu.h"
#include "codegen/device_memory.h"
#include "codegen/program.h"
#include "device.h"

typedef struct sc_cpu_convs sc_cpu_convs;

/* Holds every oneDNN call made on this thread to this thread (Debian's
 * oneDNN runs on OpenMP; the setting is per thread). */
void sc_cpu_engine_one_thread(void);

/* Decides, for every GEMM step of p that carries a convolution, whether it
 * runs as direct convolutions, and builds their primitives; sets
 * skip_kernel[k] for the prep kernels of those that do. *out is NULL when
 * none does. Errors: out of memory only (a convolution oneDNN declines
 * stays a GEMM). */
sc_status sc_cpu_convs_prepare(const sc_program *p, bool *skip_kernel, sc_cpu_convs **out,
                               sc_diag *diag);
/* After the buffers have addresses (ptrs, per buffer): the memory objects
 * of every tile, and the weights in oneDNN's layout (they are constants). */
sc_status sc_cpu_convs_bind(sc_cpu_convs *cv, void *const *ptrs, sc_diag *diag);
/* Runs GEMM step s if it is one of the direct convolutions (found by its
 * im2col kernel, prep[1]): true; else false and nothing is done. epi and
 * epi_args: the step's epilogue kernel (s->kernel) and its arguments, or
 * NULL; *epi_ran says whether the step ran it too (on each tile's output
 * as the tile ends, when that computes the same: docs/runtime.md). */
bool sc_cpu_convs_run(sc_cpu_convs *cv, const sc_step *s, sc_thread_pool *tp,
                      sc_cpu_kernel_fn epi, void *const *epi_args, bool *epi_ran);
/* Runs KERNEL step s if it completes a max-pool that runs directly
 * (sc_pool_geom: a oneDNN pooling over its input and output, held in
 * nChw8c; docs/runtime.md#max-pools): true; else false and nothing is
 * done (its kernels run as written). */
bool sc_cpu_convs_pool(sc_cpu_convs *cv, const sc_step *s, sc_thread_pool *tp);
/* Whether a oneDNN call of this run failed (its thread's scratchpad could
 * not be allocated, or the library failed): the run's remaining
 * convolutions and max-pools are then skipped, and so should the device's
 * other products be (the run's results are lost). cv may be NULL. */
bool sc_cpu_convs_failed(sc_cpu_convs *cv);
/* At the end of a run: that failure as the run's error, then cleared for
 * the next run: SC_ERR_NOMEM ("out of memory: needed N bytes for a
 * thread's oneDNN scratchpad for the direct convolution of a M x N x K
 * product"), or SC_ERR_UNSUPPORTED with oneDNN's status; SC_OK when none. */
sc_status sc_cpu_convs_end_run(sc_cpu_convs *cv, sc_diag *diag);
/* "direct convolution, oneDNN <implementation>" when GEMM step s runs as
 * one, "direct max-pool, ..." for a KERNEL step that runs a max-pool,
 * "skipped: ..." for the step of another of its kernels, else NULL. */
const char *sc_cpu_convs_note(const sc_cpu_convs *cv, const sc_step *s);
void sc_cpu_convs_destroy(sc_cpu_convs *cv);
/* The direct convolutions' lines of the device's memory (SC_MEM_CONV_*,
 * codegen/device_memory.h) as cv's primitive descriptors size them, for a
 * pool of `threads` threads: the weights in oneDNN's layout (bind), the
 * step scratch and the NCHW shadows (prepare), a scratchpad of the largest
 * primitive's size per thread (bind: sc_cpu_convs_thread_reserve). cv may
 * be NULL (all 0). The other lines of *m are left as they are. */
void sc_cpu_convs_plan_memory(const sc_cpu_convs *cv, int threads, sc_device_memory *m);
/* Those lines as allocated so far (the threads': those reserved). */
void sc_cpu_convs_memory(const sc_cpu_convs *cv, sc_device_memory *m);
/* On a pool thread, at bind: this thread's scratchpad grown to the planned
 * size now and its pages touched (a thread keeps it for the process), so
 * that no run grows it;
 * false when out of memory (or the headroom after it is not free). */
bool sc_cpu_convs_thread_reserve(sc_cpu_convs *cv);

/* Blocked activations (docs/runtime.md#blocked-activations): buffers that
 * only direct convolutions and pointwise kernels touch are held in
 * nChw8c. The address kernel k's param i reads or writes instead of its
 * buffer (an NCHW shadow of a blocked buffer), or NULL; */
void *sc_cpu_convs_param_ptr(const sc_cpu_convs *cv, int32_t k, int32_t i);
/* and the conversions to run before (after false) and after kernel k:
 * blocked buffers into the shadows it reads, the shadows it wrote into
 * their blocked buffers. ptrs: every buffer's address. */
void sc_cpu_convs_kernel_hooks(const sc_cpu_convs *cv, int32_t k, bool after, void *const *ptrs,
                               sc_thread_pool *tp);


#endif
