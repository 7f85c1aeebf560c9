"""A few HTML builders for one self-contained page: escaped text, tables, embedded images.

No templates, no scripts, no external resources: the CSS is inline and the
images are ``data:`` URIs, so the page opens offline. A table cell may carry
the exact number behind its formatted text (``data-key`` / ``data-value``),
so tests and scripts can read the figures back.

>>> str(Cell("1.0 ms", key="makespan_us", value=1000.0))
'<td data-key="makespan_us" data-value="1000.0">1.0 ms</td>'
>>> table(["a", "b"], [["x", Cell("<1>")]])[20:]
'<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>x</td><td>&lt;1&gt;</td></tr></tbody></table></div>'
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

CSS = """
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 24px auto;
       max-width: 1400px; padding: 0 16px; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 2em; }
h3 { font-size: 1.05em; margin-bottom: 0.3em; }
p.sub { color: #555; margin-top: 0; }
nav a { margin-right: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; font-size: 0.92em; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: right; vertical-align: top; white-space: nowrap; }
td.l, td.name { white-space: normal; }
th { background: #f0f0f0; }
td.l, th.l { text-align: left; }
td.name { text-align: left; font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.9em;
          word-break: break-all; max-width: 60em; }
tr.over td { background: #fde2e2; }
.bad { color: #b00020; font-weight: bold; }
.good { color: #1b7a1b; font-weight: bold; }
img { max-width: 100%; height: auto; border: 1px solid #e4e4e4; }
.note { color: #555; font-size: 0.9em; }
.grid { display: flex; flex-wrap: wrap; gap: 0 2em; }
.grid > div { flex: 0 1 660px; min-width: 0; }
.scroll { overflow-x: auto; max-width: 100%; }
"""


@dataclass(frozen=True)
class Cell:
    """A table cell: text (escaped), an optional machine-readable value and CSS class."""

    text: Any
    key: str | None = None
    value: Any = None
    cls: str | None = None
    header: bool = False

    def __str__(self) -> str:
        tag = "th" if self.header else "td"
        attrs = ""
        if self.cls:
            attrs += f' class="{esc(self.cls)}"'
        if self.key is not None:
            attrs += f' data-key="{esc(self.key)}"'
        if self.value is not None:
            attrs += f' data-value="{esc(_value_text(self.value))}"'
        return f"<{tag}{attrs}>{esc(self.text)}</{tag}>"


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _cell(c: Any) -> str:
    return str(c) if isinstance(c, Cell) else f"<td>{esc(c)}</td>"


def table(headers: Sequence[Any] | None, rows: Iterable[Sequence[Any]], *,
          row_classes: Sequence[str | None] | None = None, cls: str | None = None, attrs: str = "") -> str:
    """An HTML table; cells are `Cell`s or plain values (escaped). ``headers=None``: no header row."""
    head = "" if headers is None else "<thead><tr>" + "".join(
        str(h) if isinstance(h, Cell) else f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>"
    body = []
    for i, row in enumerate(rows):
        rc = row_classes[i] if row_classes is not None and i < len(row_classes) else None
        body.append(f"<tr{f' class={chr(34)}{esc(rc)}{chr(34)}' if rc else ''}>{''.join(_cell(c) for c in row)}</tr>")
    cls_attr = f' class="{esc(cls)}"' if cls else ""
    return f"<div class=\"scroll\"><table{cls_attr}{attrs}>{head}<tbody>{''.join(body)}</tbody></table></div>"


def png_img(png: bytes, alt: str, *, fig_id: str | None = None) -> str:
    """An ``<img>`` holding ``png`` as a base64 ``data:`` URI."""
    data = base64.b64encode(png).decode("ascii")
    ident = f' id="{esc(fig_id)}"' if fig_id else ""
    return f'<img{ident} alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def kv_table(rows: Sequence[tuple[str, Any, str | None, Any]]) -> str:
    """A two-column table of ``(label, shown text, data-key, exact value)``."""
    return table(None, [[Cell(label, cls="l", header=True), Cell(text, key=key, value=value, cls="l")]
                        for label, text, key, value in rows], cls="kv")


def section(ident: str, title: str, *parts: str) -> str:
    return f'<section id="{esc(ident)}">\n<h2>{esc(title)}</h2>\n' + "\n".join(p for p in parts if p) + "\n</section>"


def para(text: str, cls: str | None = None) -> str:
    return f"<p{f' class={chr(34)}{esc(cls)}{chr(34)}' if cls else ''}>{esc(text)}</p>"


def page(title: str, subtitle: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """The whole document; ``sections`` are ``(id, nav label, html)``."""
    nav = " ".join(f'<a href="#{esc(i)}">{esc(label)}</a>' for i, label, _ in sections)
    body = "\n".join(h for _, _, h in sections)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"generator\" content=\"pardnn\">\n<title>{esc(title)}</title>\n<style>{CSS}</style>\n"
            f"</head>\n<body>\n<h1>{esc(title)}</h1>\n<p class=\"sub\">{esc(subtitle)}</p>\n<nav>{nav}</nav>\n"
            f"{body}\n</body>\n</html>\n")
