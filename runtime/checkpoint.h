/* checkpoint.h — training checkpoints: save the state of a training run to
 * a directory and load it back bit-exactly (layout in docs/checkpoint.md).
 *
 * A checkpoint directory holds three files:
 *   weights.safetensors    the trainable parameters (fp32 master copies) by
 *                          their ONNX initializer names
 *   optimizer.safetensors  optimizer state ("<param>.exp_avg", ...)
 *   manifest.json          format and version, the scalar training state
 *                          (step, data position, schedule position, loss
 *                          scale and its growth tracker, RNG state), the
 *                          optimizer's name and hyperparameters, each
 *                          file's size and SHA-256, each tensor's dtype,
 *                          global shape and shards, and the SHA-256 of the
 *                          manifest itself.
 * That is format version 1: every tensor one shard covering it whole.
 * Version 2 (sc_ckpt_save_shards, a mesh's save) is sharded as PyTorch
 * DCP and Megatron's dist-checkpointing are: each rank that holds a
 * piece's one copy writes it into its own files ("weights-rank<R>.
 * safetensors", "optimizer-rank<R>.safetensors"), and the manifest gives,
 * for every tensor, its global shape and each shard's file, key in it,
 * offsets and shape in the global index space. A load reads any version
 * and assembles each tensor whole, checking that its shards tile it
 * exactly (no gap, no overlap), so a checkpoint saved under one mesh
 * resumes under any other, on one rank, and exports to ONNX.
 *
 * Saving is atomic: the files are written into DIR.tmp-PID-N next to DIR,
 * each fsync'd, the folder fsync'd, then swapped with DIR in one rename
 * (ir/fileio.h) and the parent folder fsync'd. Until that rename DIR is the
 * previous checkpoint, whole; a crash leaves it loadable. A save removes
 * the temporary folders of earlier saves into the same DIR whose process
 * is gone (through openat/unlinkat, never following a symbolic link). An
 * existing DIR is replaced only when it is empty or a checkpoint holding
 * nothing but what a save writes (regular files of its names); anything
 * else is refused, naming the foreign entries, never deleted. Each shard
 * file of version 2 records its writer and the box of each key in its
 * __metadata__. For tests, with
 * SHARDC_TEST_CKPT_FAIL_AFTER=N in the environment a save fails after
 * writing N of its files (as a full disk would).
 *
 * Loading verifies before anything is used: the manifest's own checksum,
 * every field's type and range (integers in [0, 2^53]), that no member is
 * a symbolic link, each file's size and SHA-256, each shard file's own
 * record of its writer and boxes against the manifest (a file without
 * one, from an older save, loads on its hashes alone), each
 * safetensors file (runtime/safetensors.h), and that the tensors in the
 * files are exactly those the manifest lists, with its dtypes and shapes.
 * A problem is an error naming the file (and tensor): SC_ERR_IO (not a
 * checkpoint, unreadable file), SC_ERR_PARSE (malformed), SC_ERR_INVALID
 * (checksum or size mismatch, inconsistent), SC_ERR_UNSUPPORTED (a newer
 * format version, shards that do not cover the tensor), SC_ERR_LIMIT,
 * SC_ERR_NOMEM.
 *
 * Ownership: sc_ckpt_save borrows its arguments. A loaded sc_ckpt owns
 * every tensor's data, name and the state's strings until
 * sc_ckpt_destroy. Thread safety: distinct checkpoints may be saved or
 * loaded from different threads; one sc_ckpt is read-only once loaded. */
#ifndef SC_RUNTIME_CHECKPOINT_H
#define SC_RUNTIME_CHECKPOINT_H

#include <stdint.h>

#include "runtime/safetensors.h"

enum { SC_CKPT_FORMAT_VERSION = 2 };       /* the newest manifest.json
                                              "format_version" read (1: whole
                                              tensors, written by sc_ckpt_save) */
#define SC_CKPT_FORMAT "shardc-checkpoint" /* manifest.json "format" */

typedef sc_tensor_view sc_ckpt_tensor;

typedef enum sc_ckpt_group {
  SC_CKPT_WEIGHTS,   /* weights.safetensors */
  SC_CKPT_OPTIMIZER, /* optimizer.safetensors */
  SC_CKPT_GROUP_COUNT
} sc_ckpt_group;

typedef struct sc_ckpt_state {
  int64_t step;               /* optimizer steps completed, >= 0 */
  int64_t data_position;      /* index of the next training example, >= 0 */
  int64_t schedule_position;  /* learning-rate schedule position, >= 0 */
  double loss_scale;          /* dynamic loss scale, finite and > 0 (1 without scaling) */
  int64_t loss_scale_growth;  /* good steps since the scale last changed, >= 0 */
  uint64_t rng_state;         /* the training RNG's state */
  const char *optimizer;      /* optimizer name ("adamw", "sgd"), not empty */
  const char *optimizer_json; /* its hyperparameters: a JSON object's text; NULL for {} */
} sc_ckpt_state;

/* Saves a checkpoint into dir (see above). weights and opt are the two
 * groups' tensors (names unique within a group); n_o may be 0. */
sc_status sc_ckpt_save(const char *dir, const sc_ckpt_state *st, const sc_ckpt_tensor *weights,
                       int32_t n_w, const sc_ckpt_tensor *opt, int32_t n_o, sc_diag *d);

/* One shard of a sharded save: the box [offsets, offsets + shape) of the
 * tensor `name` (global dims dims), its elements packed row-major, stored
 * in rank `writer`'s file of its group. The shards of one tensor must tile
 * it exactly. */
typedef struct sc_ckpt_shard {
  sc_ckpt_group group;
  int32_t writer;
  const char *name;
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  int64_t offsets[SC_MAX_RANK];
  int64_t shape[SC_MAX_RANK];
  const void *data;
} sc_ckpt_shard;
/* Saves a sharded checkpoint (format version 2) into dir, atomically as
 * sc_ckpt_save: one file per (group, writer) holding that writer's shards
 * under the keys "<name>@<k>", and the manifest. Errors: shards that do not
 * tile their tensor (SC_ERR_USAGE, naming it), and those of sc_ckpt_save. */
sc_status sc_ckpt_save_shards(const char *dir, const sc_ckpt_state *st,
                              const sc_ckpt_shard *shards, int32_t n, sc_diag *d);

/* The same by several processes (each writes its own shards into one
 * temporary folder; the swap is still one rename):
 *   1. one process: sc_ckpt_shards_begin checks dir and makes the folder
 *      (*tmp, its path, valid until finish);
 *   2. every process, with the path: sc_ckpt_shards_write writes the files
 *      of the writers among its shards and describes them in *part (JSON
 *      text, free() it);
 *   3. the first process, with every part: sc_ckpt_shards_finish merges
 *      them, checks that every tensor is tiled, writes the manifest and
 *      swaps the folder in; with s != SC_OK (a process failed) it removes
 *      the folder instead and returns s. It frees c. */
typedef struct sc_ckpt_commit sc_ckpt_commit;
sc_status sc_ckpt_shards_begin(const char *dir, sc_ckpt_commit **out, const char **tmp,
                               sc_diag *d);
sc_status sc_ckpt_shards_write(const char *dir, const char *tmp, const sc_ckpt_shard *shards,
                               int32_t n, char **part, sc_diag *d);
sc_status sc_ckpt_shards_finish(sc_ckpt_commit *c, const char *dir, const sc_ckpt_state *st,
                                const char *const *parts, int32_t n_parts, sc_status s,
                                sc_diag *d);

typedef struct sc_ckpt sc_ckpt;

/* Loads and verifies dir. On failure *out is NULL. */
sc_status sc_ckpt_load(const char *dir, sc_ckpt **out, sc_diag *d);
/* The state; optimizer_json is the hyperparameters as compact JSON with
 * sorted keys (the same object, not necessarily the same text). */
const sc_ckpt_state *sc_ckpt_state_of(const sc_ckpt *c);
/* A group's tensors in the order they were saved. */
int32_t sc_ckpt_count(const sc_ckpt *c, sc_ckpt_group g);
const sc_ckpt_tensor *sc_ckpt_tensor_at(const sc_ckpt *c, sc_ckpt_group g, int32_t i);
/* NULL when the group has no tensor of that name. */
const sc_ckpt_tensor *sc_ckpt_find(const sc_ckpt *c, sc_ckpt_group g, const char *name);
void sc_ckpt_destroy(sc_ckpt *c);

/* "weights", "optimizer". */
const char *sc_ckpt_group_name(sc_ckpt_group g);
/* True when path is a directory holding a manifest.json of this format
 * (any version); nothing else is checked. */
bool sc_ckpt_is_dir(const char *path);
/* Copies the box of the given shape at src_off in src (dims src_dims) to
 * dst_off in dst (dims dst_dims); esz bytes per element. */
void sc_ckpt_copy_box(size_t esz, int32_t rank, const int64_t *shape, const void *src,
                      const int64_t *src_dims, const int64_t *src_off, void *dst,
                      const int64_t *dst_dims, const int64_t *dst_off);

#endif
