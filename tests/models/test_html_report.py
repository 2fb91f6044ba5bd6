"""test_html_report.py — `shardc plan --html` pages (tools/plan_html.c,
docs/report.md) in a real browser: headless Chromium (Debian's chromium and
chromium-driver, scripts/install-deps.sh) driven by selenium, with the
network off (a proxy that refuses, every host name unresolvable; the page's
own Content-Security-Policy allows nothing outside it).

Each sample's page is opened from disk (file://) and checked:
  - the browser console logs no SEVERE entry;
  - the DOM has one compute lane per pipeline rank (the mesh's pp size, or
    P of --mesh), a memory bar per stage (inference) or pipeline rank
    (training), one row per collective group the page's data lists (and at
    least one), and with --auto one row per candidate, exactly one chosen;
  - the 1F1B and interleaved steps show bubbles (blocks of kind bubble);
  - hovering a compute block shows a tooltip naming its pipeline rank, piece,
    microbatch and time, a transfer's its bytes (the timeline zoomed until
    the block is 20 px wide); picking a rank highlights
    its pipeline rank's lanes;
  - a screenshot is not blank: its pixels' standard deviation over 8 (of
    255; a blank page is 0) and over 2 % of them not the background;
  - a 1,024-rank plan (pp=4, dp=32, tp=8 on 128 nodes of 8) writes a page
    under 5 MB that still draws P = 4 compute lanes;
  - a model whose file, graph and node names hold "</script>", "<" and
    "&" draws with them as text: no script of theirs runs, the page keeps
    its two script elements, the summary shows the names exactly.
  - `shardc report --html` (tools/report.c) on the MLP trained 3 steps on
    one rank and on dp=2 with --log-json: no console error, one curve per
    run in each of the 4 charts (8), one dot per logged value (24 each
    run), the legend naming both files in each chart, hovering a dot shows
    its file, step and value; the screenshot is not blank.
Before any browser: the hostile page's text has its two script elements
only, the names written escaped, and its JSON reads them back exactly; the
1,024-rank page's size.
--images DIR: also save the screenshots docs/report.md shows into DIR
(`make docs-images`). Environment: SHARDC, SHARDC_SOURCE_DIR. Exit 0 on
success, 77 (skip, the reason printed) when Chromium, its driver or
selenium is missing (after the checks that need no browser; 1 if one of
those failed)."""
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from checks import check, finish

SRC = os.environ.get("SHARDC_SOURCE_DIR") or os.environ.get("SC_SOURCE_DIR") or \
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SHARDC = os.path.abspath(os.environ.get("SHARDC") or os.path.join(SRC, "build", "shardc"))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
NO_BROWSER = None  # why the browser checks cannot run, or None
if not CHROMIUM or not DRIVER:
    NO_BROWSER = ("headless Chromium and its driver are not installed (scripts/install-deps.sh: "
                  "chromium, chromium-driver)")
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
except ImportError:
    NO_BROWSER = NO_BROWSER or "the selenium Python package is not installed (scripts/install-deps.sh)"
try:
    import numpy as np
    from PIL import Image
except ImportError:
    NO_BROWSER = NO_BROWSER or "numpy and Pillow are needed to read the screenshots"


def skip(why):
    """Exits: 1 when a check already failed, else 77 (skipped) saying why."""
    print(f"SKIP: {why}")
    sys.exit(1 if finish() == 1 else 77)

SAMPLES = "samples"  # relative to SRC, where shardc runs
GPT_1P5B = os.path.join(SAMPLES, "gpt_1p5b.onnx")


def plan(args, html):
    # from the repository root, so that the pages name the samples as docs/report.md does
    r = subprocess.run([SHARDC, "plan", *args, "--html", html], capture_output=True, text=True,
                       cwd=SRC)
    if r.returncode != 0:
        sys.exit(f"shardc plan {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return html


def page_data(html):
    text = open(html, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="plan-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000", "--proxy-server=127.0.0.1:9",
              "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-background-networking",
              "--disable-component-update", "--no-first-run"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(executable_path=DRIVER), options=o)
    except Exception as e:  # noqa: BLE001 - the reason is printed
        skip(f"headless Chromium does not start: {e}")


def not_blank(png, what):
    img = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    std = float(img.std())
    background = np.bincount(img.astype(np.int64).ravel()).argmax()
    inked = float((np.abs(img - background) > 16).mean())
    print(f"  {what}: screenshot {img.shape[1]}x{img.shape[0]}, std {std:.1f}, "
          f"{100 * inked:.1f} % drawn")
    check(std > 8 and inked > 0.02, f"{what}: the screenshot is not blank")


def open_page(drv, html, what):
    drv.get("file://" + os.path.abspath(html))
    drv.find_element(By.ID, "summary")
    errors = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
    for e in errors:
        print(f"  console: {e}")
    check(not errors, f"{what}: no console error")


def count(drv, css):
    return len(drv.find_elements(By.CSS_SELECTOR, css))


WIDEST = ("var b = Array.from(document.querySelectorAll(arguments[0])); b.sort(function (x, y) "
          "{ return y.getAttribute('width') - x.getAttribute('width'); }); return b[0] || null;")


def hover_widest(drv, css):
    """Moves the pointer onto the widest block matching css, the timeline
    zoomed (at most 40 times) until it is 20 px wide, so that the pointer
    lands on it and not on a neighbour; the tooltip's text, None when no
    block matches or the tooltip stays hidden. Zoom goes back to 1."""
    block = drv.execute_script(WIDEST, css)
    if block is None:
        return None
    width = float(block.get_attribute("width"))
    zoom = min(40, max(1, int(20 / width) + 1))
    if zoom > 1:
        drv.execute_script("var z = document.getElementById('zoom'); z.value = arguments[0];"
                           "z.dispatchEvent(new Event('change'));", zoom)
        block = drv.execute_script(WIDEST, css)
    drv.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", block)
    ActionChains(drv).move_to_element(block).perform()
    tip = drv.find_element(By.ID, "tip")
    text = tip.text if tip.is_displayed() else None
    if zoom > 1:
        drv.execute_script("var z = document.getElementById('zoom'); z.value = 1;"
                           "z.dispatchEvent(new Event('change'));")
    return text


def check_page(drv, html, what, lanes, bars, candidates=None, bubbles=False, shot=None,
               images=None):
    print(f"{what}: {os.path.getsize(html)} bytes")
    d = page_data(html)
    open_page(drv, html, what)
    check(count(drv, ".sum-row") >= 5, f"{what}: the summary has its rows")
    if lanes:
        n = count(drv, '.lane[data-queue="compute"]')
        check(n == lanes, f"{what}: {n} compute lanes, want {lanes} (one per pipeline rank)")
        check(count(drv, ".lane") > lanes, f"{what}: communication queues have lanes")
    else:
        check(d["timeline"] is None and count(drv, ".lane") == 0,
              f"{what}: no cluster, no timeline")
    n = count(drv, ".mem-bar")
    check(n == bars, f"{what}: {n} memory bars, want {bars}")
    check(count(drv, ".mem-seg") >= bars, f"{what}: every bar has parts")
    rows = len(d["collectives"]["rows"])
    n = count(drv, ".coll-row")
    check(rows > 0 and n == rows, f"{what}: {n} collective rows, want {rows} (> 0)")
    if candidates is not None:
        n = count(drv, ".cand-row")
        check(n == candidates and n > 0, f"{what}: {n} candidate rows, want {candidates}")
        check(count(drv, ".cand-row.chosen") == 1, f"{what}: one chosen candidate")
    if bubbles:
        check(count(drv, '.block[data-kind="bubble"]') > 0, f"{what}: the bubbles are drawn")
    if lanes:
        text = hover_widest(drv, '.lane[data-queue="compute"] .block[data-kind="compute"]')
        print(f"  tooltip: {text!r}")
        lines = text.split("\n") if text else []
        check(len(lines) >= 4 and "pipeline rank" in lines[0] and "compute" in lines[0]
              and lines[1].split(":")[0] in ("prepare", "forward", "backward", "weight gradients",
                                             "compute")
              and "microbatch" in lines[2] and " to " in lines[3],
              f"{what}: hovering a compute block shows its step")
        text = hover_widest(drv, '.block[data-kind="collective"], .block[data-kind="send"]')
        print(f"  tooltip: {text!r}")
        check(text is not None and re.match(r"(collective|send)", text.split("\n")[1])
              and re.search(r"\d+ bytes\)", text) is not None and " to " in text,
              f"{what}: hovering a transfer shows its bytes and time")
        # any rank maps to its pipeline coordinate's lane
        ranks = d["mesh"]["ranks"]
        r = ranks - 1
        pp = d["mesh"]["pp_axis"]
        q = 0
        if pp >= 0:
            ax = d["mesh"]["axes"][pp]
            q = r // ax["stride"] % ax["size"]
        drv.execute_script("var i = document.getElementById('rank-pick'); i.value = arguments[0];"
                           "i.dispatchEvent(new Event('input'));", r)
        picked = {int(e.get_attribute("data-pipe-rank"))
                  for e in drv.find_elements(By.CSS_SELECTOR, ".lane.picked")}
        check(picked == {q}, f"{what}: rank {r} picks pipeline rank {q}'s lanes ({picked})")
        check(f"rank {r}" in drv.find_element(By.ID, "rank-info").text,
              f"{what}: the picked rank is described")
    drv.execute_script("window.scrollTo(0, 0)")
    png = drv.get_screenshot_as_png()
    not_blank(png, what)
    if lanes:  # the timeline itself, as docs/report.md shows it
        section = drv.find_element(By.ID, "timeline")
        drv.execute_script("arguments[0].scrollIntoView({block: 'start'})", section)
        png_tl = section.screenshot_as_png
        not_blank(png_tl, what + " (timeline)")
        tall = Image.open(io.BytesIO(png_tl)).size[1]
        want = section.size["height"]
        check(tall >= 0.95 * want, f"{what}: the timeline's screenshot is whole ({tall} of "
              f"{want} px)")
    if images and shot:
        with open(os.path.join(images, shot + ".png"), "wb") as f:
            f.write(png)
        if lanes:
            with open(os.path.join(images, shot + "-timeline.png"), "wb") as f:
                f.write(png_tl)
    return d


def report_page(drv, tmp):
    """shardc report --html on two real training logs, in the browser."""
    what = "report one rank against dp=2"
    r = np.random.RandomState(5)
    np.save(os.path.join(tmp, "x.npy"), r.randn(40, 64).astype(np.float32))
    np.save(os.path.join(tmp, "lab.npy"), r.randint(0, 10, 40).astype(np.int64))
    logs = []
    for name, extra in (("one-rank", []), ("dp2", ["--mesh", "dp=2"])):
        log = os.path.join(tmp, name + ".jsonl")
        p = subprocess.run([SHARDC, "train", os.path.join(SRC, SAMPLES, "mlp.onnx"), "--dim",
                            "batch=8", "--data", "x=" + os.path.join(tmp, "x.npy"), "--labels",
                            os.path.join(tmp, "lab.npy"), "--steps", "3", "--quiet",
                            "--log-json", log, *extra], capture_output=True, text=True)
        check(p.returncode == 0, f"{what}: train {name}: {p.stderr}")
        logs.append(log)
    html = os.path.join(tmp, "report.html")
    p = subprocess.run([SHARDC, "report", *logs, "--html", html], capture_output=True, text=True)
    check(p.returncode == 0, f"{what}: shardc report: {p.stderr}")
    if p.returncode != 0:
        return
    open_page(drv, html, what)
    check(count(drv, "svg.chart") == 4, f"{what}: 4 charts")
    check(count(drv, "polyline.curve") == 8, f"{what}: a curve per run per chart")
    check(count(drv, 'circle.pt[data-run="0"]') == 12 and count(drv, 'circle.pt[data-run="1"]') == 12,
          f"{what}: a dot per logged value (3 steps x 4 charts per run)")
    names = [e.text for e in drv.find_elements(By.CSS_SELECTOR, ".legend-run")]
    check(names == logs * 4, f"{what}: the legends name the files: {names}")
    dot = drv.find_elements(By.CSS_SELECTOR, '#chart-loss circle.pt[data-run="1"]')[1]
    ActionChains(drv).move_to_element(dot).perform()
    tip = drv.find_element(By.ID, "tip")
    check(tip.is_displayed() and tip.text.startswith(logs[1] + "\nstep 2\nLoss "),
          f"{what}: hovering a dot shows its file, step and value: {tip.text!r}")
    not_blank(drv.get_screenshot_as_png(), what)


def hostile_model(folder):
    """A two-MatMul model whose names try to end the page's script."""
    import numpy as onp
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    evil = "</script><script>window.__pwned = 1</script><b>&amp;"
    w1 = numpy_helper.from_array(onp.ones((8, 8), onp.float32), "w1" + evil)
    w2 = numpy_helper.from_array(onp.ones((8, 8), onp.float32), "w2<")
    n1 = helper.make_node("MatMul", ["x", w1.name], ["h" + evil], name="mm1" + evil)
    n2 = helper.make_node("MatMul", ["h" + evil, "w2<"], ["y"], name="mm2 <&>")
    g = helper.make_graph([n1, n2], "graph" + evil,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                          [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    d = os.path.join(folder, "x<")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "script>&.onnx")  # the path reads ".../x</script>&.onnx"
    onnx.save(m, path)
    return path, "graph" + evil


def main():
    images = None
    if "--images" in sys.argv:
        images = os.path.abspath(sys.argv[sys.argv.index("--images") + 1])
        os.makedirs(images, exist_ok=True)
    if not os.path.exists(SHARDC):
        sys.exit(f"no shardc at {SHARDC} (set SHARDC)")
    with tempfile.TemporaryDirectory() as tmp:
        gpt2 = os.path.join(SAMPLES, "gpt2.onnx")
        h = lambda name: os.path.join(tmp, name + ".html")  # noqa: E731
        pages = [
            (plan([gpt2, "--mesh", "pp=2,tp=2", "--dim", "batch=4", "--microbatches", "2",
                   "--cluster", "h100-sxm:8x1"], h("gpt2-inference")),
             "GPT-2 inference pp=2 x tp=2", dict(lanes=2, bars=2, shot="gpt2-inference")),
            (plan([gpt2, "--train", "--mesh", "pp=2,tp=2", "--dim", "batch=4", "--schedule",
                   "1f1b", "--microbatches", "4", "--cluster", "h100-sxm:8x1"], h("gpt2-train")),
             "GPT-2 training pp=2 x tp=2, 1F1B", dict(lanes=2, bars=2, bubbles=True,
                                                      shot="gpt2-tp2-pp2")),
            (plan([gpt2, "--train", "--mesh", "dp=2", "--dim", "batch=4"], h("gpt2-nocluster")),
             "GPT-2 training dp=2, no cluster", dict(lanes=0, bars=1)),
            (plan([GPT_1P5B, "--no-weights", "--train", "--dim", "batch=8", "--mesh",
                   "pp=4,tp=2", "--schedule", "1f1b", "--microbatches", "8", "--cluster",
                   "a100-80g:8x1"], h("1f1b")),
             "1.5B GPT pp=4 x tp=2, 1F1B", dict(lanes=4, bars=4, bubbles=True, shot="1f1b")),
            (plan([GPT_1P5B, "--no-weights", "--train", "--dim", "batch=8", "--mesh", "pp=4",
                   "--schedule", "interleaved", "--virtual-stages", "2", "--microbatches", "8",
                   "--cluster", "a100-80g:8x1"], h("interleaved")),
             "1.5B GPT pp=4, interleaved V=2", dict(lanes=4, bars=4, bubbles=True,
                                                    shot="interleaved")),
        ]
        auto = plan([GPT_1P5B, "--train", "--auto", "--cluster", "h100-sxm:8x1",
                     "--global-batch", "16", "--precision", "bf16", "--optimizer", "adamw"],
                    h("auto"))
        n_cand = len(page_data(auto)["candidates"] or [])
        ad = page_data(auto)
        chosen = [c for c in ad["candidates"] or [] if c.get("chosen")]
        top = max((sum(b["bytes"]) for b in ad["memory"]["bars"]), default=0)
        check(chosen and top == chosen[0]["peak_bytes"],
              f"plan --auto --html: the largest bar is the chosen plan's exact peak on the GPU "
              f"({top} vs {chosen[0]['peak_bytes'] if chosen else '?'})")
        pages.append((auto, "1.5B GPT plan --auto", dict(lanes=None, bars=None,
                                                         candidates=n_cand, shot="auto")))
        big = plan([GPT_1P5B, "--no-weights", "--train", "--dim", "batch=256", "--mesh",
                    "pp=4,dp=32,tp=8", "--schedule", "1f1b", "--microbatches", "8", "--cluster",
                    "h100-sxm:8x128"], h("1024-ranks"))
        size = os.path.getsize(big)
        print(f"1,024-rank plan: page of {size} bytes")
        check(size < 5 * 1024 * 1024, f"the 1,024-rank page is under 5 MB ({size} bytes)")
        check(page_data(big)["mesh"]["ranks"] == 1024, "the big page's mesh has 1,024 ranks")
        pages.append((big, "1,024 ranks pp=4 x dp=32 x tp=8", dict(lanes=4, bars=4,
                                                                   bubbles=True)))
        evil_path, evil_graph = hostile_model(tmp)
        evil = plan([evil_path, "--mesh", "pp=2", "--cluster", "h100-sxm:8x1"], h("hostile"))
        # the page's text itself, before any browser: the names only inside
        # the JSON, escaped, and read back exactly
        raw = open(evil, encoding="utf-8").read()
        check(raw.count("<script") == 2 and raw.count("</script>") == 2,
              "hostile names: the page's text has its two script elements only")
        check("__pwned" in raw and "<script>window.__pwned" not in raw
              and "\\u003c/script\\u003e" in raw, "hostile names: written escaped")
        summary = dict(page_data(evil)["summary"])
        check(summary.get("model") == f"{evil_path} (graph '{evil_graph}')",
              "hostile names: the JSON reads back the path and graph name exactly")
        if NO_BROWSER:
            skip(NO_BROWSER)
        drv = browser()
        try:
            for html, what, kw in pages:
                d = page_data(html)
                if kw.get("lanes") is None:  # --auto: the chosen plan's own figures
                    kw["lanes"] = len(d["timeline"]["ranks"]) if d["timeline"] else 0
                    kw["bars"] = len(d["memory"]["bars"])
                    pp = d["mesh"]["pp_axis"]
                    want = d["mesh"]["axes"][pp]["size"] if pp >= 0 else 1
                    check(kw["lanes"] == want, f"{what}: one lane per pipeline rank of the "
                          f"chosen mesh ({kw['lanes']}, pp {want})")
                check_page(drv, html, what, images=images, **kw)
            what = "hostile names"
            print(f"{what}: {os.path.getsize(evil)} bytes")
            open_page(drv, evil, what)
            check(drv.execute_script("return window.__pwned") is None,
                  f"{what}: no script of the model's ran")
            check(drv.execute_script("return document.scripts.length") == 2,
                  f"{what}: the page keeps its two script elements")
            cells = {r.find_element(By.TAG_NAME, "th").text: r.find_element(By.TAG_NAME, "td").text
                     for r in drv.find_elements(By.CSS_SELECTOR, ".sum-row")}
            model = drv.execute_script(
                "return document.querySelector('.sum-row td').textContent")
            check(model == f"{evil_path} (graph '{evil_graph}')",
                  f"{what}: the model's path and graph name shown as text ({model!r})")
            check(any("mm1</script>" in v for v in cells.values()),
                  f"{what}: the node names shown as text")
            check(count(drv, '.lane[data-queue="compute"]') == 2, f"{what}: its lanes drawn")
            not_blank(drv.get_screenshot_as_png(), what)
            report_page(drv, tmp)
        finally:
            drv.quit()
    sys.exit(finish())


if __name__ == "__main__":
    main()
