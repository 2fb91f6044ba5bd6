/* smp_config.h — `--smp-config FILE.json` (SageMaker model parallelism v2
 * keys) turned into shardc's partitioning and training options
 * (smp_config.c lists the keys applied, ignored and refused). */
#ifndef SC_TOOLS_SMP_CONFIG_H
#define SC_TOOLS_SMP_CONFIG_H

#include <stddef.h>

#include "tools/partition_args.h"
#include "tools/train_args.h"

/* Reads file and applies it: pa->mesh (which must be dp=N, the world)
 * becomes the mesh the degrees give, written into mesh[mesh_size]; ta gets
 * the recompute. 0, or 1/2 after printing an error naming the file. */
int sc_smp_config_apply(const char *file, sc_partition_args *pa, sc_train_args *ta,
                        char *mesh, size_t mesh_size);

#endif
