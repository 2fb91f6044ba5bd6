/* pass.h — the pass manager and the canonical pipeline.
 *
 * A pass is a function over the graph. The registry (passes/manager.c) is one
 * readable list: name, function, what it requires and what it guarantees.
 * sc_run_passes runs a comma-separated list of pass names; with
 * opts->verify (on by default in test builds, SHARDC_VERIFY_EACH_PASS) the IR
 * verifier runs after every pass; --print-after=NAME prints the textual IR
 * after that pass to opts->print_out; --time-passes reports per-pass wall
 * time to opts->time_out.
 *
 * The canonical pipeline after import is SC_CANONICAL_PASSES:
 *   bind-dims    unbound symbolic dims get opts->default_dim (1) — after the
 *                caller bound the --dim ones — with a note on stderr
 *   infer-shapes static dtype and shape of every value, in topological order;
 *                nodes whose inputs are all constant and whose op has an eval
 *                function are evaluated on the way (their outputs become
 *                constants) so that data-dependent shapes resolve
 *   fold         removes nodes whose outputs are all constants (replaced by
 *                the constant values), evaluating what infer-shapes did not
 *   fuse-attention  each attention core becomes one FusedAttention node
 *                (passes/fuse_attention.h); off with opts->no_fuse_attention
 *   fuse-norm    each RMS norm written out in elementary ops becomes one
 *                RMSNormalization node (passes/fuse_norm.c)
 *   fuse-gelu    each GELU written out in elementary ops (tanh or erf form)
 *                becomes one Gelu node (passes/fuse_gelu.c)
 *   dce          removes nodes and constants no graph output depends on
 *
 * Compiling a graph (codegen/compile.c) then runs scatter-sum (a sum of a
 * scatter-add into zeros and another tensor becomes a scatter-add into
 * that tensor: passes/scatter_sum.c) and fuse.
 */
#ifndef SC_PASSES_PASS_H
#define SC_PASSES_PASS_H

#include <stdio.h>

#include "ir/ir.h"

/* An internal attribute (INT 1) on a node a pass wrote rather than read
 * from the model (fuse-norm's RMSNormalization, opset 23, in an opset-17
 * model): infer-shapes does not hold its op to the model's opset. An
 * attribute, not a node flag, so that every copy of the node (recompute,
 * the partitioner, the textual IR) carries it. */
#define SC_ATTR_DERIVED "__derived"

#define SC_CANONICAL_PASSES "bind-dims,infer-shapes,fold,fuse-attention,fuse-norm,fuse-gelu,dce"

struct sc_fuse_attention_report;

typedef struct sc_pass_opts {
  const char *print_after; /* pass name, "all", or NULL */
  FILE *print_out;         /* default stdout */
  bool time_passes;
  FILE *time_out;          /* default stderr */
  bool verify;             /* run sc_graph_verify after each pass */
  int64_t default_dim;     /* for bind-dims; default 1 */
  bool quiet;              /* no notes on stderr */
  bool no_fuse_attention;  /* fuse-attention does nothing (--no-fuse-attention) */
  /* fuse-attention's findings (passes/fuse_attention.h), or NULL */
  struct sc_fuse_attention_report *attention_report;
} sc_pass_opts;

void sc_pass_opts_init(sc_pass_opts *o);

typedef sc_status (*sc_pass_fn)(sc_graph *g, const sc_pass_opts *opts);

typedef struct sc_pass_info {
  const char *name;
  sc_pass_fn run;
  const char *requires;   /* human-readable precondition */
  const char *guarantees; /* human-readable postcondition */
  bool infers_shapes;     /* afterwards every value has a static shape, so
                             the verifier checks shapes from then on */
} sc_pass_info;

/* NULL-terminated registry, in pipeline order. */
/* Every registered pass, NULL-terminated: this module's, then those a
 * higher layer registered. */
const sc_pass_info *sc_pass_registry(void);
/* Adds a pass of a higher layer (codegen's fuse) to the registry; again
 * with the same name and function is a no-op. SC_ERR_USAGE for another
 * function under a taken name, SC_ERR_LIMIT when the registry is full. */
sc_status sc_pass_register(const sc_pass_info *p);
const sc_pass_info *sc_pass_find(const char *name);

/* Runs the passes named in `list` (comma-separated). On failure g->diag says
 * what; an unknown pass name is SC_ERR_USAGE. */
sc_status sc_run_passes(sc_graph *g, const char *list, const sc_pass_opts *opts);

/* The partitioner's stages (passes/partition/partition.h) that
 * --print-after also names: they are not graph passes of the registry. */
#define SC_PARTITION_PRINT_POINTS "seed, localize, pipeline-split"
bool sc_pass_is_partition_point(const char *name);

/* The passes themselves (one file each). */
sc_status sc_pass_bind_dims(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_infer_shapes(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_fold(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_dce(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_fuse_attention(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_fuse_norm(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_fuse_gelu(sc_graph *g, const sc_pass_opts *opts);
sc_status sc_pass_scatter_sum(sc_graph *g, const sc_pass_opts *opts);


/* Shared by infer-shapes and fold: evaluates node n when its op has an eval
 * function, every present input is a constant with data (Shape and Size: has
 * a static shape) and every output has a known shape of at most
 * SC_FOLD_MAX_ELEMENTS elements. *evaluated says whether it was. An eval
 * reporting SC_ERR_UNSUPPORTED or SC_ERR_LIMIT leaves the node unevaluated
 * (not an error); other failures are returned with g->diag set. */
sc_status sc_pass_try_eval(sc_graph *g, sc_node *n, bool *evaluated);

#endif
