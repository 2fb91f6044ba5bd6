/* json_keys.h — the strict-key check shared by the JSON readers of
 * passes/plan (the plan, plan_json.c; the cluster, cluster.c): a key of an
 * object that is not in the allowed list is an error naming its path
 * ("plan: unknown key 'pipeline.foo'"), so that a misspelt key is never
 * silently ignored. */
#ifndef SC_PASSES_PLAN_JSON_KEYS_H
#define SC_PASSES_PLAN_JSON_KEYS_H

#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "ir/base.h"

/* SC_OK, or SC_ERR_INVALID in *d naming the first key of obj (at path,
 * "" for the top level) not in allowed (NULL-terminated); what is the
 * message's prefix ("plan", "cluster"). */
static inline sc_status sc_json_only_keys(json_t *obj, const char *what, const char *path,
                                          const char *const *allowed, sc_diag *d) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    bool ok = false;
    for (int i = 0; allowed[i] && !ok; i++) ok = strcmp(k, allowed[i]) == 0;
    if (!ok)
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "%s: unknown key '%s%s%s'", what, path,
                         path[0] ? "." : "", k);
  }
  return SC_OK;
}

#endif
