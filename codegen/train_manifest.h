/* train_manifest.h — what a training step needs besides its program to be
 * run without the model, and its on-disk form training.json (a training
 * bundle, docs/bundle.md "Training bundles"): the optimizer and the
 * hyper-parameters the runtime uses (betas for the bias corrections), the
 * loss, the precision, gradient accumulation, the data inputs, and the
 * parameters with the place of their initial values in params.bin.
 *
 * The writer (codegen/bundle.c), the loader (runtime/bundle_load.c) and
 * the build (driver/train_bundle.h, which fills one from a training build)
 * share it, as program_json.h is shared; it names nothing of how the step
 * was made (no passes/ type), so the runtime may read it.
 *
 * Reading treats the text as untrusted (strict JSON, duplicate keys
 * refused, every field's type and range checked) and checks it against
 * the program: each parameter is an input of the program updated by an
 * output "new:NAME", with the manifest's dtype and shape, its bytes inside
 * params.bin at an aligned offset, listed once; the data inputs are
 * exactly the program's (inputs that are neither state nor "train:"
 * scalars), in order, with their dtypes and shapes; fp16 programs, and only
 * they, have the loss-scale input; grad_accum > 1, and only then, comes
 * with "accum:" inputs.
 *
 * Ownership: a manifest is one sc_malloc'd block with its params array,
 * freed by sc_train_manifest_destroy. params[k].data is borrowed (the
 * writer's: the model's initial values; the reader's: params.bin, which
 * must outlive the manifest). The reader's messages leave naming the file
 * to the caller (the loader says "training.json: ..."). Errors: SC_ERR_PARSE (malformed JSON or a
 * missing field), SC_ERR_INVALID (well-formed but out of range or not the
 * program's), SC_ERR_NOMEM. */
#ifndef SC_CODEGEN_TRAIN_MANIFEST_H
#define SC_CODEGEN_TRAIN_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codegen/program.h"

enum { SC_TRAIN_MANIFEST_VERSION = 1 }; /* training.json "version" */

typedef struct sc_train_manifest_param {
  const char *name;   /* the program input's name (borrowed from the program) */
  int32_t buffer;     /* its buffer id */
  int64_t offset;     /* in params.bin (sc_train_manifest_layout) */
  const void *data;   /* its initial values: the buffer's bytes (borrowed) */
  /* rank > 0: the parameter's own shape where the step stores it as its
   * flat view (ZeRO-3, passes/partition/flat.c): the global input is
   * [S, m_pad/S], P's elements row-major padded with zeros (data so too);
   * checkpoints and initialisers map it back. 0: the input's shape. */
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  /* split_parts > 1: P is split over other axes (tensor parallelism) on
   * dim split_dim into split_parts pieces, split_stride blocks (the fused
   * QKV's; 1: none): the input is [S, m_pad/S, split_parts], each piece's
   * elements row-major per block (sc_train_flat_copy). 0 or 1: one piece. */
  int32_t split_dim;
  int64_t split_parts, split_stride;
  /* vocab > 0: a vocabulary-padded parameter "W.vocab_padded" (passes/
   * partition/vocab_pad.c): the model's W has `vocab` on dim vocab_dim,
   * the parameter more, zeros that stay zero; checkpoints, the state read
   * back and initialisers speak of W (sc_train_vocab_model_name). */
  int32_t vocab_dim;
  int64_t vocab;
} sc_train_manifest_param;

typedef struct sc_train_manifest {
  char optimizer[8];       /* "sgd" or "adamw" */
  double momentum, weight_decay, beta1, beta2, eps;
  bool nesterov;
  double clip_grad_norm;   /* 0: none */
  char loss[16];           /* "cross-entropy", "mse" or "output" */
  char logits[512];        /* the output the loss reads; "" for the only one */
  int64_t ignore_index;    /* cross-entropy */
  int64_t classes;         /* cross-entropy: the logits' last dim; else 0 */
  char precision[8];       /* "fp32", "bf16", "fp16" (dynamic loss scaling)
                              or "fp8" (passes/fp8.h) */
  int32_t grad_accum;      /* microbatches per optimizer step, >= 1 */
  int32_t n_params;
  sc_train_manifest_param *params; /* in the same block */
} sc_train_manifest;

/* The suffix of a vocabulary-padded parameter's name. */
#define SC_TRAIN_VOCAB_PADDED ".vocab_padded"
/* The model's name of state `name` when it is a vocabulary-padded
 * parameter of m ("W.vocab_padded") or its optimizer state
 * ("W.vocab_padded.exp_avg"...): written into out ("W", "W.exp_avg"),
 * *param set to the parameter; else false. */
bool sc_train_vocab_model_name(const sc_train_manifest *m, const char *name, char *out,
                               size_t cap, const sc_train_manifest_param **param);
/* The step's name of model tensor `name` ("W", "W.exp_avg"...) when it is
 * a vocabulary-padded parameter's: written into out, *param set; else
 * false. */
bool sc_train_vocab_step_name(const sc_train_manifest *m, const char *name, char *out,
                              size_t cap, const sc_train_manifest_param **param);

/* A manifest with room for n_params parameters (zeroed; n_params set). */
sc_train_manifest *sc_train_manifest_create(int32_t n_params);
/* A copy of m (the same borrowed names and data), or NULL. */
sc_train_manifest *sc_train_manifest_copy(const sc_train_manifest *m);
void sc_train_manifest_destroy(sc_train_manifest *m); /* NULL is fine */

/* A tensor of shape (rank, dims) and its flat view (passes/partition/flat.c):
 * split on dim d (d < 0: none) into T pieces of s stride blocks each, the
 * view [m_pad, T] holds per block b, per piece t, the piece's elements
 * row-major, element (j, t) at j·T + t, the blocks one after the other
 * (m_pad >= numel/T, its padding left as it is). to_flat: `from` is the
 * tensor, `to` its flat view; else `from` is the flat view, `to` the
 * tensor. */
void sc_train_flat_copy(int32_t rank, const int64_t *dims, int32_t d, int64_t T, int64_t s,
                        size_t esz, const void *from, void *to, bool to_flat);

/* Whether input buffer b of p is training state: an output "new:NAME". */
bool sc_program_input_is_state(const sc_program *p, int32_t b);
/* Whether state input `name` is optimizer state ("P.momentum_buffer",
 * "P.exp_avg", "P.exp_avg_sq": passes/train.h; FP8 scaling state
 * "T.fp8_amax_history", "T.fp8_scale": passes/fp8.h), not a parameter:
 * zeros at the start, checkpointed with the optimizer. */
bool sc_train_is_optimizer_state(const char *name);

/* Points every parameter of m at p's state input of its name (a
 * partitioned step's manifest, whose buffers are its pieces', rebased onto
 * sc_dist_program_global_view). SC_ERR_INVALID naming a parameter p has not
 * as state. */
sc_status sc_train_manifest_rebase(sc_train_manifest *m, const sc_program *p, sc_diag *d);
/* Places every parameter in params.bin: offsets in order, each
 * SC_BUNDLE_WEIGHT_ALIGN aligned. Returns the file's size, or -1 on
 * overflow. */
int64_t sc_train_manifest_layout(sc_train_manifest *m, const sc_program *p);
/* training.json of m (after sc_train_manifest_layout), 2-space indented. */
sc_status sc_train_manifest_write_json(const sc_train_manifest *m, const sc_program *p,
                                       char **text, sc_diag *d);
/* Parses and checks training.json against p and params.bin (params,
 * params_bytes). */
sc_status sc_train_manifest_read_json(const char *text, size_t len, const sc_program *p,
                                      const void *params, int64_t params_bytes,
                                      sc_train_manifest **out, sc_diag *d);

#endif
