#!/usr/bin/env python3
"""Checks of browser_report.sh (no third-party modules).

page-height LAYOUT: the measured page's height in pixels, for a whole-page screenshot.
measuring-copy PAGE COPY: COPY is PAGE with a script before </body> that records, in
  <pre id="layout">, where Chromium drew each part (page coordinates, CSS pixels), the
  rendered text (innerText) of each failure, and the grid's tables, headers and width.
wide-folder MATRIX RESULTS.jsonl DIR: DIR/results.jsonl and DIR/summary.json laid out as
  MATRIX (scenarios/sweeps/cpu-64.json: 16 grid columns, 32 excluded, 32 invalid), each
  case a copy of a passed record of RESULTS.jsonl, one of them a failure.
png FILE ROWS COLOUR...: a PNG whose first ROWS rows are not one flat colour and show each
  COLOUR ("c62828:verdict-red").
report LAYOUT RESULTS.jsonl SUMMARY.json: the fixture's page as Chromium laid it out.
wide LAYOUT: the 16-column page's grid wraps within the window.
"""
import html.parser
import itertools
import json
import re
import struct
import sys
import zlib

# The first screen of a 1280 x 800 window: the verdict and the first failure are on it.
FIRST_SCREEN_PX = 800

MEASURE = r"""<script>
(function () {
  function box(e) {
    var r = e.getBoundingClientRect();
    return {top: r.top + scrollY, bottom: r.bottom + scrollY, left: r.left, right: r.right};
  }
  var root = document.documentElement;
  var out = {innerWidth: innerWidth, scrollWidth: root.scrollWidth,
             scrollHeight: root.scrollHeight, ids: {}, failures: [],
             gridTables: 0, gridColumns: [], gridRight: 0, axisLabels: []};
  ['verdict', 'failures', 'grid', 'metrics', 'times', 'invalid', 'folded-metrics']
    .forEach(function (id) { var e = document.getElementById(id); if (e) out.ids[id] = box(e); });
  document.querySelectorAll('article.failure').forEach(function (e) {
    var b = box(e);
    b.case = e.getAttribute('data-case');
    b.text = e.innerText;
    out.failures.push(b);
  });
  var grid = document.getElementById('grid');
  if (grid) {
    out.gridTables = grid.querySelectorAll('table').length;
    grid.querySelectorAll('th.column').forEach(function (e) { out.gridColumns.push(e.innerText); });
    grid.querySelectorAll('table, th, td').forEach(function (e) {
      out.gridRight = Math.max(out.gridRight, e.getBoundingClientRect().right);
    });
  }
  document.querySelectorAll('svg').forEach(function (svg) {
    var s = svg.getBoundingClientRect();
    svg.querySelectorAll('text.axis-label').forEach(function (t) {
      var r = t.getBoundingClientRect();
      out.axisLabels.push({svg: svg.getAttribute('class') || svg.id, text: t.textContent,
                           inside: r.width > 0 && r.left >= s.left && r.right <= s.right &&
                                   r.top >= s.top && r.bottom <= s.bottom});
    });
  });
  var pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


class CheckFailed(Exception):
    pass


def fail(message):
    raise CheckFailed(message)


def measuring_copy(page, copy):
    text = open(page, encoding="utf-8").read()
    if "</body>" not in text:
        fail(f"{page}: no </body>")
    open(copy, "w", encoding="utf-8").write(text.replace("</body>", MEASURE + "</body>", 1))


def case_id(assignment):
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, separators=(',', ':'))}"
                    for k, v in assignment.items())


def wide_folder(matrix_path, results, out):
    matrix = json.load(open(matrix_path))
    axes = list(matrix["axes"])
    records = [json.loads(line) for line in open(results) if line.strip()]
    passed = next(r for r in records if r["outcome"] == "passed")
    failed = next(r for r in records if r["outcome"] == "property_failed")
    lines, invalid, excluded = [], [], 0  # the first case that runs fails
    for index, values in enumerate(itertools.product(*(matrix["axes"][a] for a in axes))):
        assignment = dict(zip(axes, values))
        if any(all(assignment[k] == v for k, v in e.items()) for e in matrix.get("exclude", [])):
            excluded += 1
            continue
        if assignment["tp"] == 1 and assignment["sp"]:
            invalid.append({"case": case_id(assignment), "assignment": assignment,
                            "reason": "--sp true: needs --tp > 1 (layout test)"})
            continue
        record = json.loads(json.dumps(passed if lines else failed))
        record.update({"case": case_id(assignment), "index": index, "assignment": assignment,
                       "failure_file": None, "repro": None})
        if record["outcome"] != "passed":
            record["repro"] = f"parity repro wide/failures/{index:04d}.json"
        lines.append(record)
    summary = {"schema": "parity-sweep-summary", "version": 1, "matrix": matrix, "axes": axes,
               "total": len(lines), "ran": len(lines), "not_run": 0,
               "passed": sum(r["outcome"] == "passed" for r in lines),
               "failed": sum(r["outcome"] != "passed" for r in lines), "rank_failures": 0,
               "invalid": invalid, "excluded": excluded, "seconds": 1.0}
    with open(f"{out}/results.jsonl", "w") as f:
        for r in lines:
            f.write(json.dumps(r) + "\n")
    json.dump(summary, open(f"{out}/summary.json", "w"))


def png_pixels(path, max_rows):
    """The first `max_rows` rows (decoding is pure Python: about 3 s per 1000 rows)."""
    data = open(path, "rb").read()
    if len(data) < 8 or data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path}: not a PNG ({len(data)} bytes)")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        fail(f"{path}: unsupported PNG (depth {depth}, colour type {color}, interlace {interlace})")
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(min(height, max_rows)):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def check_png(path, max_rows, *colours):
    """The screenshot's first `max_rows` rows are not one flat colour and show each of
    `colours` ("c62828:verdict-red")."""
    width, height, channels, rows = png_pixels(path, int(max_rows))
    if width == 0 or height == 0:
        fail(f"{path}: empty image {width}x{height}")
    seen = set()
    for row in rows:
        for x in range(0, len(row), channels):
            seen.add(row[x:x + 3])
    if len(seen) < 2:
        fail(f"{path}: one flat colour {seen}")
    for colour in colours:
        hex_, name = colour.split(":", 1)
        rgb = bytes.fromhex(hex_)
        if not any(all(abs(c[i] - rgb[i]) <= 4 for i in range(3)) for c in seen):
            fail(f"{path}: the first {len(rows)} rows show no {name} #{hex_}")
    print(f"browser_checks: {path}: {width}x{height}; its first {len(rows)} rows show "
          f"{', '.join(colours)}")


class Dom(html.parser.HTMLParser):
    """Elements as (tag, attrs, text inside, ancestors)."""

    def __init__(self):
        super().__init__()
        self.stack, self.elements = [], []

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, "attrs": dict(attrs), "text": "", "within": list(self.stack)}
        self.elements.append(element)
        if tag not in ("meta", "br", "img", "input", "link", "hr"):
            self.stack.append(element)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_startendtag(self, tag, attrs):
        self.elements.append({"tag": tag, "attrs": dict(attrs), "text": "", "within": list(self.stack)})

    def handle_data(self, data):
        for e in self.stack:
            e["text"] += data


def classes(e):
    return (e["attrs"].get("class") or "").split()


def inside(e, id_):
    return any(a["attrs"].get("id") == id_ for a in e["within"])


def read_layout(path):
    dom = Dom()
    dom.feed(open(path, encoding="utf-8").read())
    pre = [e for e in dom.elements if e["attrs"].get("id") == "layout"]
    if not pre:
        fail(f"{path}: no <pre id=layout>: the measuring script did not run")
    return dom, json.loads(pre[0]["text"])


class Page:
    """The fixture's page as Chromium laid it out, with the records it shows."""

    def __init__(self, path, results, summary_path):
        self.folder = results.rsplit("/", 1)[0]
        self.dom, self.layout = read_layout(path)
        self.cases = [json.loads(line) for line in open(results) if line.strip()]
        self.summary = json.load(open(summary_path))
        self.failed = [c for c in self.cases if c["outcome"] != "passed"]
        if not self.failed:
            fail(f"{results}: the fixture has no failure to show")
        self.by_id = {e["attrs"]["id"]: e for e in self.dom.elements if "id" in e["attrs"]}
        self.articles = {e["attrs"].get("data-case"): e for e in self.dom.elements
                         if e["tag"] == "article" and "failure" in classes(e)}

    def within(self, ancestor, tag=None):
        return [e for e in self.dom.elements if ancestor in e["within"] and tag in (None, e["tag"])]


def check_order(page):
    """Verdict, then the failures (the first on the first screen), grid, plots, times."""
    ids = page.layout["ids"]
    for id_ in ("verdict", "failures", "grid", "metrics", "times", "invalid"):
        if id_ not in ids:
            fail(f"no element id={id_} on the page")
    order = ["verdict", "failures", "grid", "metrics", "times"]
    tops = [ids[i]["top"] for i in order]
    if tops != sorted(tops) or len(set(tops)) != len(tops):
        fail("the page's order is not verdict, failures, grid, metric plots, times: tops " +
             ", ".join(f"{i} {t:.0f}" for i, t in zip(order, tops)))
    drawn = page.layout["failures"]
    if not drawn:
        fail("no failure drawn")
    first = min(f["top"] for f in drawn)
    last = max(f["bottom"] for f in drawn)
    if ids["verdict"]["top"] >= FIRST_SCREEN_PX or first >= FIRST_SCREEN_PX:
        fail(f"the verdict (top {ids['verdict']['top']:.0f}) and the first failure (top "
             f"{first:.0f}) are not both on the first {FIRST_SCREEN_PX} px")
    if last > ids["grid"]["top"]:
        fail(f"a failure (bottom {last:.0f}) reaches below the grid's top {ids['grid']['top']:.0f}")
    verdict = page.by_id["verdict"]["text"]
    if not verdict.startswith(f"FAILED: {len(page.failed)} of {len(page.cases)} cases failed"):
        fail(f"the verdict says {verdict!r}")
    return (f"verdict {ids['verdict']['top']:.0f} px ({verdict}), first failure {first:.0f} px, "
            f"grid {ids['grid']['top']:.0f} px, plots {ids['metrics']['top']:.0f} px")


def check_grid(page):
    """A cell per case, invalid and excluded combination; a legend entry per kind of cell."""
    cells = [e for e in page.dom.elements if "case-cell" in classes(e)
             and "legend-cell" not in classes(e) and inside(e, "grid")]
    shown = {e["attrs"].get("data-case") for e in cells}
    for c in page.cases:
        if c["case"] not in shown:
            fail(f"the grid has no cell for {c['case']!r}")
    kinds = {k[len("outcome-"):] for e in cells for k in classes(e) if k.startswith("outcome-")}
    counts = {k: sum(f"outcome-{k}" in classes(e) for e in cells) for k in kinds}
    summary = page.summary
    if counts.get("invalid", 0) != len(summary["invalid"]) or \
            counts.get("excluded", 0) != summary["excluded"] or summary["excluded"] == 0:
        fail(f"grid cells {counts}: expected {len(summary['invalid'])} invalid and "
             f"{summary['excluded']} excluded (the fixture excludes some)")
    legend = {e["attrs"].get("data-outcome") for e in page.dom.elements
              if "legend-entry" in classes(e) and inside(e, "grid")}
    if not kinds <= legend:
        fail(f"the grid's legend {sorted(legend)} has no entry for {sorted(kinds - legend)}")
    return f"{counts}; legend {sorted(legend)}"


def check_fold(page):
    """A plot per metric with an error somewhere; the all-zero ones folded into one line."""
    metrics = {}
    for c in page.cases:
        for m in (c.get("report") or {}).get("metrics", []):
            metrics.setdefault(m["metric"], []).append(m["max_rel"])
    zero = {m for m, errors in metrics.items() if all(e == 0 for e in errors)}
    if not zero:
        fail("the fixture has no metric that is 0 in every case: nothing to fold")
    plots = [e for e in page.dom.elements if e["tag"] == "figure" and "metric-plot" in classes(e)]
    plotted = {p["attrs"].get("data-metric") for p in plots}
    if plotted != set(metrics) - zero:
        fail(f"metric plots {sorted(plotted)} != the metrics with an error "
             f"{sorted(set(metrics) - zero)}")
    folded = {e["text"] for e in page.dom.elements if "folded-metric" in classes(e)}
    if folded != zero or "folded-metrics" not in page.layout["ids"]:
        fail(f"the folded line lists {sorted(folded)}, the all-zero metrics are {sorted(zero)}")
    svgs = [e for e in page.dom.elements if e["tag"] == "svg" and inside(e, "metrics")]
    if len(svgs) != len(plotted):
        fail(f"{len(svgs)} <svg> plots for {len(plotted)} metrics")
    return f"{len(plots)} plots; folded into one line: {sorted(zero)}"


def check_axis_labels(page):
    """Each metric plot labels both axes, the time chart its own, drawn inside the chart."""
    labels = page.layout["axisLabels"]
    plots = sum(1 for e in page.dom.elements if e["tag"] == "svg" and "plot" in classes(e))
    for svg, wanted in (("plot", 2 * plots), ("time-chart", 2)):
        mine = [a for a in labels if a["svg"] == svg]
        if len(mine) != wanted or not all(a["inside"] and a["text"].strip() for a in mine):
            fail(f"{svg}: axis labels {mine}, expected {wanted} drawn inside the chart")
    return f"{sorted({a['text'] for a in labels})}"


def check_numbers(page):
    """Cases are numbered by the record's index (0-based, as failures/NNNN-... has it)."""
    indices = {str(c["index"]) for c in page.cases}
    index_of = {c["case"]: str(c["index"]) for c in page.cases}

    def own_text(e):  # without its <title> (the case id, for hovering)
        return e["text"][:len(e["text"]) - sum(len(t["text"]) for t in page.within(e, "title"))]

    # The plots' x axis: a number per case, its <title> naming the case.
    numbered = {}
    for e in page.dom.elements:
        if e["tag"] == "text" and inside(e, "metrics") and re.fullmatch(r"\d+", own_text(e).strip()):
            for t in page.within(e, "title"):
                numbered[t["text"]] = own_text(e).strip()
    wrong = {k: v for k, v in numbered.items() if index_of.get(k) != v}
    if not numbered or wrong:
        fail(f"metric plots: case numbers {wrong or numbered} are not the cases' indices")
    # The time chart: a number per bar.
    numbers = {own_text(e).strip() for e in page.dom.elements if e["tag"] == "text"
               and inside(e, "times") and re.fullmatch(r"\d+", own_text(e).strip())}
    if numbers != indices:
        fail(f"time chart: case numbers {sorted(numbers, key=int)} != the indices "
             f"{sorted(indices, key=int)}")
    for c in page.failed:
        a = page.articles.get(c["case"])
        if a is None:
            fail(f"no failure shown for {c['case']!r}")
        heading = page.within(a, "h3")[0]["text"]
        if f"case {c['index']}:" not in heading:
            fail(f"failure {c['case']!r} is headed {heading!r}, not case {c['index']}")
    return f"{sorted(indices, key=int)}"


def check_failures(page):
    """Each failure shows its property and first differing value (the property's reason),
    labelled so, or its rank failure's cause; and its repro line."""
    drawn = {f["case"]: f["text"] for f in page.layout["failures"]}
    for c in page.failed:
        text = drawn.get(c["case"], "")
        if c["repro"] not in text:
            fail(f"failure {c['case']!r} does not show {c['repro']!r}")
        props = [p for p in (c["report"] or {}).get("properties", []) if p["status"] == "FAIL"]
        if props:
            wanted = f"property\t{props[0]['name']}"
            if wanted not in text or f"first differing value\t{props[0]['reason']}" not in text:
                fail(f"failure {c['case']!r} does not show its property {props[0]['name']} and "
                     f"first differing value {props[0]['reason']!r} in {text!r}")
        else:
            culprit = next(line.strip() for line in c["failure"].splitlines()
                           if line.strip().startswith("rank ") and ") victim" not in line)
            if f"cause\t{culprit}" not in text:
                fail(f"failure {c['case']!r} does not show its cause {culprit!r}")
    return f"{len(page.failed)} with property and first differing value or cause, and repro"


def check_rank_failure_lines(page):
    """A rank failure's text is drawn with its line breaks (innerText keeps them only
    where the page does)."""
    drawn = {f["case"]: f["text"] for f in page.layout["failures"]}
    ranks = [c for c in page.failed if c["outcome"] == "rank_failure"]
    if not ranks:
        fail("the fixture has no rank failure")
    for c in ranks:
        if "\n" not in c["failure"] or c["failure"] not in drawn.get(c["case"], ""):
            fail(f"failure {c['case']!r}: its text is not drawn line by line: "
                 f"{c['failure']!r} not in {drawn.get(c['case'], '')!r}")
    return f"{len(ranks)} rank failures drawn line by line"


def check_scenario_fields(page):
    """Each failure shows its saved (shrunk) scenario as the fields that differ from the
    defaults, with their values as the failure file has them."""
    drawn = {f["case"]: f["text"] for f in page.layout["failures"]}
    shrunk = 0
    for c in page.failed:
        a = page.articles.get(c["case"])
        if a is None:
            fail(f"no failure shown for {c['case']!r}")
        saved = json.load(open(f"{page.folder}/{c['failure_file']}"))
        rows = [e for e in page.within(a, "li") if e["attrs"].get("data-field")]
        if not rows or len(rows) * 2 > len(saved):
            fail(f"failure {c['case']!r}: {len(rows)} scenario fields shown of {len(saved)}")
        for row in rows:
            key = row["attrs"]["data-field"]
            code = page.within(row, "code")[0]["text"]
            value = code[len(key) + 1:]
            default = next(e["text"] for e in page.within(row) if "default" in classes(e))
            default = default[len("(default "):-1]
            if not code.startswith(key + "=") or key not in saved or \
                    value != value_text(saved[key]) or value == default:
                fail(f"failure {c['case']!r}: field {key} shown as {value!r} (default {default!r}), "
                     f"{c['failure_file']} has {saved.get(key)!r}")
        if "seed" in {r["attrs"]["data-field"] for r in rows}:
            fail(f"failure {c['case']!r}: shows seed, which the fixture leaves at its default")
        shrunk += "shrunk scenario" in drawn.get(c["case"], "")
    if shrunk == 0:
        fail("no failure shows a shrunk scenario")
    return f"{len(page.failed)} failures' changed fields ({shrunk} shrunk)"


def value_text(v):
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def check_report(path, results, summary_path):
    """Runs every check of the fixture's page and names each that fails."""
    page = Page(path, results, summary_path)
    failed = []
    for check in (check_order, check_failures, check_rank_failure_lines, check_scenario_fields,
                  check_grid, check_fold, check_axis_labels, check_numbers):
        name = check.__name__[len("check_"):].replace("_", " ")
        try:
            print(f"browser_checks: {name}: ok: {check(page)}")
        except (CheckFailed, LookupError, TypeError, ValueError) as e:
            failed.append(name)
            print(f"browser_checks: {name}: FAILED: {e}", file=sys.stderr)
    if failed:
        fail(f"{path}: {len(failed)} check(s) failed: {', '.join(failed)}")


def page_height(path):
    """The page's height for a whole-page screenshot (at most 12000 px)."""
    print(min(max(read_layout(path)[1]["scrollHeight"], 800), 12000))


def check_wide(path):
    dom, layout = read_layout(path)
    columns = layout["gridColumns"]
    if len(set(columns)) != 16:
        fail(f"the wide page's grid has {len(set(columns))} distinct columns, expected 16")
    if layout["gridTables"] < 2:
        fail(f"the 16-column grid is {layout['gridTables']} table(s): it does not wrap")
    if layout["scrollWidth"] > layout["innerWidth"] or layout["gridRight"] > layout["innerWidth"]:
        fail(f"the page scrolls sideways: page width {layout['scrollWidth']}, grid's right edge "
             f"{layout['gridRight']:.0f}, window {layout['innerWidth']}")
    print(f"browser_checks: 16 columns in {layout['gridTables']} tables, right edge "
          f"{layout['gridRight']:.0f} of {layout['innerWidth']} px")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    try:
        {"measuring-copy": measuring_copy, "wide-folder": wide_folder, "png": check_png,
         "report": check_report, "wide": check_wide, "page-height": page_height}[command](*args)
    except CheckFailed as e:
        print(f"browser_checks: {e}", file=sys.stderr)
        sys.exit(1)
