/* param_init.h — parameters from an initialiser instead of the model file
 * (`shardc train --init SPEC --seed N`), each rank writing only its own
 * piece, the same global values for any mesh.
 *
 * A rule is `SPEC` or `GLOB=SPEC`: normal:STD, uniform:A (U(-A, A)), zeros,
 * ones, xavier (Glorot uniform, gain 1), kaiming (He normal over fan-in,
 * gain √2: PyTorch's kaiming_normal_ default, leaky_relu with a = 0, which
 * is relu's gain). The first rule whose glob (fnmatch(3), no flags)
 * matches a parameter's name wins, in the order given; a rule without a
 * glob matches every name.
 *
 * Values. Element e (its global row-major index in the unpadded tensor) of
 * parameter NAME is a function of (seed, NAME, e) alone: one Philox4x32-10
 * block (Salmon et al., SC'11; Random123's constants and key schedule)
 * with key = the seed's two 32-bit halves and counter = {e low, e high,
 * FNV-1a-64(NAME) low, high}. Uniform variates are 53-bit doubles from
 * the first two output words; normal variates Box-Muller over words 0 and
 * 1 (u1 = (w0 + 0.5)/2^32 in (0, 1), u2 = w1/2^32), the cosine branch
 * only. No sequential state: any rank computes any element, so the global
 * tensor is bit-identical however it is split (fsdp flat shards, tp row or
 * column splits with partition strides, pipeline stages). Values are
 * computed in double and rounded once to the parameter's dtype.
 *
 * Roles (sc_param_init_role, found from the graph by the build: see
 * passes/init_roles.h) refine a parameter: fan-in on its last axis (Gemm
 * with transB, PyTorch's [out, in]) rather than axis 0 (ONNX MatMul's
 * [in, out]); the residual-branch scale 1/√(2·n_layers) of
 * --init-residual-scale (random kinds only); the logical (unpadded) name
 * and dims of a vocabulary-padded copy ("W.vocab_padded"): hashed and
 * indexed as W, its padded rows or columns zeros.
 *
 * Fans, as PyTorch's _calculate_fan_in_and_fan_out over the tensor as
 * PyTorch would hold it: rank 2 [in, out] (ONNX MatMul): fan_in = dims[0],
 * fan_out = dims[1]; rank 2 with fan-in last: swapped; rank ≥ 3 (a
 * convolution's [out, in, k...]): fan_in = dims[1]·Πk, fan_out =
 * dims[0]·Πk. Rank < 2: xavier and kaiming are refused (PyTorch refuses
 * them too).
 *
 * Memory: sc_param_init_fill writes a rank's packed local piece in place
 * and allocates nothing: the full tensor is never materialised.
 * Everything here is pure (no globals); any thread may fill any piece. */
#ifndef SC_RUNTIME_PARAM_INIT_H
#define SC_RUNTIME_PARAM_INIT_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/dist_program.h"
#include "codegen/train_manifest.h"
#include "ir/sharding.h"
#include "runtime/runtime.h"

typedef enum sc_init_kind {
  SC_INIT_NORMAL,
  SC_INIT_UNIFORM,
  SC_INIT_ZEROS,
  SC_INIT_ONES,
  SC_INIT_XAVIER,
  SC_INIT_KAIMING,
  SC_INIT_KIND_COUNT
} sc_init_kind;

typedef struct sc_init_rule {
  const char *glob;    /* the rule's text (borrowed): the glob is the part
                          before its last '='; NULL: every name */
  sc_init_kind kind;
  double arg;          /* normal: std; uniform: A; else 0 */
} sc_init_rule;

typedef struct sc_param_init_role {
  const char *name;          /* the program's parameter name (borrowed) */
  const char *logical;       /* the name hashed and matched (a padded copy's
                                original), borrowed; NULL: name */
  int32_t rank;              /* logical dims; rank 0 with logical NULL: the
                                program's global dims */
  int64_t dims[SC_MAX_RANK];
  bool fan_in_last;          /* Gemm transB: [out, in] */
  double scale;              /* residual branch: 1/√(2·n_layers); 0 or 1: none */
} sc_param_init_role;

enum { SC_PARAM_INIT_MAX_RULES = 64 };

typedef struct sc_param_init {
  sc_init_rule rules[SC_PARAM_INIT_MAX_RULES];
  int32_t n_rules;
  uint64_t seed;
  const sc_param_init_role *roles; /* borrowed, [n_roles] */
  int32_t n_roles;
} sc_param_init;

/* Philox4x32-10 of counter ctr under key: out = the block. */
void sc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* FNV-1a, 64 bits, of a name (the counter's upper half). */
uint64_t sc_param_init_name_hash(const char *name);

/* Appends a rule from text (`SPEC` or `GLOB=SPEC`; text borrowed: it must
 * outlive pi). SC_ERR_USAGE naming the text: an unknown initialiser, a
 * missing or non-positive argument, a bad glob (empty, an unclosed '['),
 * too many rules. */
sc_status sc_param_init_add(sc_param_init *pi, const char *text, sc_diag *d);
/* The rule for `name`, or NULL when none matches. */
const sc_init_rule *sc_param_init_match(const sc_param_init *pi, const char *name);
/* kind's name as written in a rule ("normal", ...). */
const char *sc_init_kind_name(sc_init_kind k);

/* The value of global element e of parameter `name` (after roles) with
 * logical dims dims[rank]; role may be NULL. */
double sc_param_init_value(const sc_param_init *pi, const sc_init_rule *r,
                           const sc_param_init_role *role, const char *name, int32_t rank,
                           const int64_t *dims, uint64_t e);

/* Whether parameter `name` (program dtype and global dims) is initialised
 * here: *rule (NULL: no rule matches: it keeps the file's value). Checks
 * what would fail at fill time: SC_ERR_USAGE naming the parameter for
 * xavier or kaiming on a rank < 2 tensor or one with a zero fan, or a
 * dtype that is not float. */
sc_status sc_param_init_check(const sc_param_init *pi, const char *name, sc_dtype dtype,
                              int32_t rank, const int64_t *dims, const sc_init_rule **rule,
                              sc_diag *d);

/* Writes the packed local piece of parameter `name` (global dims
 * dims[rank], dtype) held by the rank at coords under sharding sh over
 * mesh m (sh NULL: the whole tensor), into dst. Elements of a padded
 * copy beyond the logical dims are zeros, as are the pieces of a rank
 * that is not the first along a partial axis. No allocation.
 * SC_ERR_USAGE as sc_param_init_check; SC_ERR_INVALID when no rule
 * matches. */
sc_status sc_param_init_fill(const sc_param_init *pi, const char *name, sc_dtype dtype,
                             int32_t rank, const int64_t *dims, const sc_sharding *sh,
                             const sc_mesh *m, const int64_t *coords, void *dst, sc_diag *d);

/* Every parameter of a training step's manifest m (its program p, or the
 * partitioned step dp, whose global dims count; dp may be NULL): checked
 * as sc_param_init_check, and one that no rule matches and the model
 * holds no value of is SC_ERR_USAGE naming it. *n_init: how many a rule
 * matches. */
sc_status sc_param_init_check_params(const sc_param_init *pi, const struct sc_train_manifest *m,
                                     const sc_program *p, const struct sc_dist_program *dp,
                                     int32_t *n_init, sc_diag *d);

/* Bytes of the packed local piece of a tensor of global dims dims[rank]
 * under sh (NULL: the whole). */
int64_t sc_param_init_piece_bytes(const sc_sharding *sh, const sc_mesh *m, sc_dtype dtype,
                                  int32_t rank, const int64_t *dims);

#endif
