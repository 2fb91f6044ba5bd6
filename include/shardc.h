/* shardc.h — the public embedding API of shardc.
 *
 * shardc compiles ONNX models for distributed execution. This header is the
 * part a C program embeds: load a model, bind its symbolic dims, prepare it
 * (the canonical passes: bind-dims, infer-shapes, fold, dce) and read its
 * statistics. Planning, compiling and running join this API in later steps.
 *
 * A short tour:
 *
 *     #include <shardc.h>
 *
 *     sc_model *m = NULL;
 *     sc_model_opts opts = {.no_weights = true};   // shapes only
 *     sc_status st = sc_model_load("gpt2.onnx", &opts, &m);
 *     if (st == SC_OK) st = sc_model_bind_dim(m, "batch", 8);
 *     if (st == SC_OK) st = sc_model_prepare(m);
 *     sc_model_info info;
 *     if (st == SC_OK) st = sc_model_stats(m, &info);
 *     if (st == SC_OK)
 *       printf("%lld params, %.3g FLOPs\n", (long long)info.params, info.flops);
 *     else
 *       fprintf(stderr, "error: %s\n", m ? sc_model_error(m) : sc_status_name(st));
 *     sc_model_free(m);
 *
 * Handles are opaque. Every function returns an sc_status (SC_OK = 0; the
 * codes are in ir/base.h: SC_ERR_IO, SC_ERR_PARSE, SC_ERR_INVALID,
 * SC_ERR_UNSUPPORTED, SC_ERR_LIMIT, SC_ERR_NOMEM, SC_ERR_USAGE). After a
 * failure, sc_model_error gives the message as the command line prints it:
 * "FILE: node 'NAME' (OpType): what is wrong".
 *
 * Ownership: an sc_model owns everything it reads; strings it returns live
 * until sc_model_free. Weights are memory-mapped, not copied.
 * Threading: a model may be used by one thread at a time; distinct models
 * are independent. The library never exits the process. */
#ifndef SHARDC_H
#define SHARDC_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/base.h" /* sc_status, sc_status_name */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sc_model sc_model; /* opaque */

typedef struct sc_model_opts {
  bool no_weights; /* do not open external weight files: shapes only */
  bool quiet;      /* no notes on stderr (e.g. dims bound to 1 by default) */
} sc_model_opts;

typedef struct sc_model_info {
  int64_t nodes;             /* after folding */
  int64_t nodes_before_fold;
  int64_t params;            /* elements of all initializers */
  int64_t param_bytes;
  double flops;              /* forward FLOPs of one execution */
  int64_t largest_activation_bytes;
  int32_t blocks;            /* repeated blocks found (0 if none) */
} sc_model_info;

/* Loads an ONNX model. opts may be NULL (defaults). On failure *out is still
 * set, unless memory ran out, to a model holding only the error: read it
 * with sc_model_error, then sc_model_free it. */
sc_status sc_model_load(const char *path, const sc_model_opts *opts, sc_model **out);
/* Binds symbolic input dim `name` (e.g. "batch") to value > 0. SC_ERR_USAGE
 * when no input has that dim or the model is already prepared. */
sc_status sc_model_bind_dim(sc_model *m, const char *name, int64_t value);
/* Runs the canonical passes; dims left unbound become 1. Once only. */
sc_status sc_model_prepare(sc_model *m);
/* Statistics of a prepared model (SC_ERR_USAGE before sc_model_prepare). */
sc_status sc_model_stats(const sc_model *m, sc_model_info *out);
/* The last error as "FILE: node 'N' (Op): msg", or "" after success. */
const char *sc_model_error(const sc_model *m);
void sc_model_free(sc_model *m); /* NULL is fine */

#ifdef __cplusplus
}
#endif

#endif
