/* html_page.c — the frame of shardc's self-contained pages (html_page.h). */
#include "tools/html_page.h"

#include <stdio.h>
#include <stdlib.h>

#include "ir/fileio.h"

/* Before the data: the document head with its Content-Security-Policy and
 * the style every page shares; then the data element's opening tag (its
 * id the caller's). */
static const char FRAME_HEAD[] =
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
    "style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>shardc</title>\n<style>\n"
    "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;"
    "background:#fafafa}\n"
    "header{background:#2d3e50;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}"
    "header p{margin:4px 0 0;opacity:.85}\n"
    "main{padding:8px 24px 40px;max-width:1400px}\n"
    "section{background:#fff;border:1px solid #ddd;border-radius:6px;margin:16px 0;padding:12px "
    "16px}\nh2{font-size:16px;margin:0 0 8px}p.note{color:#555;margin:4px 0 10px}\n"
    "table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #eee;"
    "text-align:left;vertical-align:top}th{color:#444;font-weight:600}\n"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    "table.kv{width:100%}table.kv th{width:190px}tr.chosen td{background:#e6f4ea;font-weight:600}\n"
    "tr.picked td{background:#fff6d5}\n"
    ".scroll{overflow-x:auto;border:1px solid #eee}\n"
    ".legend span{display:inline-block;margin:0 14px 4px 0}.legend i{display:inline-block;"
    "width:12px;height:12px;margin-right:4px;vertical-align:-1px;border:1px solid #0002}\n"
    ".tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:6px 8px;"
    "border-radius:4px;font-size:12px;white-space:pre;z-index:10;max-width:520px}\n"
    "svg text{font-size:11px;fill:#333}svg .blabel{fill:#fff;font-size:10px;pointer-events:none}\n"
    ".lane.picked .lanebg{fill:#fff3c4}.mem-bar.picked .barbg{fill:#fff3c4}\n"
    ".controls{margin:6px 0 10px}.controls label{margin-right:16px}\n"
    "#rank-info{margin-left:8px;color:#333}\n"
    "</style>\n</head>\n<body>\n<header><h1 id=\"title\">shardc</h1>"
    "<p id=\"subtitle\"></p></header>\n<main id=\"page\"><noscript>This page draws its figures "
    "with JavaScript.</noscript></main>\n<div id=\"tip\" class=\"tip\" hidden></div>\n";

/* After the data: the helpers every page's script uses (D the data; el
 * and sv make HTML and SVG elements, text only through textContent;
 * bytes and secs format; section adds a titled box; showTip/hideTip the
 * hover tip; table and row), and the title from D.command and D.model. */
static const char SCRIPT_HEAD[] =
    "(function () {\n'use strict';\n"
    "var D = JSON.parse(document.getElementById(DATA_ID).textContent);\n"
    "var NS = 'http://www.w3.org/2000/svg';\n"
    "var page = document.getElementById('page'), tip = document.getElementById('tip');\n"
    "function el(tag, attrs, text) { var e = document.createElement(tag);\n"
    "  for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "  if (text !== undefined && text !== null) e.textContent = String(text); return e; }\n"
    "function sv(tag, attrs, text) { var e = document.createElementNS(NS, tag);\n"
    "  for (var k in attrs) e.setAttribute(k, attrs[k]);\n"
    "  if (text !== undefined && text !== null) e.textContent = String(text); return e; }\n"
    "function bytes(b) { var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;\n"
    "  while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }\n"
    "  return (i ? b.toFixed(2) : String(Math.round(b))) + ' ' + u[i]; }\n"
    "function secs(s) { if (s >= 1) return s.toFixed(3) + ' s';\n"
    "  if (s >= 1e-3) return (s * 1e3).toFixed(3) + ' ms'; return (s * 1e6).toFixed(3) + ' us'; }\n"
    "function section(id, title, note) { var s = el('section', {id: id});\n"
    "  s.appendChild(el('h2', {}, title)); if (note) s.appendChild(el('p', {'class': 'note'}, note));\n"
    "  page.appendChild(s); return s; }\n"
    "function showTip(ev, text) { tip.textContent = text; tip.hidden = false;\n"
    "  var x = ev.clientX + 14, y = ev.clientY + 14;\n"
    "  if (x + tip.offsetWidth > window.innerWidth) x = ev.clientX - tip.offsetWidth - 8;\n"
    "  if (y + tip.offsetHeight > window.innerHeight) y = ev.clientY - tip.offsetHeight - 8;\n"
    "  tip.style.left = x + 'px'; tip.style.top = y + 'px'; }\n"
    "function hideTip() { tip.hidden = true; }\n"
    "function table(cls, head, rows) { var t = el('table', {'class': cls}), tr = el('tr');\n"
    "  head.forEach(function (h) { tr.appendChild(el('th', {}, h)); }); t.appendChild(tr);\n"
    "  rows.forEach(function (r) { t.appendChild(r); }); return t; }\n"
    "function row(cls, cells) { var tr = el('tr', {'class': cls});\n"
    "  cells.forEach(function (c) { var num = typeof c === 'number';\n"
    "    tr.appendChild(el('td', num ? {'class': 'num'} : {}, c)); }); return tr; }\n"
    "document.title = D.command + ': ' + D.model;\n"
    "document.getElementById('title').textContent = D.command;\n"
    "document.getElementById('subtitle').textContent = D.model;\n";

static const char SCRIPT_TAIL[] = "})();\n</script>\n</body>\n</html>\n";

/* The JSON text s into f, safe inside a <script> element. */
static void put_script_json(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("\\u003c", f); break;
    case '>': fputs("\\u003e", f); break;
    case '&': fputs("\\u0026", f); break;
    default: fputc(*s, f);
    }
  }
}

sc_status sc_html_page_write(const char *path, const char *data_id, const json_t *data,
                             const char *script, sc_diag *d) {
  char *text = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(9));
  if (!text) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_file_commit c;
  if (sc_file_commit_begin(&c, path, d) != SC_OK) {
    free(text);
    return d->status;
  }
  fputs(FRAME_HEAD, c.f);
  fprintf(c.f, "<script type=\"application/json\" id=\"%s\">", data_id);
  put_script_json(c.f, text);
  free(text);
  fprintf(c.f, "</script>\n<script>\nvar DATA_ID = '%s';\n", data_id);
  fputs(SCRIPT_HEAD, c.f);
  fputs(script, c.f);
  fputs(SCRIPT_TAIL, c.f);
  if (ferror(c.f)) {
    sc_file_commit_abort(&c);
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write", path);
  }
  return sc_file_commit_end(&c, d);
}
