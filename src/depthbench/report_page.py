"""A sweep's ``report.html``: the very content of its ``report.md``, as one self-contained page.

``depthbench.runs.write_report_section`` assembles ``report.md`` from its sections and then calls
:func:`write_report_page`, so the page never holds a second copy of any table: it is rendered from the markdown by
:func:`markdown_to_html`, a small renderer of exactly the subset the sections emit (``#`` headings, paragraphs,
``-`` lists, pipe tables with an alignment row, ``![alt](file)`` figures on their own line, and inline ``code``,
``**bold**``, ``*emphasis*`` and ``[links](...)``). Figures are read from the sweep folder and inlined as base64
``data:`` URIs (PNG, SVG, JPEG), so the file can be mailed or opened from anywhere; nothing is fetched from a network.
Every table is sortable (click a column header: ascending, then descending; numbers sort as numbers, ``5.1 (5.0-5.2)``
by its leading number, names naturally), scrolls sideways inside its own box on a narrow screen, and the page follows
the reader's light or dark colour scheme. On a desktop screen the page takes the window's width (prose stays at a
reading width; headers wrap), so a table's last columns, where a report puts its conclusion, are in view.

Everything here is plain Python (no torch, no matplotlib).
"""

from __future__ import annotations

import base64
import html
import os
import re

from depthbench import atomic

_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
_IMAGE_LINE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^\s*[-*]\s+(.*)$")
_SEPARATOR = re.compile(r"^\s*\|?(\s*:?-{3,}:?\s*\|)+\s*(:?-{3,}:?\s*)?$")


# ================================================================================================ inline
def _inline(text: str) -> str:
    """Inline markdown to HTML: code spans first (their content is literal), then bold, emphasis and links."""
    out = []
    for part in re.split(r"(`[^`]+`)", text):
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{html.escape(part[1:-1], quote=False)}</code>")
            continue
        t = html.escape(part, quote=False)
        t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
        t = re.sub(r"(?<![\w*])\*(?![\s*])(.+?)(?<![\s*])\*(?![\w*])", r"<em>\1</em>", t)
        t = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", _link, t)
        out.append(t)
    return "".join(out)


def _link(match: re.Match) -> str:
    text, url = match.group(1), html.unescape(match.group(2))
    if re.match(r"^[a-z][a-z0-9+.-]*:", url, re.I) and not url.lower().startswith(("http:", "https:")):
        return text  # no javascript:, data: or file: links
    return f'<a href="{html.escape(url)}">{text}</a>'


def _slug(text: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", re.sub(r"<[^>]+>", "", text).lower()).strip("-") or "section"
    slug, k = base, 2
    while slug in used:
        slug, k = f"{base}-{k}", k + 1
    used.add(slug)
    return slug


# ================================================================================================ blocks
def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


def _table(header: str, separator: str, rows: list[str]) -> str:
    align = []
    for spec in _cells(separator):
        align.append("num" if spec.endswith(":") and not spec.startswith(":") else "")
    heads = _cells(header)

    def cls(k: int) -> str:
        return ' class="num"' if k < len(align) and align[k] else ""

    parts = ['<div class="table-wrap"><table class="sortable"><thead><tr>']
    parts += [f'<th scope="col"{cls(k)} aria-sort="none"><button type="button">{_inline(h)}</button></th>'
              for k, h in enumerate(heads)]
    parts.append("</tr></thead><tbody>")
    for row in rows:
        cells = _cells(row) + [""] * (len(heads) - len(_cells(row)))
        parts.append("<tr>" + "".join(f"<td{cls(k)}>{_inline(c)}</td>" for k, c in enumerate(cells)) + "</tr>")
    parts.append("</tbody></table></div>")
    return "".join(parts)


def _figure(alt: str, name: str, folder: str) -> str:
    """A figure of the sweep folder inlined as a data URI (a note when the file is missing or not an image)."""
    path = os.path.join(folder, name)
    mime = _MIME.get(os.path.splitext(name)[1].lower())
    if mime is None or os.path.isabs(name) or ".." in name.replace("\\", "/").split("/") or not os.path.isfile(path):
        return f'<p class="missing">(figure <code>{html.escape(name)}</code> is not in the sweep folder)</p>'
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    hint = "click or tap the figure to see it at full size"
    caption = (f"{html.escape(alt)} (<code>{html.escape(name)}</code>; {hint})" if alt and alt != name
               else f"<code>{html.escape(name)}</code> ({hint})")
    return (f'<figure><div class="frame"><img src="data:{mime};base64,{data}" alt="{html.escape(alt or name)}" '
            f'title="click to show at full size"></div><figcaption>{caption}</figcaption></figure>')


def markdown_to_html(text: str, folder: str) -> tuple[str, list[tuple[str, str]]]:
    """The body HTML of ``text`` (figures read from ``folder``) and its ``(id, title)`` of every ``##`` heading."""
    lines, out, toc, used = text.splitlines(), [], [], set()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif heading := _HEADING.match(line):
            level, title = len(heading.group(1)), _inline(heading.group(2))
            slug = _slug(title, used)
            out.append(f'<h{level} id="{slug}">{title}</h{level}>')
            if level == 2:
                toc.append((slug, title))
            i += 1
        elif image := _IMAGE_LINE.match(line):
            out.append(_figure(image.group(1), image.group(2), folder))
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(_table(line, lines[i + 1], lines[i + 2:j]))
            i = j
        elif _LIST_ITEM.match(line):
            items = []
            while i < len(lines) and lines[i].strip() and (_LIST_ITEM.match(lines[i]) or lines[i].startswith("  ")):
                item = _LIST_ITEM.match(lines[i])
                if item:
                    items.append(item.group(1))
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            out.append("<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not _starts_block(lines, i):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(out), toc


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(_HEADING.match(line) or _IMAGE_LINE.match(line) or _LIST_ITEM.match(line) or (
        line.lstrip().startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1])))


# ================================================================================================ the page
STYLE = """
:root { color-scheme: light dark; --fg: #1f2328; --bg: #ffffff; --muted: #59636e; --line: #d1d9e0; --head: #f6f8fa;
  --accent: #0969da; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --bg: #0d1117; --muted: #9198a1; --line: #3d444d;
  --head: #151b23; --accent: #4493f8; } }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: var(--bg);
  font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 125rem; margin: 0 auto; padding: 1rem 1.25rem 3rem; }
h1 { font-size: 1.7rem; line-height: 1.25; margin: .5rem 0 1rem; }
h2 { font-size: 1.3rem; margin: 2.2rem 0 .8rem; padding-bottom: .25rem; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.1rem; margin: 1.6rem 0 .6rem; }
p, li { max-width: 52rem; }
a { color: var(--accent); }
code { font: .88em/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--head);
  padding: .05em .3em; border-radius: 4px; overflow-wrap: anywhere; }
nav.toc { font-size: .92rem; border: 1px solid var(--line); border-radius: 8px; padding: .5rem .9rem;
  margin: 0 0 1.2rem; background: var(--head); }
nav.toc ol { margin: .2rem 0; padding-left: 1.3rem; }
figure { margin: 1rem 0 1.4rem; }
figure .frame { overflow-x: auto; -webkit-overflow-scrolling: touch; }
figure img { display: block; max-width: 100%; height: auto; background: #fff; border: 1px solid var(--line);
  border-radius: 6px; cursor: zoom-in; }
figure.zoomed img { max-width: none; cursor: zoom-out; }
figcaption { color: var(--muted); font-size: .85rem; margin-top: .3rem; }
.table-wrap { overflow-x: auto; -webkit-overflow-scrolling: touch; margin: .8rem 0 1.2rem; width: fit-content;
  max-width: 100%; border: 1px solid var(--line); border-radius: 8px; }
table { border-collapse: collapse; font-size: .88rem; }
th, td { padding: .35rem .65rem; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
td { max-width: 28rem; }
tbody tr:last-child td { border-bottom: 0; }
tbody tr:nth-child(even) { background: var(--head); }
.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
thead th { background: var(--head); vertical-align: bottom; }
th button { all: unset; cursor: pointer; font-weight: 600; }
th button:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
th[aria-sort="ascending"] button::after { content: " \\25B2"; font-size: .7em; }
th[aria-sort="descending"] button::after { content: " \\25BC"; font-size: .7em; }
.missing, footer { color: var(--muted); font-size: .88rem; }
footer { margin-top: 3rem; border-top: 1px solid var(--line); padding-top: .6rem; }
@media (max-width: 640px) { body { font-size: 15px; } main { padding: .7rem .75rem 2rem; } h1 { font-size: 1.35rem; }
  h2 { font-size: 1.15rem; } table { font-size: .8rem; } th, td { padding: .3rem .5rem; } }
"""

SORT_SCRIPT = """
"use strict";
// The sort order of a column, from its cells' text: numbers (leading number, k/M/G suffix, U+2212 minus) before
// text, text in natural order ("L2" before "L11"), empty cells last either way; ties keep their order.
function sortKey(text) {
  const t = text.trim().replace(/\\u2212/g, "-").replace(/,/g, "");
  if (t === "") return [2, ""];
  const m = /^([+-]?(?:\\d+\\.?\\d*|\\.\\d+)(?:e[+-]?\\d+)?)\\s*([kMG])?/i.exec(t);
  if (m) return [0, parseFloat(m[1]) * ({k: 1e3, m: 1e6, g: 1e9}[(m[2] || "").toLowerCase()] || 1)];
  return [1, t.toLowerCase()];
}
function compareKeys(a, b) {
  if (a[0] !== b[0]) return a[0] - b[0];
  if (a[0] === 0) return a[1] - b[1];
  return a[1].localeCompare(b[1], undefined, {numeric: true});
}
function sortedOrder(texts, descending) {
  const keys = texts.map(sortKey);
  return texts.map((_, i) => i).sort((i, j) => {
    const ei = keys[i][0] === 2, ej = keys[j][0] === 2;
    if (ei || ej) return ei === ej ? i - j : (ei ? 1 : -1);
    const c = compareKeys(keys[i], keys[j]);
    return (descending ? -c : c) || i - j;
  });
}
function sortTable(table, col, descending) {
  const body = table.tBodies[0], rows = Array.from(body.rows);
  const order = sortedOrder(rows.map(r => (r.cells[col] ? r.cells[col].textContent : "")), descending);
  order.forEach(i => body.appendChild(rows[i]));
  Array.from(table.tHead.rows[0].cells).forEach((th, k) =>
    th.setAttribute("aria-sort", k === col ? (descending ? "descending" : "ascending") : "none"));
}
if (typeof document !== "undefined") {
  document.querySelectorAll("figure img").forEach(img =>
    img.addEventListener("click", () => img.closest("figure").classList.toggle("zoomed")));
  document.querySelectorAll("table.sortable").forEach(table => {
    Array.from(table.tHead.rows[0].cells).forEach((th, col) => {
      const button = th.querySelector("button");
      if (button) button.addEventListener("click",
        () => sortTable(table, col, th.getAttribute("aria-sort") === "ascending"));
    });
  });
}
if (typeof module !== "undefined") module.exports = {sortKey, sortedOrder};
"""


def render_page(text: str, folder: str) -> str:
    """The whole page of the markdown ``text`` (figures read from ``folder``)."""
    body, toc = markdown_to_html(text, folder)
    first = _HEADING.match(next((line for line in text.splitlines() if line.startswith("# ")), "# Sweep report"))
    title = re.sub(r"<[^>]+>", "", _inline(first.group(2))) if first else "Sweep report"
    nav = ""
    if len(toc) > 1:
        nav = ('<nav class="toc" aria-label="Sections"><strong>Sections</strong><ol>'
               + "".join(f'<li><a href="#{slug}">{name}</a></li>' for slug, name in toc) + "</ol></nav>")
    head = body.split("\n", 1)
    if head[0].startswith("<h1"):  # the contents go under the title
        body = head[0] + "\n" + nav + ("\n" + head[1] if len(head) > 1 else "")
    else:
        body = nav + "\n" + body
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n{body}\n"
            "<footer>Written by depthbench from this folder's <code>report.md</code>; figures are inline, nothing is "
            "loaded from elsewhere. Click a column header to sort a table.</footer>\n"
            f"</main>\n<script>{SORT_SCRIPT}</script>\n</body>\n</html>\n")


def write_report_page(path: str, text: str) -> str:
    """Write the page ``path`` (a sweep's ``report.html``, whose folder holds the figures) from the report's
    markdown ``text``; returns ``path``."""
    atomic.write_text(path, render_page(text, os.path.dirname(path)))
    return path
