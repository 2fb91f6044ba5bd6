/* cuda_emu.h — the emulated GPU: the generated CUDA C run on the CPU.
 *
 * There is no GPU on the machines that build and test shardc, and nothing
 * installable runs CUDA 13 PTX on a CPU (../shared/GPU.md). But shardc
 * writes the kernels' source itself, so the same translation unit
 * (codegen/cuda/cuda.h) is compiled a second time, by the host C++
 * compiler with SC_CUDA_EMU defined: its prelude then maps CUDA's
 * built-ins onto this emulator, and each kernel NAME gets an exported
 * trampoline NAME__emu(void **args) taking the driver's kernelParams.
 *
 * sc_cuda_emu_open writes the unit into a private temporary directory,
 * compiles it there ($CXX, else c++; -std=c++17 -O1 -fPIC -shared; no
 * shell: argv only, the compiler's messages kept for the error), loads the
 * shared object (dlopen) and binds the emulator's API to it (sc_emu_bind).
 * The directory is removed at once; the object stays mapped until
 * sc_cuda_emu_close of its last user: units are kept per process by the
 * SHA-256 of their source, so ranks (threads) running the same stage
 * program compile it once (each emulator still has its own fibers).
 *
 * sc_cuda_emu_launch runs a kernel over a grid: blocks one after another
 * on the calling thread. A thread-per-point kernel (sc_cuda_launch.mode)
 * uses no barrier, so its threads run as a plain loop. A block-per-point
 * kernel (block reductions: __syncthreads, __shfl_down_sync) runs its
 * threads as fibers (ucontext), round by round: a round resumes every live
 * thread once, and it runs until its next barrier or its end, so no thread
 * passes barrier k before every thread has reached it. A shuffle writes the
 * lane's value into the block's exchange area, meets the block at a
 * barrier, reads its partner's, and meets it again. __shared__ storage is
 * per OS thread: the block's fibers all run on it, and one block at a time;
 * dynamic shared memory (l->shared_bytes, at most 227 KiB) is one buffer
 * of the emulator's, handed to the block's threads (not cleared between
 * blocks, as on a GPU).
 * Fiber switches are annotated for AddressSanitizer.
 *
 * What the emulation checks and what it cannot: the kernels' arithmetic,
 * indexing (host code: ASan and UBSan see it), launch geometry, barriers and
 * shuffles as the emitter uses them (uniform control flow over the block).
 * It knows nothing of a real GPU's timing, memory model between blocks,
 * warp divergence or PTX-level behaviour: that is for tests/gpu.
 *
 * Errors: SC_ERR_UNSUPPORTED (no C++ compiler, or the unit does not
 * compile: the compiler's first lines in the message), SC_ERR_IO
 * (temporary files, dlopen), SC_ERR_INVALID (a kernel the object lacks, a
 * barrier in a thread-per-point kernel), SC_ERR_NOMEM. One emulator may be
 * used by one thread at a time; distinct emulators run in parallel. */
#ifndef SC_RUNTIME_CUDA_EMU_H
#define SC_RUNTIME_CUDA_EMU_H

#include "codegen/cuda/cuda.h"
#include "ir/base.h"

typedef struct sc_cuda_emu sc_cuda_emu;

sc_status sc_cuda_emu_open(const char *cuda_src, sc_cuda_emu **out, sc_diag *d);
/* Kernel `name` over l->grid blocks of l->block threads (in l->mode);
 * args: a pointer to each argument, as cuLaunchKernel's kernelParams. */
sc_status sc_cuda_emu_launch(sc_cuda_emu *e, const char *name, const sc_cuda_launch *l,
                             void **args, sc_diag *d);
/* Kernel `name`'s argument count (each 8 bytes), launch mode, and its
 * first *n_ptrs arguments' extents (pairs: written, bytes; 0 bytes:
 * unknown), as the unit exports them (codegen/cuda/cuda.h); false when it
 * has no such kernel. */
bool sc_cuda_emu_kernel_info(const sc_cuda_emu *e, const char *name, int *n_args,
                             sc_cuda_mode *mode, int *n_ptrs, const long long **extents);
void sc_cuda_emu_close(sc_cuda_emu *e);
/* Seconds the host compiler took in sc_cuda_emu_open. */
double sc_cuda_emu_compile_seconds(const sc_cuda_emu *e);

#endif
