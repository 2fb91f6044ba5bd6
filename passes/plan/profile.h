/* profile.h — a calibration profile: what `shardc calibrate` measured on
 * one device, and how the cost model (cost.h) reads it (docs/planner.md,
 * "5. Calibration").
 *
 * A profile holds a GEMM table (shape, dtype → seconds and FLOP/s of one
 * product through the runtime's GEMM path), the device's streaming memory
 * bandwidth, the fixed cost of one program step (launch overhead), and per
 * communicator the latency α, bandwidth β and per-call overhead fitted by
 * non-negative least squares (sc_profile_fit_comm) to timed collectives.
 *
 * Rates by shape: sc_profile_gemm_rate interpolates the table of the
 * product's dtype and layout in log space, clamped to the measured extents
 * (no extrapolation): trilinear in (log2 m, log2 n, log2 k) on log(rate)
 * when the rows form a full grid (calibrate measures one), else the
 * geometric mean of the rows' rates weighted by 1/d⁴, d the distance
 * between log2(m, n, k) and the row's; an exact shape gives its own rate.
 *
 * sc_profile is a plain value (fixed arrays, no pointers), embedded in
 * sc_cluster. Reading is strict like the cluster file's: an unknown key,
 * a duplicate, a wrong type, a number that is not positive and finite, a
 * count out of range, or a missing key is an error naming the file and the
 * key ("p.json: profile: 'gemm[2].seconds' must be positive and finite").
 * Figures must also lie within bounds no measurement reaches, so that no
 * cost derived from them overflows: times in [1e-12, 1e4] s, GEMM rates in
 * [1, 1e18] FLOP/s, bandwidths in [1, 1e16] bytes/s.
 * Errors: SC_ERR_PARSE, SC_ERR_INVALID, SC_ERR_IO. No state, no locks. */
#ifndef SC_PLAN_PROFILE_H
#define SC_PLAN_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/base.h"

typedef enum sc_cluster_dtype {
  SC_CLUSTER_FP8,
  SC_CLUSTER_BF16,
  SC_CLUSTER_FP16,
  SC_CLUSTER_TF32,
  SC_CLUSTER_FP32,
  SC_CLUSTER_DTYPE_COUNT
} sc_cluster_dtype;
/* "fp8", "bf16", "fp16", "tf32", "fp32": the keys of gpu.peak_flops and
 * the profile's GEMM dtypes. */
extern const char *const sc_cluster_dtype_names[SC_CLUSTER_DTYPE_COUNT];

enum {
  SC_PROFILE_MAX_GEMMS = 192, /* GEMM table rows */
  SC_PROFILE_MAX_COMMS = 4,   /* communicators (local, tcp, mpi, nccl) */
  SC_PROFILE_NAME_MAX = 64,   /* name bytes, NUL included */
  SC_PROFILE_MAX_FIT = 4,     /* unknowns of sc_profile_nnls */
  SC_PROFILE_MAX_ATTENTION = 8, /* attention rows (dtype x direction) */
  SC_PROFILE_MAX_SYNC = 8,    /* sync rows (rank counts) */
  SC_PROFILE_ATTN_BLOCK = 64, /* the CPU attention's query and key rows a
                                 block (runtime/cpu_attention.h
                                 SC_CPU_ATTN_BLOCK; api/calibrate.c checks) */
};
#define SC_PROFILE_MAX_BYTES (1 << 20) /* a profile file's size limit */
/* Bounds beyond any measurement: a figure outside them is refused. */
#define SC_PROFILE_MIN_S 1e-12   /* seconds: below a picosecond nothing is timed */
#define SC_PROFILE_MAX_S 1e4     /* seconds: a calibration step of hours is not one */
#define SC_PROFILE_MAX_RATE 1e18 /* FLOP/s: 500x an H100's fp8 peak (1.98e15) */
#define SC_PROFILE_MAX_BW 1e16   /* bytes/s: 2,000x an H200's HBM (4.8e12) */
#define SC_PROFILE_MAX_STRETCH 1e3 /* a sync row's compute factor: MAX_RANKS'
                                      ranks time-sliced on 64 cores */
#define SC_PROFILE_MAX_CALL_PER_COMPUTE 10 /* a sync row's meeting seconds per
                                              second computed before it */

typedef struct sc_profile_gemm {
  int64_t m, n, k;          /* one product C[m,n] = op(A)[m,k] op(B)[k,n] */
  bool trans_a, trans_b;    /* op(X) = Xᵀ: A stored k x m, B stored n x k (the
                               backward's dX = dY·Wᵀ is nt, dW = Xᵀ·dY tn) */
  sc_cluster_dtype dtype;   /* fp32 or bf16 (any of the enum is accepted) */
  double seconds;           /* one product, median of the timed runs */
  double flops_per_s;       /* 2mnk / seconds */
} sc_profile_gemm;

typedef struct sc_profile_comm {
  char name[16];                /* "local", "tcp", "mpi" or "nccl" (no other) */
  int64_t max_ranks;            /* the largest group measured (>= 2) */
  double latency_s;             /* α: one ring step (hop) */
  double bandwidth_bytes_per_s; /* β: bytes moved per rank per second */
  double overhead_s;            /* fixed cost of one call */
} sc_profile_comm;

/* The CPU's kernel model (docs/planner.md, "Kernels on the CPU"): a kernel
 * step's computing time is sum_i kernel_s[i] * f[i] over its features
 * (codegen/dist_sim.c sc_dist_kernel_features): the row loops a row
 * kernel runs (each phase that varies along its inner extent is a loop
 * of its own over each outer point's row: its set-up and a reduction's
 * horizontal sum), the float operations and transcendental functions
 * (exp, log, tanh, erf, sin, cos, atan, pow, sigmoid) its elements
 * evaluate, and the gathered loads among them (a float load whose index
 * does not step by one element along the innermost loop: a transpose's,
 * which the compiler cannot vectorise), all on one thread;
 * the larger of that (divided by the threads for a kernel the pool splits)
 * and its bytes over the bandwidth is its time. */
enum { SC_PROFILE_KERNEL_ROW, SC_PROFILE_KERNEL_OP, SC_PROFILE_KERNEL_TRANSCENDENTAL,
       SC_PROFILE_KERNEL_GATHER, SC_PROFILE_KERNEL_TERMS };
extern const char *const sc_profile_kernel_keys[SC_PROFILE_KERNEL_TERMS];

/* The CPU's fused attention (runtime/cpu_attention.c, docs/planner.md
 * "Attention on the CPU"): one direction's time on one thread is
 * sum_i s[i] * f[i] over its features (sc_profile_attention_features):
 * the query rows it walks, the scores it computes (whole key blocks up to
 * each query block's causal edge, as the kernel computes them), and the
 * multiply-adds of those scores (d for q·k, dv for p·v); divided by the
 * threads its work units keep busy. Measured per dtype and direction by
 * calibrate (a row per (dtype, grad), distinct). */
enum { SC_PROFILE_ATTN_ROW, SC_PROFILE_ATTN_SCORE, SC_PROFILE_ATTN_MAC, SC_PROFILE_ATTN_TERMS };
extern const char *const sc_profile_attention_keys[SC_PROFILE_ATTN_TERMS];

/* A GPU's fused attention (a "cuda" profile's rows, docs/planner.md
 * "Attention on a GPU"): one direction timed at one shape, heads x sq
 * queries against sq keys, causal, head dim d; flops_per_s is its FLOPs
 * (sc_attention_flops) over the seconds, the rate cost.c gives every
 * fused attention of that dtype and direction on the device. A CPU
 * profile's rows hold s[] and leave these 0, a GPU's the reverse. */
typedef struct sc_profile_attention {
  sc_cluster_dtype dtype; /* the operands' (q, k, v) */
  bool grad;              /* the backward (ATTENTION_GRAD) */
  double s[SC_PROFILE_ATTN_TERMS]; /* cpu: seconds per feature, one thread */
  int64_t heads, sq, d;   /* cuda: the shape timed (b x h heads) */
  double seconds;         /* cuda: one call, median of the timed runs */
  double flops_per_s;     /* cuda: sc_attention_flops / seconds */
} sc_profile_attention;

/* Thread-ranks that compute and meet in a collective, as a training
 * step's do (api/calibrate.c measure_sync, docs/planner.md "Ranks that
 * compute and meet"): R ranks, each running the same compiled program of
 * kernel steps and then an all-reduce of 16 floats a rank, over and
 * over, take longer a round than one rank running the program alone plus
 * the back-to-back collective. stretch: how many times slower each rank
 * computes than alone while all compute (time-slicing when ranks
 * outnumber the cores, times the ratio of the program's CPU time beside
 * the others to alone: the caches' and memory bus's share); the rest of
 * the excess is what each meeting adds (a waiting rank's wake-up, the
 * ranks' drift apart between meetings), call_s + call_per_compute x the
 * (stretched) compute since the rank's previous meeting, that term at
 * most call_max_s: the line through the excess after a short and a
 * longer program, capped by the excess after a long one. One row a rank
 * count, distinct. */
typedef struct sc_profile_sync {
  int64_t ranks;           /* thread-ranks, >= 2 */
  double call_s;           /* seconds added to each collective or hand-off */
  double call_per_compute; /* seconds added to a collective per second
                              computed since the previous one; 0: absent */
  double call_max_s;       /* at most this many by call_per_compute's term
                              (the excess after a long stretch); 0: absent */
  double stretch;          /* compute time factor, >= 1 */
} sc_profile_sync;

typedef struct sc_profile {
  bool present;                         /* false: no profile (all zero) */
  char device[16];                      /* "cpu" or "cuda" */
  char device_name[SC_PROFILE_NAME_MAX]; /* "Intel(R) Xeon(R) ...", "H200" */
  int64_t threads;                      /* the runtime's threads per rank */
  int64_t context_bytes;                /* cuda: the device memory the CUDA
                                           context took (optional; 0 = not
                                           measured) */
  int32_t n_gemms;
  sc_profile_gemm gemms[SC_PROFILE_MAX_GEMMS];
  double memory_bytes_per_s;            /* a streaming kernel's bytes read+written / s */
  double memory_thread_bytes_per_s;     /* the same on one thread: a kernel the
                                           pool does not split (optional; 0 =
                                           not measured: memory_bytes_per_s) */
  double step_overhead_s;               /* one program step's fixed cost */
  bool has_kernel;                      /* kernel_s was measured (optional:
                                           without it, kernels are costed by
                                           their bytes alone) */
  double kernel_s[SC_PROFILE_KERNEL_TERMS]; /* seconds per feature (above) */
  int32_t n_attention;                  /* 0..SC_PROFILE_MAX_ATTENTION (optional:
                                           without a row, attention is costed
                                           as a GEMM of its FLOPs) */
  sc_profile_attention attention[SC_PROFILE_MAX_ATTENTION];
  int32_t n_comms;                      /* 0..SC_PROFILE_MAX_COMMS; [0] is used */
  sc_profile_comm comms[SC_PROFILE_MAX_COMMS];
  int32_t n_sync;                       /* 0..SC_PROFILE_MAX_SYNC (optional:
                                           without a row for a rank count, no
                                           call cost and the core share) */
  sc_profile_sync sync[SC_PROFILE_MAX_SYNC];
  double calibrate_s;                   /* how long the measurement took */
} sc_profile;

/* Reads a profile from text (name labels errors). *out zeroed on error;
 * present set on success. */
sc_status sc_profile_read_json(const char *text, size_t len, const char *name, sc_profile *out,
                               sc_diag *d);
/* _file: a regular file of at most SC_PROFILE_MAX_BYTES. */
sc_status sc_profile_read_json_file(const char *path, sc_profile *out, sc_diag *d);
/* Writes p as JSON (docs/planner.md, "The profile file") to f; the
 * reader reads it back exactly (numbers in %.17g). SC_ERR_IO. */
sc_status sc_profile_write_json(const sc_profile *p, FILE *f, sc_diag *d);

/* The interpolated rate (FLOP/s) of an m x n x k product in dtype t with
 * layout (trans_a, trans_b) (see above): from the rows of that layout, or
 * of the untransposed one when the table has none of it; 0 when the table
 * has no row of t. */
double sc_profile_gemm_rate(const sc_profile *p, sc_cluster_dtype t, bool trans_a, bool trans_b,
                            double m, double n, double k);
/* The highest measured rate of t (0: none). */
double sc_profile_peak_rate(const sc_profile *p, sc_cluster_dtype t);
/* The attention row of (t, grad), or NULL. */
const sc_profile_attention *sc_profile_find_attention(const sc_profile *p, sc_cluster_dtype t,
                                                      bool grad);
/* The features (SC_PROFILE_ATTN_TERMS) of one direction of an attention
 * over b x h heads of sq queries against skv keys, head dims d (q, k) and
 * dv (v, o), as the CPU kernel walks them in blocks of
 * SC_PROFILE_ATTN_BLOCK rows; *units: its work units (one a head and
 * query block), which bound the threads it uses. */
void sc_profile_attention_features(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d,
                                   int64_t dv, bool causal, double *f, double *units);
/* The communicator named name, or NULL. */
const sc_profile_comm *sc_profile_find_comm(const sc_profile *p, const char *name);
/* p's sync row for `ranks` thread-ranks, or NULL. */
const sc_profile_sync *sc_profile_find_sync(const sc_profile *p, int64_t ranks);
/* The threads each of `ranks` thread-ranks gets on `cores` cores:
 * max(1, cores / ranks), as runtime/dist_train.c gives them. A sync row
 * describes ranks of the profile's threads, so it is measured and used
 * only for rank counts this gives the profile's thread count
 * (api/calibrate.c measure_sync, passes/plan/cluster.c). */
int64_t sc_profile_rank_threads(int64_t cores, int64_t ranks);

/* Non-negative least squares: x >= 0 (n_x unknowns, at most
 * SC_PROFILE_MAX_FIT) minimising sum_i (a[i] . x - b[i])^2 over n_rows
 * rows of a (row-major, n_rows x n_x). Exact: every active set is solved
 * (2^n_x of them) and the feasible one of least residual kept. false when
 * no subset has a solvable system (x then all 0). */
bool sc_profile_nnls(const double *a, const double *b, int32_t n_rows, int32_t n_x, double *x);

/* One timed collective for the fit below. */
typedef struct sc_profile_coll_sample {
  double steps;        /* ring steps (latency hops) the cost model counts */
  double bytes_moved;  /* bytes through each rank's link (cost.h) */
  double seconds;      /* measured */
} sc_profile_coll_sample;
/* Fits seconds ≈ overhead + α·steps + bytes_moved/β by NNLS, each row
 * weighted by 1/seconds (relative error: small and large messages count
 * alike). A coefficient the fit sets to 0 becomes the floor
 * SC_PROFILE_FIT_FLOOR_S (overhead, α) or, for 1/β, the largest bandwidth
 * the samples can resolve (the largest bytes_moved over the floor, at
 * most SC_PROFILE_MAX_BW), so every figure stays within the reader's
 * bounds. SC_ERR_INVALID with
 * fewer than 3 samples or a non-positive time. */
#define SC_PROFILE_FIT_FLOOR_S 1e-9
sc_status sc_profile_fit_comm(const sc_profile_coll_sample *s, int32_t n, sc_profile_comm *out,
                              sc_diag *d);

#endif
