#!/usr/bin/env python3
"""Checks of browser_report.sh (no third-party modules).

png FILE: a PNG of nonzero size that is not one flat colour and shows the grid's
  pass (#2e7d32) and fail (#c62828) cell colours.
dom FILE RESULTS.jsonl: Chromium's DOM of the page has the grid (one cell per case and
  invalid combination), an <svg> per metric plot, and each failure with its reasons
  and repro command.
"""
import html.parser
import json
import struct
import sys
import zlib


def fail(message):
    print(f"browser_checks: {message}", file=sys.stderr)
    sys.exit(1)


def png_pixels(path):
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
    for y in range(height):
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


def check_png(path):
    width, height, channels, rows = png_pixels(path)
    if width == 0 or height == 0:
        fail(f"{path}: empty image {width}x{height}")
    colours = set()
    for row in rows:
        for x in range(0, len(row), channels):
            colours.add(row[x:x + 3])
    if len(colours) < 2:
        fail(f"{path}: one flat colour {colours}")

    def shows(rgb):
        return any(all(abs(c[i] - rgb[i]) <= 4 for i in range(3)) for c in colours)

    for name, rgb in (("pass green #2e7d32", (46, 125, 50)), ("fail red #c62828", (198, 40, 40))):
        if not shows(rgb):
            fail(f"{path}: the screenshot shows no {name} (grid cells not drawn?)")
    print(f"browser_checks: {path}: {width}x{height}, {len(colours)} colours, grid colours present")


class Dom(html.parser.HTMLParser):
    """Elements as (tag, attrs, text inside, ancestors' ids/classes)."""

    def __init__(self):
        super().__init__()
        self.stack, self.elements = [], []

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, "attrs": dict(attrs), "text": "", "within": [e for e in self.stack]}
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


def check_dom(path, results):
    dom = Dom()
    dom.feed(open(path, encoding="utf-8").read())
    cases = [json.loads(line) for line in open(results) if line.strip()]
    by_id = {e["attrs"]["id"]: e for e in dom.elements if "id" in e["attrs"]}
    for id_ in ("summary", "grid", "metrics", "times", "failures"):
        if id_ not in by_id:
            fail(f"{path}: no element id={id_}")
    cells = [e for e in dom.elements if "case-cell" in classes(e) and "case-legend" not in classes(e)]
    grid_cases = {e["attrs"].get("data-case") for e in cells if inside(e, "grid")}
    for c in cases:
        if c["case"] not in grid_cases:
            fail(f"{path}: the grid has no cell for {c['case']!r}")
    invalid = [e for e in cells if "outcome-invalid" in classes(e)]
    print(f"browser_checks: grid: {len(cells)} cells ({len(invalid)} invalid)")
    plots = [e for e in dom.elements if e["tag"] == "figure" and "metric-plot" in classes(e)]
    metrics = {m["metric"] for c in cases if c.get("report") for m in c["report"]["metrics"]}
    if {p["attrs"].get("data-metric") for p in plots} != metrics:
        fail(f"{path}: metric plots {[p['attrs'].get('data-metric') for p in plots]} != {sorted(metrics)}")
    svgs = [e for e in dom.elements if e["tag"] == "svg" and inside(e, "metrics")]
    if len(svgs) != len(metrics):
        fail(f"{path}: {len(svgs)} <svg> plots for {len(metrics)} metrics")
    failures = {e["attrs"].get("data-case"): e for e in dom.elements
                if e["tag"] == "article" and "failure" in classes(e)}
    failed = [c for c in cases if c["outcome"] != "passed"]
    if not failed:
        fail(f"{results}: the fixture has no failure to show")
    for c in failed:
        article = failures.get(c["case"])
        if article is None:
            fail(f"{path}: no failure shown for {c['case']!r}")
        reasons = [p["name"] + ": " + p["reason"] for p in (c["report"] or {}).get("properties", [])
                   if p["status"] == "FAIL"] or [c["failure"]]
        for r in reasons:
            if r not in article["text"]:
                fail(f"{path}: failure {c['case']!r} does not show its reason {r!r}")
        if c["repro"] not in article["text"]:
            fail(f"{path}: failure {c['case']!r} does not show {c['repro']!r}")
    print(f"browser_checks: {len(plots)} metric plots, {len(failed)} failures with reasons and repro")


if __name__ == "__main__":
    if sys.argv[1] == "png":
        check_png(sys.argv[2])
    else:
        check_dom(sys.argv[2], sys.argv[3])
