/* partition_args.c — the partitioning options of `shardc plan`, `run` and
 * `compile` (partition_args.h), and the build they ask for.
 *
 * The options become a plan here, once, through the library
 * (sc_plan_from_options, or sc_plan_read_json_file for --plan); the driver
 * (driver/driver.c) does the rest. Errors are printed here
 * (sc_cli_report / sc_cli_usage_error) and come back as exit statuses:
 * 1 a problem in the model or plan, 2 usage. */
#include "tools/partition_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/dist_bundle.h" /* sc_dist_program_hash */
#include "codegen/train_manifest.h"


bool sc_partition_comm_is_world(const char *comm) {
  const sc_comm_choice *k = sc_comm_choice_find(comm);
  return k && k->world;
}

bool sc_partition_comm_on_device(const char *comm) {
  const sc_comm_choice *k = sc_comm_choice_find(comm);
  return k && !k->world && k->gpu_only;
}

int sc_partition_comm_device_check(const char *comm, const sc_device_choice *dev) {
  const sc_comm_choice *k = sc_comm_choice_find(comm);
  bool cuda = dev->name && strcmp(dev->name, "cuda") == 0;
  if (k && k->gpu_only && !cuda)
    return sc_cli_usage_error("--comm %s needs --device cuda (%s)", k->name, k->gpu_only);
  return 0;
}

sc_status sc_partition_world(const char *comm, const sc_dist_program *dp,
                             const struct sc_train_manifest *m, sc_comm **world, sc_diag *d) {
  *world = NULL;
  char hash[65]; /* tcp and NCCL's env bootstrap admit only ranks that run the same */
  sc_status st = sc_dist_program_hash(dp, m, hash, d);
  if (st) return st;
  return sc_comm_world_create(sc_comm_choice_find(comm), hash, world, d);
}

sc_status sc_partition_world_check(const char *comm, const sc_comm *world, int64_t n_ranks,
                                   sc_diag *d) {
  char option[64];
  snprintf(option, sizeof option, "--comm %s", comm);
  return sc_comm_world_check(sc_comm_choice_find(comm), option, world, n_ranks, d);
}

void sc_partition_args_init(sc_partition_args *p) {
  memset(p, 0, sizeof *p);
  p->comm = "local";
}

void sc_partition_args_help(FILE *f, bool training, bool allow_comm) {
  fprintf(f,
          "partitioning (docs/partitioning.md%s):\n"
          "  --mesh AXES            split over ranks, e.g. dp=2,tp=2,pp=2; the ranks are\n"
          "                         the product of the sizes. Axes: dp data parallel (the\n"
          "                         batch split; it must divide the batch)%s, tp tensor\n"
          "                         parallel (Megatron column/row splits, attention by\n"
          "                         heads, vocabulary-parallel embedding), pp pipeline\n"
          "                         stages (balanced by cost)\n"
          "  --mesh auto, --auto    the planner chooses the plan for --cluster C (default\n"
          "                         this machine, measured first) and says it on stderr\n"
          "                         (docs/planner.md section 4)%s\n",
          training ? ", docs/training.md" : "",
          training ? ", fsdp\n"
                     "                         sharded data parallel (the batch split too, and\n"
                     "                         the training state sharded: ZeRO/FSDP)"
                   : "",
          training ? ";\n                         --memory-budget BYTES caps it per rank"
                   : ";\n                         --objective latency (throughput: plan --auto)");
  if (training)
    fprintf(f,
            "  --zero 1|2|3           what fsdp shards: 1 optimizer state, 2 also gradients,\n"
            "                         3 also parameters, gathered for each use (default 3)\n"
            "  --hybrid-shard-degree S  the dp axis of N ranks becomes dp=N/S,fsdp=S\n"
            "                         (HSDP: shard within groups of S, replicate across)\n"
            "  --no-reshard-after-forward  ZeRO-3: keep the gathered parameters from the\n"
            "                         forward to the backward (no second all-gather)\n"
            "  --reduce-dtype fp32|bf16  a bf16 or fp16 step's gradient reductions over\n"
            "                         the data axes: fp32 after their cast back (default,\n"
            "                         FSDP's reduce_dtype, Megatron's), or in the step's\n"
            "                         low precision (bf16, fp16: half the bytes)\n"
            "  --schedule KIND        pipeline schedule: gpipe (default: all forwards, then\n"
            "                         all backwards), 1f1b (one forward one backward: less\n"
            "                         stash), interleaved (1f1b over --virtual-stages V\n"
            "                         chunks per rank: a smaller bubble), zb-h1 (weight\n"
            "                         gradients apart from input gradients)\n"
            "  --virtual-stages V     chunks per pipeline rank (--schedule interleaved)\n");
  fprintf(f,
          "  --microbatches M       pipeline microbatches: the batch is divided by M\n"
          "  --stage-boundaries A,B  nodes starting pipeline stages 1, 2, ...\n"
          "  --sequence-parallel    tp: reduce-scatter + all-gather over the sequence\n"
          "                         instead of all-reduce (activations split by tp)\n"
          "  --no-vocab-parallel    keep the embedding and LM head whole\n"
          "  --expert-tensor-parallel  tp: split each expert's MLP over tp as a dense\n"
          "                         MLP (default: experts whole on every tp rank)\n"
          "  --no-overlap           collectives run where they are, to completion (no\n"
          "                         async start and wait, no prefetch)\n"
          "  --no-fuse-attention    keep each attention core as separate products and\n"
          "                         a softmax (default: one fused attention step)\n"
          "  --ranks-per-node N     which ranks share a node\n"
          "  --cluster C            a cluster file (.json) or preset (h100-sxm:8x4,\n"
          "                         a100-80g:GxN, h200:GxN, cpu:local): axes ordered\n"
          "                         and placed on its nodes; C@PROFILE.json adds the\n"
          "                         figures `shardc calibrate` measured\n"
          "  --plan FILE.json       replay a plan written by `shardc plan --json`\n");
  if (allow_comm)
    fprintf(f,
            "  --comm local|cuda-local|mpi|tcp|nccl  ranks as threads of this process\n"
            "                         (default), as threads sharing one GPU with --device\n"
            "                         cuda (cuda-local: collectives on the GPU), or one\n"
            "                         process per rank: under mpirun (mpi), from\n"
            "                         torchrun's or Slurm's variables (tcp), or one GPU\n"
            "                         each with --device cuda (nccl); mpi, tcp and nccl\n"
            "                         need a mesh\n");
}

bool sc_partition_args_active(const sc_partition_args *p) {
  return p->mesh || p->plan_file || p->auto_plan;
}

bool sc_partition_args_any(const sc_partition_args *p) {
  return p->mesh || p->plan_file || p->auto_plan || p->objective || p->ranks_per_node ||
         p->cluster || p->microbatches ||
         p->boundaries ||
         p->schedule || p->virtual_stages || p->sequence_parallel || p->no_vocab_parallel ||
         p->expert_tensor_parallel || p->zero || p->keep_after_forward || p->reduce_dtype || p->no_overlap ||
         p->hybrid_shard_degree;
}

int sc_partition_args_take(sc_partition_args *p, int argc, char **argv, int *i,
                           bool allow_comm) {
  const char *a = argv[*i], *v;
  bool missing = false;
  int64_t n;
  if (strcmp(a, "--sequence-parallel") == 0) {
    p->sequence_parallel = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--expert-tensor-parallel") == 0) {
    p->expert_tensor_parallel = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--no-vocab-parallel") == 0) {
    p->no_vocab_parallel = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--no-overlap") == 0) {
    p->no_overlap = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--no-fuse-attention") == 0) {
    p->no_fuse_attention = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--no-reshard-after-forward") == 0) {
    p->keep_after_forward = true;
    (*i)++;
    return 1;
  }
  if (strcmp(a, "--auto") == 0) {
    p->auto_plan = true;
    (*i)++;
    return 1;
  }
  if ((v = sc_cli_opt_value(argc, argv, i, "--mesh", &missing))) {
    if (!missing && !*v) return sc_cli_usage_error("--mesh needs axes, e.g. pp=2,tp=2");
    if (!missing && strcmp(v, "auto") == 0) p->auto_plan = true;
    else if (!missing) p->mesh = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--reduce-dtype", &missing))) {
    if (!missing && !sc_plan_reduce_dtype_known(v))
      return sc_cli_usage_error("--reduce-dtype expects fp32, bf16 or fp16, got '%s'", v);
    if (!missing) p->reduce_dtype = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--objective", &missing))) {
    if (!missing && strcmp(v, "latency") != 0 && strcmp(v, "throughput") != 0)
      return sc_cli_usage_error("--objective expects latency or throughput, got '%s'", v);
    if (!missing) p->objective = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--ranks-per-node", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, SC_MESH_MAX_RANKS, &n))
      return sc_cli_usage_error("--ranks-per-node expects a positive integer, got '%s'", v);
    if (!missing) p->ranks_per_node = n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--cluster", &missing))) {
    if (!missing && !*v) return sc_cli_usage_error("--cluster needs a file or a preset");
    if (!missing) p->cluster = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--microbatches", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, 1 << 20, &n))
      return sc_cli_usage_error("--microbatches expects a positive integer, got '%s'", v);
    if (!missing) p->microbatches = (int32_t)n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--zero", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, 3, &n))
      return sc_cli_usage_error("--zero expects 1, 2 or 3, got '%s'", v);
    if (!missing) p->zero = (int32_t)n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--hybrid-shard-degree", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, SC_MESH_MAX_RANKS, &n))
      return sc_cli_usage_error("--hybrid-shard-degree expects a positive integer, got '%s'",
                                v);
    if (!missing) p->hybrid_shard_degree = n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--schedule", &missing))) {
    if (!missing && strcmp(v, "gpipe") != 0 && strcmp(v, "1f1b") != 0 &&
        strcmp(v, "interleaved") != 0 && strcmp(v, "zb-h1") != 0)
      return sc_cli_usage_error("--schedule expects gpipe, 1f1b, interleaved or zb-h1, got '%s'",
                                v);
    if (!missing) p->schedule = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--virtual-stages", &missing))) {
    if (!missing && !sc_cli_parse_i64(v, 1, 1024, &n))
      return sc_cli_usage_error("--virtual-stages expects a positive integer, got '%s'", v);
    if (!missing) p->virtual_stages = (int32_t)n;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--stage-boundaries", &missing))) {
    if (!missing) p->boundaries = v;
  } else if ((v = sc_cli_opt_value(argc, argv, i, "--plan", &missing))) {
    if (!missing) p->plan_file = v;
  } else if (allow_comm && (v = sc_cli_opt_value(argc, argv, i, "--comm", &missing))) {
    if (!missing && !sc_comm_choice_find(v))
      return sc_cli_usage_error("--comm expects %s, got '%s'", sc_comm_choice_names(), v);
    if (!missing) p->comm = v;
    p->comm_given = true;
  } else {
    return 0;
  }
  if (missing) return sc_cli_usage_error("option '%s' needs a value", a);
  (*i)++;
  return 1;
}

/* --plan carries its own mesh and choices: the options that make one may
 * not come with it. */
static int check_conflicts(const sc_partition_args *p) {
  if (p->auto_plan && !p->mesh) /* sc_plan_auto_resolve sets the mesh */
    return sc_cli_usage_error("--mesh auto: the plan was not chosen before the build");
  if (p->objective && !p->auto_plan)
    return sc_cli_usage_error("--objective needs --mesh auto (or --auto)");
  if (p->auto_plan && p->plan_file)
    return sc_cli_usage_error("--mesh auto and --plan both choose the plan: give one");
  if (!p->plan_file) {
    if (!p->mesh && (p->ranks_per_node || p->cluster || p->microbatches || p->boundaries ||
                     p->schedule ||
                     p->virtual_stages ||
                     p->sequence_parallel || p->no_vocab_parallel ||
                     p->expert_tensor_parallel || p->zero ||
                     p->keep_after_forward || p->reduce_dtype || p->hybrid_shard_degree ||
                     p->no_overlap))
      return sc_cli_usage_error("partitioning options need --mesh (or --plan)");
    return 0;
  }
  const char *bad = p->mesh                ? "--mesh"
                    : p->ranks_per_node    ? "--ranks-per-node"
                    : p->cluster           ? "--cluster"
                    : p->microbatches      ? "--microbatches"
                    : p->boundaries        ? "--stage-boundaries"
                    : p->schedule          ? "--schedule"
                    : p->virtual_stages    ? "--virtual-stages"
                    : p->sequence_parallel ? "--sequence-parallel"
                    : p->no_vocab_parallel ? "--no-vocab-parallel"
                    : p->expert_tensor_parallel ? "--expert-tensor-parallel"
                    : p->zero              ? "--zero"
                    : p->keep_after_forward ? "--no-reshard-after-forward"
                    : p->reduce_dtype      ? "--reduce-dtype"
                    : p->hybrid_shard_degree ? "--hybrid-shard-degree"
                                           : NULL;
  if (bad) return sc_cli_usage_error("%s may not be given with --plan (the plan file decides)", bad);
  return 0;
}

/* --hybrid-shard-degree S: the mesh's dp axis of N ranks becomes
 * dp=N/S,fsdp=S (S = N: fsdp alone; S = 1: dp alone). */
static int hybrid_mesh(const sc_partition_args *p, char *buf, size_t cap) {
  sc_mesh m;
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (sc_mesh_parse(p->mesh, &m, &d) != SC_OK)
    return sc_cli_usage_error("--mesh %s: %s", p->mesh, d.msg);
  int64_t S = p->hybrid_shard_degree, N = sc_mesh_axis_size(&m, "dp");
  if (sc_mesh_find_axis(&m, "dp") < 0 || sc_mesh_find_axis(&m, "fsdp") >= 0 || N % S != 0)
    return sc_cli_usage_error("--hybrid-shard-degree %lld: needs a mesh with a dp axis whose "
                              "size it divides, and no fsdp axis (the mesh is %s)",
                              (long long)S, p->mesh);
  size_t pos = 0;
  buf[0] = 0;
  for (int32_t a = 0; a < m.n_axes; a++) {
    const char *name = m.axes[a].name;
    int w;
    if (strcmp(name, "dp") != 0)
      w = snprintf(buf + pos, cap - pos, "%s%s=%lld", pos ? "," : "",
                   name, (long long)m.axes[a].size);
    else if (S == N)
      w = snprintf(buf + pos, cap - pos, "%sfsdp=%lld", pos ? "," : "",
                   (long long)S);
    else if (S == 1)
      w = snprintf(buf + pos, cap - pos, "%sdp=%lld", pos ? "," : "",
                   (long long)N);
    else
      w = snprintf(buf + pos, cap - pos, "%sdp=%lld,fsdp=%lld",
                   pos ? "," : "", (long long)(N / S), (long long)S);
    if (w < 0 || (size_t)w >= cap - pos)
      return sc_cli_usage_error("--mesh %s: too long", p->mesh);
    pos += (size_t)w;
  }
  return 0;
}

void sc_build_setup_init(sc_build_setup *s, const sc_cli_opts *opts,
                         const sc_partition_args *p) {
  sc_cli_pass_opts(opts, &s->pass);
  sc_compile_opts_init(&s->compile);
  s->compile.overlap = !(p && p->no_overlap);
  s->compile.print_after = opts->print_after;
  s->compile.time_passes = opts->time_passes;
  sc_build_opts_init(&s->build);
  s->build.pass = &s->pass;
  s->build.compile = &s->compile;
}

bool sc_partition_args_target(const sc_partition_args *p, sc_device_target *t) {
  sc_diag d = {0};
  sc_diag_clear(&d);
  if (p->cluster_loaded) return sc_device_target_of_cluster(p->cluster_loaded, t);
  if (p->plan_file && !p->cluster) { /* a replay: the plan's preset */
    sc_plan *pl = NULL;
    bool gpu = sc_plan_read_json_file(p->plan_file, NULL, &pl, &d) == SC_OK && pl->cluster &&
               pl->cluster_figures.nodes > 0 &&
               sc_device_target_of_cluster(&pl->cluster_figures, t);
    sc_plan_destroy(pl);
    return gpu;
  }
  if (!p->cluster) return false;
  sc_cluster *c = sc_malloc(sizeof *c);
  bool gpu = c && sc_cluster_load(p->cluster, c, &d) == SC_OK &&
             sc_device_target_of_cluster(c, t);
  sc_free(c);
  return gpu;
}

void sc_build_setup_target(sc_build_setup *s, const sc_device_target *t) {
  sc_compile_opts_target(&s->compile, t);
}

int sc_partition_args_build(const sc_partition_args *p, const sc_cli_opts *opts,
                            sc_build_opts *bo, sc_build **out, sc_diag *unreported) {
  *out = NULL;
  int rc = check_conflicts(p);
  if (rc) return rc;
  if (p->reduce_dtype && !bo->train)
    return sc_cli_usage_error("--reduce-dtype sets the dtype of a training step's gradient "
                              "reductions: it needs --train");
  if (p->reduce_dtype && strcmp(sc_train_precision_name(bo->train), "fp32") == 0)
    return sc_cli_usage_error("--reduce-dtype %s: an fp32 step's gradients are fp32 and reduced "
                              "so; it applies to --precision bf16 or fp16",
                              p->reduce_dtype);
  sc_diag d = {0}; /* sc_diag_clear keeps .file: start zeroed */
  sc_diag_clear(&d);
  sc_plan *plan = NULL;
  if (p->plan_file) {
    if (sc_plan_read_json_file(p->plan_file, NULL, &plan, &d) != SC_OK)
      return sc_cli_report(&d, p->plan_file);
  } else if (p->mesh) {
    const char *mesh = p->mesh;
    char hybrid[256];
    if (p->hybrid_shard_degree) {
      if ((rc = hybrid_mesh(p, hybrid, sizeof hybrid)) != 0) return rc;
      mesh = hybrid;
    }
    sc_cluster cluster;
    if (p->cluster && !p->cluster_loaded && sc_cluster_load(p->cluster, &cluster, &d) != SC_OK)
      return sc_cli_report(&d, NULL);
    sc_plan_options po = {.mesh = mesh,
                          .cluster = p->cluster_loaded ? p->cluster_loaded
                                     : p->cluster      ? &cluster
                                                       : NULL,
                          .zero_stage = p->zero,
                          .keep_after_forward = p->keep_after_forward,
                          .reduce_dtype = p->reduce_dtype,
                          .ranks_per_node = p->ranks_per_node,
                          .microbatches = p->microbatches,
                          .schedule = p->schedule,
                          .virtual_stages = p->virtual_stages,
                          .boundaries = p->boundaries,
                          .sequence_parallel = p->sequence_parallel,
                          .no_vocab_parallel = p->no_vocab_parallel,
                          .expert_tensor_parallel = p->expert_tensor_parallel};
    if (sc_plan_from_options(&po, &plan, &d) != SC_OK)
      return p->cluster ? sc_cli_usage_error("--mesh %s --cluster %s: %s", p->mesh, p->cluster,
                                             d.msg)
                        : sc_cli_usage_error("--mesh %s: %s", p->mesh, d.msg);
  }
  sc_dim_value dims[SC_CLI_MAX_DIMS];
  for (int i = 0; i < opts->n_dims; i++)
    dims[i] = (sc_dim_value){opts->dims[i].name, opts->dims[i].value};
  bo->model = opts->file;
  bo->dims = dims;
  bo->n_dims = opts->n_dims;
  bo->plan = plan; /* taken */
  bo->plan_file = p->plan_file;
  bo->no_fuse_attention |= p->no_fuse_attention;
  sc_status st = sc_build_run(bo, out, &d);
  bo->plan = NULL;
  bo->dims = NULL;
  if (st == SC_OK) return 0;
  if (unreported && bo->wanted_input && bo->wanted_input[0]) {
    *unreported = d;
    return -1;
  }
  return sc_cli_report(&d, opts->file);
}
