/* cuda_gemm.h — matrix products on the CUDA device.
 *
 * One interface, two engines, chosen by the driver that is loaded:
 *
 *   cublaslt  on a GPU: cuBLASLt (libcublasLt.so.13, opened with dlopen),
 *             f32 or bf16 operands with f32 compute (f32 operands as TF32
 *             where allowed); per GEMM a matmul descriptor, its
 *             layouts and the heuristic's best algorithm, chosen once when
 *             the GEMM is added (at bind: the cache per shape is the GEMM's
 *             own entry); the workspace is the arena's (the memory plan
 *             reserves SC_GEMM_WORKSPACE_BYTES for a program compiled for
 *             CUDA: sc_gpu_gemm_set_workspace), else 32 MiB of its own,
 *             allocated with the first GEMM.
 *             Row-major C = op(A) op(B) is computed as the column-major
 *             Cᵀ = op(B)ᵀ op(A)ᵀ. A bias over the columns is the BIAS
 *             epilogue; a full [m, n] bias is the C operand with beta 1.
 *             An activation the step's epilogue kernel computes
 *             (sc_gemm.act) is the RELU or GELU epilogue (cuBLASLt's GELU
 *             is the tanh form), written to act_out; where C is read
 *             later too (sc_gemm.act_aux) the GELU_AUX epilogue, which
 *             also writes the GELU's input, C, as its aux output; a GELU's
 *             derivative times the product (DGELU_TANH) the DGELU
 *             epilogue, reading act_in as its aux input. A bias
 *             gradient the epilogue kernel computes (sc_gemm.bgrad: the
 *             sums over k of our B, or of our A) is the BGRADA (BGRADB)
 *             epilogue, written to the bias pointer.
 *   host      on the emulated GPU: sc_host_gemm_f32 (oneDNN, the CPU
 *             device's tiles; sc_host_gemm_bf16 for bf16, with a scratch
 *             the engine keeps for its largest GEMM) run as a host function
 *             on the stream, on the device memory that is host memory
 *             there; a fused activation is applied after it, in f32
 *             (from C into act_out when C is kept); a fused bias
 *             gradient is summed from the operand after it, in f32.
 *
 * A GEMM whose operands are FP8 values (sc_gpu_gemm_add_fp8) is one
 * cuBLASLt FP8 matmul on either: on the emulated GPU the emulated
 * cuBLASLt (runtime/cublaslt_emu.c, the same calls and checks).
 *
 * sc_gpu_gemm_add fixes a GEMM's operands (device addresses, stable for
 * the session, which is what lets CUDA graphs replay it) and returns its
 * id; sc_gpu_gemm_enqueue queues it on a stream. Errors: SC_ERR_UNSUPPORTED
 * when cuBLASLt cannot be loaded or has no algorithm for a shape, SC_ERR_IO
 * for a failing cuBLASLt call (its status in the message). */
#ifndef SC_RUNTIME_CUDA_GEMM_H
#define SC_RUNTIME_CUDA_GEMM_H

#include "codegen/program.h"
#include "runtime/cuda_driver.h"

typedef struct sc_gpu_gemm sc_gpu_gemm;

sc_status sc_gpu_gemm_create(const sc_cu *cu, sc_gpu_gemm **out, sc_diag *diag);
void sc_gpu_gemm_destroy(sc_gpu_gemm *e);
/* The workspace cuBLASLt may use (device memory of at least 1 MiB that
 * outlives the engine), before the first sc_gpu_gemm_add; without one the
 * engine allocates its own. */
void sc_gpu_gemm_set_workspace(sc_gpu_gemm *e, CUdeviceptr ws, size_t bytes);
/* Whether the engine allocated a workspace of its own. */
bool sc_gpu_gemm_own_workspace(const sc_gpu_gemm *e);
/* Whether f32 products added from now on may take their operands as TF32
 * (10 mantissa bits, f32 sums): on a GPU cuBLASLt's compute type
 * CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores) instead of CUBLAS_COMPUTE_32F;
 * on the emulated GPU the host engine rounds A and B to TF32
 * (sc_f32_to_tf32) and sums in f32. An engine starts without (bf16 and FP8
 * products are not affected); the CUDA device allows it unless
 * sc_device_opts.no_tf32 (--no-allow-tf32). */
void sc_gpu_gemm_allow_tf32(sc_gpu_gemm *e, bool allow);
/* How many of the engine's products take TF32 operands. */
int32_t sc_gpu_gemm_n_tf32(const sc_gpu_gemm *e);
/* "cublaslt" or "host" */
const char *sc_gpu_gemm_engine(const sc_gpu_gemm *e);
/* g must outlive the engine. t: its operands' dtype, f32 or bf16 (A, B,
 * C and the bias alike). bias may be 0 (none); bias_numel its length.
 * act_out: g->act_out's address, or 0; act_in: g->act_in's (DGELU_TANH),
 * or 0; bgrad: g->bgrad_out's, or 0. *fused: whether the product
 * applies g->act itself (program.h: sc_gemm.act), writing act_out and not
 * C (and C as well with g->act_aux), so that the caller must skip the
 * step's epilogue kernel: when g->act is set (tanh GELU only with
 * act_aux; DGELU_TANH with act_in and no bias), beta is 0 and no full bias
 * is the C operand, and on a GPU when cuBLASLt has an algorithm with the
 * RELU, GELU, GELU_AUX or DGELU epilogue (GELU_AUX and DGELU: C's leading
 * dim and batch stride multiples of 8; else the plain product, and the
 * kernel runs); or whether it computes g->bgrad into bgrad (no activation,
 * no bias, batch 1; on a GPU when cuBLASLt has an algorithm with BGRADA or
 * BGRADB; else the plain product), so that the caller must skip
 * g->bgrad_kernel (the step's own epilogue kernel still runs). */
sc_status sc_gpu_gemm_add(sc_gpu_gemm *e, const sc_gemm *g, sc_dtype t, CUdeviceptr a,
                          CUdeviceptr b, CUdeviceptr bias, int64_t bias_numel, CUdeviceptr c,
                          CUdeviceptr act_out, CUdeviceptr act_in, CUdeviceptr bgrad,
                          int32_t *id, bool *fused, sc_diag *diag);
/* FP8 operands of a GEMM: the FP8 copies (E4M3 or E5M2) of the values g's
 * f32 operands hold widened, in g's layout, and per-tensor scales that
 * multiply them (f32 device scalars; 0: none). */
typedef struct sc_gpu_fp8 {
  sc_dtype type_a, type_b;
  CUdeviceptr a, b;
  CUdeviceptr scale_a, scale_b;
} sc_gpu_fp8;
/* g as one cuBLASLt FP8 matmul (fp32 accumulation, D of type t into c)
 * when its layout meets the FP8 constraints (sc_gemm_fp8_refusal: "TN",
 * multiples of 16, no bias, beta 0, no activation, not both E5M2) on a
 * device of compute capability sm (major·10 + minor) 89 or later; on the
 * emulated GPU the emulated cuBLASLt (cublaslt.h). Else *id is -1 and *why says what failed (as when
 * cuBLASLt has no algorithm): the caller adds the f32 GEMM instead. */
sc_status sc_gpu_gemm_add_fp8(sc_gpu_gemm *e, const sc_gemm *g, sc_dtype t,
                              const sc_gpu_fp8 *f, int sm, CUdeviceptr c, int32_t *id,
                              const char **why, sc_diag *diag);
/* Entry id, an f32 product of sc_gpu_gemm_add, multiplied by *scale_a ·
 * *scale_b (f32 device scalars) after the sum: an FP8 product's scales
 * (sc_gemm.scaled) where its FP8 matmul was refused. The host engine (the
 * emulated GPU) applies them; on a GPU, where cuBLASLt takes scale
 * pointers for FP8 operands only, SC_ERR_UNSUPPORTED. */
sc_status sc_gpu_gemm_set_scales(sc_gpu_gemm *e, int32_t id, CUdeviceptr scale_a,
                                 CUdeviceptr scale_b, sc_diag *diag);
sc_status sc_gpu_gemm_enqueue(sc_gpu_gemm *e, int32_t id, CUstream s, sc_diag *diag);

#endif
