/* shardc_status.h — the status codes every shardc function returns.
 *
 * Part of the public API (include/shardc.h includes it) and the one
 * definition the library itself uses (ir/base.h includes it). */
#ifndef SHARDC_STATUS_H
#define SHARDC_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sc_status {
  SC_OK = 0,
  SC_ERR_IO,          /* a file could not be opened, mapped or read */
  SC_ERR_PARSE,       /* malformed bytes or text */
  SC_ERR_INVALID,     /* well-formed but wrong: bad shapes, types, graph */
  SC_ERR_UNSUPPORTED, /* valid ONNX that shardc does not handle (yet) */
  SC_ERR_LIMIT,       /* a size or count beyond what shardc accepts */
  SC_ERR_NOMEM,       /* allocation failed */
  SC_ERR_USAGE,       /* wrong use of a command or API */
  SC_STATUS_COUNT
} sc_status;

/* "ok", "io", ... */
const char *sc_status_name(sc_status s);

#ifdef __cplusplus
}
#endif

#endif
