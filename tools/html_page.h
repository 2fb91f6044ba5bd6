/* html_page.h — the frame of shardc's self-contained HTML pages (`plan
 * --html`'s plan_html.h, `report --html`'s report.c; docs/report.md).
 *
 * A page is: a head with a Content-Security-Policy that allows inline
 * style and script only (nothing is fetched), the style every page shares,
 * a header (title D.command, subtitle D.model), the page's data as JSON in
 * <script type="application/json" id=DATA_ID> with '<', '>' and '&'
 * written as \u escapes (no string can close the element), then one
 * inline script: the shared helpers (el and sv make HTML and SVG elements
 * and set text only with textContent, never as markup; bytes and secs
 * format; section adds a titled box to #page; showTip/hideTip the hover
 * tip #tip; table and row) followed by the caller's script, which draws
 * from D, the parsed data.
 *
 * Invariants: data is a JSON object with the strings "command" and
 * "model"; every untrusted string goes into data only; the caller's script
 * is a fixed string of the program's. No globals. */
#ifndef SC_TOOLS_HTML_PAGE_H
#define SC_TOOLS_HTML_PAGE_H

#include <jansson.h>

#include "ir/base.h"

/* Writes the page to path (replaced whole: written aside, then renamed).
 * data_id names the data element ("plan-data", "report-data"); data stays
 * the caller's. Errors: SC_ERR_IO naming path, SC_ERR_NOMEM. */
sc_status sc_html_page_write(const char *path, const char *data_id, const json_t *data,
                             const char *script, sc_diag *d);

#endif
