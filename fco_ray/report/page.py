"""One self-contained HTML page per sweep: figures embedded as base64 PNG, inline CSS, no
scripts and no external URLs (it opens from disk, from the MLflow UI's artifact view, or
from any static file server)."""
from __future__ import annotations

import base64
import html
from pathlib import Path

CSS = """
body { font-family: sans-serif; margin: 24px auto; padding: 0 20px; max-width: 1340px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
dl.summary { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
dl.summary dt { font-weight: bold; } dl.summary dd { margin: 0; font-family: monospace; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td.name { text-align: left; font-weight: bold; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figure.curve { flex: 0 1 calc(50% - 6px); } figure.curve img { width: 100%; }
figcaption { font-size: 0.85em; color: #555; }
"""


def _embedded(png: Path, alt: str, caption: str, css_class: str) -> str:
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return (f'<figure class="{css_class}"><img alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>')


def _table(columns: list[str], rows: list[list[str]]) -> str:
    """The best-configuration table; the first column (the algorithm) is a row header."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(f'<tr><td class="name">{html.escape(row[0])}</td>'
                   + "".join(f"<td>{html.escape(v)}</td>" for v in row[1:]) + "</tr>" for row in rows)
    return f'<table id="best-configs"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render_page(title: str, summary: dict[str, str], table: tuple[list[str], list[list[str]]],
                sections: list[tuple[str, str, list[tuple[Path, str, str]]]], notes: list[str]) -> str:
    """`sections`: (heading, css class, [(png, alt, caption)]) in page order."""
    parts = [f"<h1>{html.escape(title)}</h1>", '<dl class="summary">']
    parts += [f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in summary.items()]
    parts.append("</dl><h2>Best configurations</h2>")
    columns, rows = table
    parts.append(_table(columns, rows) if rows else "<p>No algorithm has a finished configuration.</p>")
    for heading, css_class, figures in sections:
        if figures:
            parts.append(f"<h2>{html.escape(heading)}</h2><div class=\"figures\">")
            parts += [_embedded(png, alt, caption, css_class) for png, alt, caption in figures]
            parts.append("</div>")
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
