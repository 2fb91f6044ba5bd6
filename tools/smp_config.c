/* smp_config.c — `--smp-config FILE.json`: SageMaker model parallelism
 * (SMP v2) configuration keys, as shardc options (smp_config.h).
 *
 * SMP v2 reads a dictionary of keys; here it is a JSON object. Each key is
 * one of:
 *   applied   hybrid_shard_degree (0: the whole data-parallel world, as
 *             SMP's 0 falls back to full sharding; S: dp=N/S, fsdp=S),
 *             tensor_parallel_degree (tp=T out of the N ranks),
 *             expert_parallel_degree (ep=X out of the data-parallel
 *             ranks: X divides N/T; docs/moe.md), context_parallel_degree
 *             (cp=C out of the data-parallel ranks that remain: C divides
 *             N/(T·X); docs/context-parallel.md),
 *             activation_checkpointing ("none", "selective", "full",
 *             "auto" = --recompute), sm_activation_offloading (true =
 *             --offload-activations; SMP offloads only what checkpointing
 *             keeps, so it needs activation_checkpointing other than
 *             "none"), activation_loading_horizon (H >= 0 =
 *             --activation-loading-horizon, with sm_activation_offloading);
 *   ignored   random_seed (the step has no random op: dropout is its
 *             inference form), fsdp_cache_flush_warnings, allow_empty_shards
 *             (no CUDA caching allocator, no uneven shards here), named on
 *             stderr;
 * and anything else is refused naming it. The mesh is built from the
 * world: `--mesh dp=N` gives the N ranks SMP would launch, and the degrees
 * divide it (dp=N/(T·X·C·S), fsdp=S, ep=X, cp=C, tp=T). Errors name the file and the key;
 * the file is untrusted (size-limited, strictly typed). */
#include "tools/smp_config.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "ir/fileio.h"
#include "tools/cli.h"

static int bad(const char *file, const char *fmt, const char *key) {
  fprintf(stderr, "shardc: error: %s: ", file);
  fprintf(stderr, fmt, key);
  fputc('\n', stderr);
  return 1;
}

/* A non-negative integer value of key (or absent: *x unchanged). */
static int get_degree(const char *file, json_t *root, const char *key, int64_t *x) {
  json_t *v = json_object_get(root, key);
  if (!v) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20)
    return bad(file, "'%s' must be an integer from 0 to 1048576", key);
  *x = json_integer_value(v);
  return 0;
}

int sc_smp_config_apply(const char *file, sc_partition_args *pa, sc_train_args *ta,
                        char *mesh, size_t mesh_size) {
  static const char *const applied[] = {"hybrid_shard_degree", "tensor_parallel_degree",
                                        "expert_parallel_degree", "context_parallel_degree",
                                        "activation_checkpointing",
                                        "sm_activation_offloading", "activation_loading_horizon",
                                        NULL};
  static const char *const ignored[] = {"random_seed", "fsdp_cache_flush_warnings",
                                        "allow_empty_shards", NULL};
  sc_diag d = {0};
  sc_diag_clear(&d);
  char *text = NULL;
  size_t len = 0;
  if (sc_file_read_all(file, file, 1 << 20, &text, &len, &d) != SC_OK) {
    fprintf(stderr, "shardc: error: %s\n", d.msg);
    return 1;
  }
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  sc_free(text);
  if (!root) {
    fprintf(stderr, "shardc: error: %s: line %d: %s\n", file, err.line, err.text);
    return 1;
  }
  int rc = 0;
  if (!json_is_object(root)) rc = bad(file, "%s", "expected a JSON object of SMP v2 keys");
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (rc) break;
    bool known = false;
    for (int k = 0; applied[k] && !known; k++) known = strcmp(key, applied[k]) == 0;
    for (int k = 0; ignored[k] && !known; k++)
      if (strcmp(key, ignored[k]) == 0) {
        known = true;
        fprintf(stderr, "shardc: note: %s: '%s' is ignored: %s\n", file, key,
                strcmp(key, "random_seed") == 0
                    ? "the training step has no random op (dropout runs in its inference form)"
                    : "it tunes PyTorch's CUDA caching allocator or uneven shards, which shardc "
                      "does not have");
      }
    if (!known && !rc) rc = bad(file, "'%s' is not an SMP v2 key shardc knows", key);
  }
  int64_t S = -1, T = 1, X = 1, C = 1;
  if (!rc) rc = get_degree(file, root, "hybrid_shard_degree", &S);
  if (!rc) rc = get_degree(file, root, "tensor_parallel_degree", &T);
  if (!rc) rc = get_degree(file, root, "expert_parallel_degree", &X);
  if (!rc) rc = get_degree(file, root, "context_parallel_degree", &C);
  json_t *ac = rc ? NULL : json_object_get(root, "activation_checkpointing");
  if (ac) {
    static const char *const kinds[] = {"none", "selective", "full"};
    const char *s = json_is_string(ac) ? json_string_value(ac) : "";
    bool ok = false;
    for (int k = 0; k < 3 && !ok; k++)
      if (strcmp(s, kinds[k]) == 0) {
        ta->t.recompute = (sc_recompute_kind)k;
        ok = true;
      }
    if (!ok && strcmp(s, "auto") == 0) {
      ta->recompute_auto = true;
      ok = true;
    }
    if (!ok) rc = bad(file, "'%s' must be \"none\", \"selective\", \"full\" or \"auto\"",
                      "activation_checkpointing");
  }
  json_t *off = rc ? NULL : json_object_get(root, "sm_activation_offloading");
  if (off && !json_is_boolean(off)) rc = bad(file, "'%s' must be true or false",
                                             "sm_activation_offloading");
  if (off && !rc && json_is_true(off)) {
    if (!ac || (ta->t.recompute == SC_RECOMPUTE_NONE && !ta->recompute_auto))
      rc = bad(file, "'%s' needs activation_checkpointing (SMP offloads the activations "
               "checkpointing keeps; --offload-activations without recompute offloads every "
               "saved one)", "sm_activation_offloading");
    ta->t.offload_activations = true;
  }
  int64_t horizon = -1;
  if (!rc) rc = get_degree(file, root, "activation_loading_horizon", &horizon);
  if (!rc && horizon >= 0) {
    if (!ta->t.offload_activations)
      rc = bad(file, "'%s' goes with \"sm_activation_offloading\": true",
               "activation_loading_horizon");
    ta->t.activation_loading_horizon = (int32_t)horizon;
    ta->horizon_given = true;
  }
  json_decref(root);
  if (rc) return rc;
  /* the mesh from the world's size */
  if (!pa->mesh)
    return sc_cli_usage_error("--smp-config needs the world: --mesh dp=N (N ranks)");
  sc_mesh m;
  if (sc_mesh_parse(pa->mesh, &m, &d) != SC_OK || m.n_axes != 1 ||
      strcmp(m.axes[0].name, "dp") != 0)
    return sc_cli_usage_error("--smp-config: --mesh must be dp=N, the world of N ranks the "
                              "degrees divide (got '%s')", pa->mesh);
  int64_t N = m.axes[0].size;
  if (T < 1 || N % T != 0)
    return bad(file, "'%s' does not divide the world of the --mesh", "tensor_parallel_degree");
  int64_t D = N / T; /* data-parallel ranks */
  /* the experts split over X of them (a data axis too); dp and fsdp take
   * the rest */
  if (X < 1 || D % X != 0)
    return bad(file, "'%s' does not divide the data-parallel ranks (world / tensor_parallel_"
               "degree)", "expert_parallel_degree");
  D /= X;
  /* the sequence split over C of those that remain (SMP's context-parallel
   * ranks are data-parallel ranks too) */
  if (C < 1 || D % C != 0)
    return bad(file, "'%s' does not divide the data-parallel ranks (world / tensor_parallel_"
               "degree / expert_parallel_degree)", "context_parallel_degree");
  D /= C;
  if (S == 0) S = D;   /* SMP: 0 shards over the whole data-parallel group */
  if (S > 0 && D % S != 0)
    return bad(file, "'%s' does not divide the data-parallel ranks (world / tensor_parallel_"
               "degree / expert_parallel_degree / context_parallel_degree)", "hybrid_shard_degree");
  size_t pos = 0;
  mesh[0] = 0;
  if (S < 0 || D / S > 1) pos += (size_t)snprintf(mesh + pos, mesh_size - pos, "dp=%lld",
                                                   (long long)(S > 0 ? D / S : D));
  if (S > 1)
    pos += (size_t)snprintf(mesh + pos, mesh_size - pos, "%sfsdp=%lld", pos ? "," : "",
                            (long long)S);
  if (X > 1)
    pos += (size_t)snprintf(mesh + pos, mesh_size - pos, "%sep=%lld", pos ? "," : "",
                            (long long)X);
  if (C > 1)
    pos += (size_t)snprintf(mesh + pos, mesh_size - pos, "%scp=%lld", pos ? "," : "",
                            (long long)C);
  if (T > 1)
    pos += (size_t)snprintf(mesh + pos, mesh_size - pos, "%stp=%lld", pos ? "," : "",
                            (long long)T);
  if (!pos) snprintf(mesh, mesh_size, "dp=1");
  pa->mesh = mesh;
  char off_opts[96] = "";
  if (ta->t.offload_activations)
    snprintf(off_opts, sizeof off_opts, " --offload-activations --activation-loading-horizon %d",
             (int)ta->t.activation_loading_horizon);
  fprintf(stderr, "shardc: note: %s: the SMP v2 configuration over %lld ranks is --mesh %s%s%s\n",
          file, (long long)N, mesh,
          ta->recompute_auto ? " --recompute auto"
          : ta->t.recompute == SC_RECOMPUTE_FULL ? " --recompute full"
          : ta->t.recompute == SC_RECOMPUTE_SELECTIVE ? " --recompute selective" : "",
          off_opts);
  return 0;
}
