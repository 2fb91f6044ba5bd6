/* json_keys.h — the strict checks shared by the JSON readers of
 * passes/plan (the plan, plan_json.c; the cluster, cluster.c; the
 * calibration profile, profile.c): a key of an object that is not in the
 * allowed list is an error naming its path ("plan: unknown key
 * 'pipeline.foo'"), so that a misspelt key is never silently ignored; and
 * typed getters (a positive finite number, a whole count in range, an
 * object, a short name) whose errors name the key's path ("cluster:
 * 'gpu.memory_bytes' must be positive and finite"). what is the message's
 * prefix ("plan", "cluster", "profile"). */
#ifndef SC_PASSES_PLAN_JSON_KEYS_H
#define SC_PASSES_PLAN_JSON_KEYS_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
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

/* what: 'path' msg, with status st. */
static inline sc_status sc_json_bad(sc_diag *d, sc_status st, const char *what, const char *path,
                                    const char *msg) {
  return sc_diag_set(d, st, NULL, NULL, "%s: '%s' %s", what, path, msg);
}

/* path.key (key alone at the top level, path ""). */
static inline void sc_json_join(char *buf, size_t n, const char *path, const char *key) {
  snprintf(buf, n, "%s%s%s", path, path[0] ? "." : "", key);
}

/* A positive finite number at obj.key; *out untouched when absent and not
 * required. */
static inline sc_status sc_json_get_num(json_t *obj, const char *what, const char *path,
                                        const char *key, bool required, double *out,
                                        sc_diag *d) {
  char p[128];
  sc_json_join(p, sizeof p, path, key);
  json_t *v = json_object_get(obj, key);
  if (!v) return required ? sc_json_bad(d, SC_ERR_INVALID, what, p, "is missing") : SC_OK;
  if (!json_is_number(v)) return sc_json_bad(d, SC_ERR_PARSE, what, p, "must be a number");
  double x = json_number_value(v);
  if (!isfinite(x) || x <= 0)
    return sc_json_bad(d, SC_ERR_INVALID, what, p, "must be positive and finite");
  *out = x;
  return SC_OK;
}

/* A whole number in 1..hi (written as an integer or as 8e10). */
static inline sc_status sc_json_get_count(json_t *obj, const char *what, const char *path,
                                          const char *key, bool required, int64_t hi,
                                          int64_t *out, sc_diag *d) {
  char p[128];
  sc_json_join(p, sizeof p, path, key);
  double x = 0;
  json_t *v = json_object_get(obj, key);
  if (v && json_is_integer(v)) {
    json_int_t i = json_integer_value(v);
    if (i < 1 || i > hi)
      return sc_json_bad(d, SC_ERR_INVALID, what, p, "must be a positive count in range");
    *out = i;
    return SC_OK;
  }
  sc_status st = sc_json_get_num(obj, what, path, key, required, &x, d);
  if (st != SC_OK || !v) return st;
  if (x != floor(x) || x > (double)hi)
    return sc_json_bad(d, SC_ERR_INVALID, what, p, "must be a whole count in range");
  *out = (int64_t)x;
  return SC_OK;
}

/* An object at obj.key (*out NULL when absent and not required). */
static inline sc_status sc_json_get_obj(json_t *obj, const char *what, const char *path,
                                        const char *key, bool required, json_t **out,
                                        sc_diag *d) {
  char p[128];
  sc_json_join(p, sizeof p, path, key);
  *out = json_object_get(obj, key);
  if (!*out) return required ? sc_json_bad(d, SC_ERR_INVALID, what, p, "is missing") : SC_OK;
  if (!json_is_object(*out)) return sc_json_bad(d, SC_ERR_PARSE, what, p, "must be an object");
  return SC_OK;
}

/* A string of 1 to cap-1 bytes without NUL at obj.key, copied into out
 * (untouched when absent and not required). */
static inline sc_status sc_json_get_name(json_t *obj, const char *what, const char *path,
                                         const char *key, bool required, char *out, size_t cap,
                                         sc_diag *d) {
  char p[128];
  sc_json_join(p, sizeof p, path, key);
  json_t *v = json_object_get(obj, key);
  if (!v) return required ? sc_json_bad(d, SC_ERR_INVALID, what, p, "is missing") : SC_OK;
  if (!json_is_string(v)) return sc_json_bad(d, SC_ERR_PARSE, what, p, "must be a string");
  const char *s = json_string_value(v);
  size_t n = strlen(s);
  if (n == 0 || n >= cap || n != json_string_length(v))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "%s: '%s' must be 1 to %zu bytes, without NUL",
                       what, p, cap - 1);
  memcpy(out, s, n + 1);
  return SC_OK;
}

#endif
