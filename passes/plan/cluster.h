/* cluster.h — the cluster a plan is made for, and where the mesh's axes sit
 * on it (docs/planner.md).
 *
 * A cluster is `nodes` machines of `devices_per_node` identical devices:
 * each device's memory, peak FLOP/s per dtype and memory bandwidth, and two
 * links, inside a node and between nodes (the latter per device). It comes
 * from a JSON file (docs/planner.md, "The cluster file") or a preset by name
 * with a count: `h100-sxm:8x4` is 4 nodes of 8 H100s. The presets are the
 * files of samples/clusters/, compiled in. `cpu:local` is this machine:
 * one node, one rank per core, its memory from /proc/meminfo; what it cannot
 * know without measuring (peak FLOP/s, bandwidths, latencies) is 0, which
 * means unknown everywhere in this header: a figure is never invented.
 *
 * The placement puts a mesh on the cluster: ranks fill a node before the
 * next (rank r on node r / devices_per_node), so an axis's stride in ranks
 * decides whether its groups stay in a node. sc_cluster_order_mesh orders
 * the axes so that the busiest links are the fastest (pp outermost, then
 * dp, fsdp, other axes, tp innermost); sc_cluster_fit_mesh refuses a mesh
 * that does not fit; sc_placement_compute (ir/placement.h) describes where
 * each axis lands and refuses a mesh whose groups straddle nodes unevenly.
 *
 * sc_cluster and sc_placement are plain values (no pointers). Nothing here
 * keeps state or takes locks. Errors: SC_ERR_PARSE (malformed JSON, wrong
 * type), SC_ERR_INVALID (unknown key, a number that is not positive and
 * finite, a missing key, a mesh that does not fit), SC_ERR_USAGE (an unknown
 * preset or a malformed count), SC_ERR_IO, with the file and key named in
 * the diag.
 *
 * A GPU cluster (sc_cluster_is_gpu) may say what the memory model of the
 * CUDA device cannot know: the CUDA context's bytes (gpu.context_bytes, or a
 * CUDA profile's) and NCCL's channels per link (nccl_channels); both are
 * optional, 0 meaning not given (codegen/device_memory.h: the context then
 * unknown, the channels its default).
 *
 * A profile (profile.h, `shardc calibrate`) gives a cluster measured
 * figures: a cluster file names one with "profile": "x.json" (relative to
 * the cluster file's folder, which it may not leave), a preset or
 * cpu:local takes one as SPEC@FILE (`cpu:local@prof.json`). With a
 * profile, the peaks of the dtypes it measured become its best measured
 * GEMM rates, the memory bandwidth its streaming bandwidth, and the
 * intra-node link its first communicator's fitted latency and bandwidth;
 * cpu:local's ranks a node become the most ranks its communicator was
 * measured with, when that exceeds the cores (thread-ranks may
 * oversubscribe the cores; the profile says what that costs). */
#ifndef SC_PLAN_CLUSTER_H
#define SC_PLAN_CLUSTER_H

#include "ir/base.h"
#include "ir/mesh.h"
#include "ir/placement.h"
#include "passes/plan/profile.h"

/* sc_cluster_dtype and its names: profile.h. */

enum { SC_CLUSTER_NAME_MAX = 64 }; /* name bytes, NUL included */
/* Most nodes, and most devices a node, a cluster may have. */
#define SC_CLUSTER_MAX_NODES ((int64_t)1 << 16)
#define SC_CLUSTER_MAX_PER_NODE ((int64_t)1 << 12)

typedef struct sc_cluster_link {
  double bandwidth_bytes_per_s; /* one direction, per device; 0 = unknown */
  double latency_s;             /* one small message; 0 = unknown */
  int64_t nccl_channels;        /* NCCL's channels a communicator over this
                                   link opens; 0 = not given (the default,
                                   codegen/device_memory.h) */
} sc_cluster_link;
/* The most NCCL channels a link may name (NCCL's MAXCHANNELS). */
#define SC_CLUSTER_MAX_NCCL_CHANNELS 64

typedef struct sc_cluster {
  char name[SC_CLUSTER_NAME_MAX];        /* "h100-sxm:8x4", or the file's */
  char device_name[SC_CLUSTER_NAME_MAX]; /* "H100-SXM5-80GB", "cpu" */
  int64_t nodes;                         /* >= 1 */
  int64_t devices_per_node;              /* >= 1: ranks a node */
  int64_t device_memory_bytes;           /* per device; 0 = unknown */
  int64_t host_cores;                    /* cpu:local: the online cores its
                                            thread-ranks share, time-sliced
                                            when they outnumber them
                                            (sc_cluster_core_share); 0 for
                                            devices of their own */
  int64_t context_bytes;                 /* a GPU's CUDA context per process
                                            (gpu.context_bytes, or a CUDA
                                            profile's); 0 = unknown */
  double peak_flops[SC_CLUSTER_DTYPE_COUNT]; /* per device; 0 = unknown */
  double memory_bytes_per_s;             /* per device (HBM); 0 = unknown */
  double attention_efficiency;           /* a fused attention's FLOP/s over the
                                            dtype's peak (gpu.attention_efficiency,
                                            in (0, 1]; the presets give the
                                            published figure of their GPU); 0 =
                                            not given: costed as a GEMM of its
                                            sq x skv x d (cost.h) */
  double host_link_bytes_per_s;          /* per device, one direction, between
                                            its memory and pinned host memory
                                            (PCIe on a GPU: gpu.host_link_bytes_per_s;
                                            cpu:local with a profile: its memory
                                            bandwidth, the copy is a memcpy); what
                                            activation offloading's copies run at;
                                            0 = unknown (the search then does not
                                            offload) */
  sc_cluster_link intra_node;            /* between devices of a node */
  sc_cluster_link inter_node;            /* between nodes, per device */
  sc_profile profile;                    /* measured figures of the device
                                            (profile.h); present: cost.h uses
                                            them instead of the defaults */
} sc_cluster;

/* Reads a cluster file (docs/planner.md). name labels errors ("x.json");
 * text need not be NUL-terminated. Strict: an unknown key, a duplicate
 * key, a wrong type, a number that is not positive and finite, or a missing
 * required key is an error naming the key ("gpu.peak_flops.bf16"). The
 * name defaults to `name`. *out is zeroed on failure. */
sc_status sc_cluster_read_json(const char *text, size_t len, const char *name, sc_cluster *out,
                               sc_diag *d);
/* _file: path must be a regular file of at most 1 MiB. */
sc_status sc_cluster_read_json_file(const char *path, sc_cluster *out, sc_diag *d);
/* A preset: "NAME:GxN" (G devices a node, N nodes; G at most the preset's
 * board) for the names of sc_cluster_preset_names, or "cpu:local". */
sc_status sc_cluster_preset(const char *spec, sc_cluster *out, sc_diag *d);
/* --cluster's value: a preset when spec has the form NAME:..., else a
 * file; either may end in @PROFILE (a profile file, read strictly). */
sc_status sc_cluster_load(const char *spec, sc_cluster *out, sc_diag *d);
/* Gives c the figures of profile p (above); p->present must be true. */
void sc_cluster_apply_profile(sc_cluster *c, const sc_profile *p);
/* How many times slower each of `ranks` thread-ranks computes than alone:
 * the profile's measured factor when it has a sync row for that many
 * ranks (profile.h sc_profile_sync: the cores', caches' and memory bus's
 * share, time-slicing included), else ranks / host_cores when they
 * outnumber the cores (each of R ranks gets max(1, cores / R) threads,
 * runtime/dist_train.c, so R > cores ranks of one thread share the cores
 * time-sliced), else 1; 1 for a cluster whose ranks have devices of their
 * own. */
double sc_cluster_core_share(const sc_cluster *c, int64_t ranks);

/* The same stretch when `busy` thread-ranks compute at once on average (a
 * fraction: the others wait for a hand-off or a collective, asleep):
 * linear between the whole counts' stretches, 1 at one rank or fewer. */
double sc_cluster_core_share_busy(const sc_cluster *c, double busy);
/* The seconds each collective or hand-off among `ranks` thread-ranks adds
 * to its communicator's figures: the profile's sync row's call_s for that
 * many ranks, else 0 (and 0 for a cluster whose ranks have devices of
 * their own). */
double sc_cluster_sync_call_s(const sc_cluster *c, int64_t ranks);
/* How many times longer the transfer (copies and reductions) of a
 * collective among `group` of `ranks` thread-ranks takes than the
 * communicator's fit says, when the ranks outnumber the host's cores:
 * the local communicator's copies and reductions are the meeting ranks'
 * own work, time-sliced with the other ranks' compute meanwhile, where
 * the fit timed the group alone. The core share of all the ranks over
 * the group's own (sc_cluster_core_share), at least 1; 1 for the whole
 * group, and for ranks that do not outnumber the cores. */
double sc_cluster_meet_share(const sc_cluster *c, int64_t ranks, int64_t group);
/* The seconds a collective among `ranks` thread-ranks adds for `computed`
 * seconds each rank computed since its previous one (the ranks drift
 * apart, and share a core until the scheduler parts them): the sync
 * row's call_per_compute x computed, at most its call_max_s (when
 * present), else 0, as sc_cluster_sync_call_s. */
double sc_cluster_sync_call_drift(const sc_cluster *c, int64_t ranks, double computed);
/* Whether c's devices are GPUs (not cpu:local, whose device is "cpu"):
 * its plans are made for the CUDA device. */
bool sc_cluster_is_gpu(const sc_cluster *c);
/* The presets' names, NULL-terminated ("a100-80g", "h100-sxm", "h200"). */
extern const char *const sc_cluster_preset_names[];
/* nodes * devices_per_node (both bounded: no overflow). */
int64_t sc_cluster_devices(const sc_cluster *c);

/* ---- placement ---- */

/* sc_placement and sc_placement_compute: ir/placement.h. */

/* Sorts m's axes, stably, into the order that puts the heaviest traffic
 * on the fastest links: pp, dp, fsdp, any other name, tp (major to minor). */
void sc_cluster_order_mesh(sc_mesh *m);
/* Puts m on c: refuses a mesh with more ranks than c has devices, or, over
 * more than one node, a rank count that is not whole nodes; sets
 * m->ranks_per_node to c's devices_per_node (an m that already has another
 * one is refused: --ranks-per-node disagreeing with --cluster). */
sc_status sc_cluster_fit_mesh(const sc_cluster *c, sc_mesh *m, sc_diag *d);

#endif
