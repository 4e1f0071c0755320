"""Tests of ``report.html`` (``depthbench.report_page``): the markdown subset the report sections emit becomes the
right HTML (parsed back with the standard library's ``html.parser``), figures are inlined byte for byte, nothing
refers to the network, the table sort orders numbers, ranges and names as a reader expects (the page's own script
run by Node), and the page renders in a real headless Chromium: a click on a header sorts the table in the DOM, every
figure decodes, and at phone width the tables scroll inside their boxes while the page itself does not scroll
sideways, while at 1400 and 1920 px a real report's conclusion columns (the mean loss, the verdict) are in view
without a scrollbar. The Node and Chromium tests skip where those programs are missing (CI installs Chromium with
``.ci/browser.sh``; ``DEPTHBENCH_CHROMIUM`` names another binary).

Run: ``python -m pytest tests/test_report_page.py -q``
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from depthbench import runs
from depthbench.report_page import SORT_SCRIPT, markdown_to_html, render_page


def _png(width: int, height: int) -> bytes:
    """A valid RGB PNG of ``width`` x ``height`` red pixels, written from the PNG specification (chunks with CRCs)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = _png(2, 1)

MARKDOWN = """# Aspect-ratio sweep: test

Intro with `code <b>`, **bold**, *emphasis* and a [link](https://example.org) but no [bad](javascript:alert(1)).

## Setup

- first item with `x`
- second item
  continued here

![held-out loss](plot.png)

![missing figure](nope.png)

## Numbers

| arch | value | note |
|---|---:|---|
| hc | 10 | L11 |
| pre_ln | 9.5 (9.1\u20139.9) | L2 |
| attnres | \u22120.25 | |
| mhc | 78.3k | l3 |
| lns | 2.0M | L2 |
"""


class Page(HTMLParser):
    """What a test needs from a page: tags with attributes, and per table its header and body cells."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.tables: list[dict[str, list]] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self._part = ""

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attrs))
        if tag == "table":
            self.tables.append({"head": [], "rows": [], "attrs": attrs, "aria": []})
        elif tag in ("thead", "tbody"):
            self._part = tag
        elif tag == "tr" and self._part == "tbody":
            self.tables[-1]["rows"].append([])
        elif tag in ("th", "td"):
            self._cell = []
            if tag == "th":
                self.tables[-1]["aria"].append(attrs.get("aria-sort"))

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None:
            text = "".join(self._cell).strip()
            if tag == "th":
                self.tables[-1]["head"].append(text)
            else:
                self.tables[-1]["rows"][-1].append(text)
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def all(self, tag: str) -> list[dict[str, str]]:
        return [attrs for t, attrs in self.tags if t == tag]


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    return page


@pytest.fixture()
def folder(tmp_path) -> Path:
    (tmp_path / "plot.png").write_bytes(PNG)
    return tmp_path


def test_markdown_subset_becomes_the_right_html(folder):
    body, toc = markdown_to_html(MARKDOWN, str(folder))
    page = parse(body)
    assert [t for t, _ in page.tags if t in ("h1", "h2")] == ["h1", "h2", "h2"]
    assert toc == [("setup", "Setup"), ("numbers", "Numbers")]
    assert {"id": "numbers"} in page.all("h2")
    assert "<code>code &lt;b&gt;</code>" in body and "<strong>bold</strong>" in body and "<em>emphasis</em>" in body
    assert page.all("a") == [{"href": "https://example.org"}]  # the javascript: link stays plain text
    assert "<li>second item continued here</li>" in body
    table = page.tables[0]
    assert table["head"] == ["arch", "value", "note"] and len(table["rows"]) == 5
    assert table["rows"][1] == ["pre_ln", "9.5 (9.1\u20139.9)", "L2"]
    assert table["rows"][2] == ["attnres", "\u22120.25", ""]
    assert [c.get("class") for c in page.all("td")[:3]] == [None, "num", None]  # `---:` right-aligns a column


def test_figures_are_inlined_byte_for_byte_and_a_missing_one_is_said(folder):
    body, _ = markdown_to_html(MARKDOWN, str(folder))
    images = parse(body).all("img")
    assert len(images) == 1 and images[0]["alt"] == "held-out loss"
    prefix = "data:image/png;base64,"
    assert images[0]["src"].startswith(prefix) and base64.b64decode(images[0]["src"][len(prefix):]) == PNG
    assert "(figure <code>nope.png</code> is not in the sweep folder)" in body
    outside = folder / "sub"
    outside.mkdir()
    assert "is not in the sweep folder" in markdown_to_html("![x](../plot.png)", str(outside))[0]


def test_page_is_self_contained(folder):
    page_text = render_page(MARKDOWN, str(folder))
    page = parse(page_text)
    assert page_text.startswith("<!doctype html>")
    assert {"name": "viewport", "content": "width=device-width, initial-scale=1"} in page.all("meta")
    assert page.all("link") == [] and all("src" not in s for s in page.all("script"))
    srcs = [a.get("src", "") for a in page.all("img")]
    assert srcs and all(s.startswith("data:") for s in srcs)
    assert "http://" not in page_text.replace("https://example.org", "") and "@import" not in page_text
    assert page.all("title") and "Aspect-ratio sweep: test" in "".join(page.text)
    assert [a["href"] for a in page.all("a")][:2] == ["#setup", "#numbers"]  # the contents


def test_report_section_writes_the_page_next_to_report_md(tmp_path):
    (tmp_path / "plot.png").write_bytes(PNG)
    runs.write_report_section(str(tmp_path), "results", "# Sweep\n\n![plot](plot.png)\n")
    runs.write_report_section(str(tmp_path), "analysis", "## Layer analyses\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    page = parse((tmp_path / "report.html").read_text())
    assert len(page.all("img")) == 1 and len(page.tables) == 1 and "Layer analyses" in "".join(page.text)
    runs.write_report_section(str(tmp_path), "analysis", None)
    assert parse((tmp_path / "report.html").read_text()).tables == []


# ================================================================================================ the sort (Node)
def test_sort_order_of_numbers_ranges_and_names():
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node is not installed")
    cases = {
        "numbers": (["10", "9.5 (9.1\u20139.9)", "\u22120.25", "78.3k", "2.0M", "", "+0.5"], False),
        "descending": (["10", "9.5", "", "-1"], True),
        "names": (["L11", "l3", "L2", "hc", ""], False),
        "ties keep their order": (["b", "a", "b", "a"], False),
        "numbers before text": (["x", "3", "1e-2"], False),
    }
    script = SORT_SCRIPT + f"\nconst cases = {json.dumps(cases)};\n" + (
        "const out = {}; for (const [k, [texts, desc]] of Object.entries(cases)) out[k] = sortedOrder(texts, desc);\n"
        "console.log(JSON.stringify(out));\n")
    proc = subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    order = json.loads(proc.stdout)
    assert order["numbers"] == [2, 6, 1, 0, 3, 4, 5]  # -0.25, +0.5, 9.5, 10, 78.3k, 2.0M, then the empty cell
    assert order["descending"] == [0, 1, 3, 2]  # empty cells stay last when descending too
    assert order["names"] == [3, 2, 1, 0, 4]  # hc, L2, l3, L11 (natural order, case folded), empty
    assert order["ties keep their order"] == [1, 3, 0, 2]
    assert order["numbers before text"] == [2, 1, 0]


# ================================================================================================ a real browser
def chromium() -> str | None:
    """The Chromium binary (``DEPTHBENCH_CHROMIUM`` or the usual names on PATH)."""
    env = os.environ.get("DEPTHBENCH_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def run_browser(url: str, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on ``url`` with a fresh profile, no network services, no sandbox (CI runs as root)."""
    binary = chromium()
    if binary is None:
        pytest.skip("Chromium is not installed (CI: .ci/browser.sh installs it)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", *args, url]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


PROBE = """
<script>
window.addEventListener("load", () => {
  const table = document.querySelectorAll("table.sortable")[0];
  table.tHead.rows[0].cells[1].querySelector("button").click();          // value: ascending
  const up = Array.from(table.tBodies[0].rows, r => r.cells[0].textContent);
  table.tHead.rows[0].cells[1].querySelector("button").click();          // again: descending
  const down = Array.from(table.tBodies[0].rows, r => r.cells[0].textContent);
  const wraps = document.querySelectorAll(".table-wrap"), wrap = wraps[wraps.length - 1];
  document.body.setAttribute("data-probe", JSON.stringify({
    up, down, aria: table.tHead.rows[0].cells[1].getAttribute("aria-sort"),
    images: Array.from(document.images, i => i.naturalWidth),
    page: [document.documentElement.scrollWidth, window.innerWidth],
    table: [wrap.scrollWidth, wrap.clientWidth]}));
});
</script>
"""
WIDE = "\n\n| " + " | ".join(f"column {k}" for k in range(30)) + " |\n|" + "---:|" * 30 + "\n| " + " | ".join(
    str(k) for k in range(30)) + " |\n"


def probe(folder: Path, width: int) -> dict:
    page = render_page(MARKDOWN + WIDE, str(folder)).replace("</body>", PROBE + "</body>")
    path = folder / "probe.html"
    path.write_text(page)
    proc = run_browser(path.as_uri(), f"--window-size={width},900", "--virtual-time-budget=3000", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    attrs = next(a for t, a in parse(proc.stdout).tags if t == "body")
    assert "data-probe" in attrs, proc.stdout[:2000]
    return json.loads(attrs["data-probe"])


@pytest.mark.parametrize("width", [1280, 390])
def test_page_renders_sorts_and_fits_in_a_browser(folder, width):
    result = probe(folder, width)
    assert result["up"] == ["attnres", "pre_ln", "hc", "mhc", "lns"]  # -0.25, 9.5, 10, 78.3k, 2.0M
    assert result["down"] == ["lns", "mhc", "hc", "pre_ln", "attnres"] and result["aria"] == "descending"
    assert result["images"] == [2]  # the inlined PNG decoded (2 pixels wide)
    page_width, viewport = result["page"]
    assert page_width <= viewport  # the page itself never scrolls sideways ...
    scroll, client = result["table"]
    assert scroll > client  # ... a wide table scrolls inside its own box
    if width == 390:  # headless Chromium lays a window out at least 500 px wide: still a phone-sized layout
        assert viewport <= 500


def test_screenshots_at_desktop_and_phone_width(folder, tmp_path):
    page = folder / "report.html"
    page.write_text(render_page(MARKDOWN + WIDE, str(folder)))
    for width in (1920, 1400, 1280, 390):
        shot = tmp_path / f"shot-{width}.png"
        proc = run_browser(page.as_uri(), f"--window-size={width},1200", f"--screenshot={shot}")
        assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (width, 1200)  # IHDR: the screenshot has the window's size


VERDICT_PROBE = """
<script>
window.addEventListener("load", () => {
  const tables = Array.from(document.querySelectorAll(".table-wrap"), wrap => {
    const heads = wrap.querySelectorAll("thead th"), last = heads[heads.length - 1];
    return {last: last.textContent, scroll: wrap.scrollWidth, client: wrap.clientWidth,
            right: last.getBoundingClientRect().right};
  });
  document.body.setAttribute("data-probe", JSON.stringify({tables, page: [document.documentElement.scrollWidth,
                                                                          window.innerWidth]}));
});
</script>
"""


@pytest.mark.parametrize("width", [1400, 1920, 390])
def test_the_conclusion_columns_are_in_view_at_desktop_widths(tmp_path, width):
    """A real report's tables (rendered by depthbench.sweeps.report): at desktop widths the best-LR table (its last
    column the mean loss) and the loss-change table (its last column the verdict) fit in the window without a
    scrollbar of their own; at phone width the page still never scrolls sideways."""
    from depthbench.sweeps.report import render_report
    from depthbench.sweeps.results import result_metrics
    from tests.sweeps.report_rows import DEMO_SHAPES, WORSE, make_rows

    rows = make_rows(DEMO_SHAPES, WORSE)
    text = render_report(rows, result_metrics(rows), None, spec={"name": "demo", "archs": list(WORSE)})
    page = tmp_path / "report.html"
    page.write_text(render_page(text, str(tmp_path)).replace("</body>", VERDICT_PROBE + "</body>"))
    proc = run_browser(page.as_uri(), f"--window-size={width},900", "--virtual-time-budget=3000", "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    attrs = next(a for t, a in parse(proc.stdout).tags if t == "body")
    result = json.loads(attrs["data-probe"])
    page_width, viewport = result["page"]
    assert page_width <= viewport
    if width < 640:
        return
    conclusions = {t["last"]: t for t in result["tables"]
                   if t["last"] in ("mean of the eval splits (eval_loss)", "deeper, against the seed spread")}
    assert len(conclusions) == 2, [t["last"] for t in result["tables"]]
    for name, t in conclusions.items():
        assert t["scroll"] <= t["client"] and t["right"] <= viewport, (name, t)
