"""Write every figure on the results and docs pages that comes from a run, from its record.

    python results/generate.py           # rewrite the generated regions of the pages
    python results/generate.py --check   # exit 1 and name the regions that differ

A page marks a region that this script writes:

    <!-- generated: NAME -->
    ...text written by the block NAME...
    <!-- /generated -->

Each block is a function of the page's module in results/pages/ (one module per page) that
reads the record under results/ (the per-run CSVs and outputs the experiment scripts wrote) or
benchmarks/results/ and returns the region's text. Text outside the regions is prose and
carries no number from a run. `tests/e2e/test_generated_pages.py` runs `--check`'s
comparison, so a page that disagrees with its record fails the tests.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fco_ray.runtime.files import write_file

# each page's module registers its blocks in common.BLOCKS when imported
from results.pages import (  # noqa: F401
    benchmarks, conventions, e1, e1_variants, e2, e5, e5_gpu, e7, gpu, readme, results_page,
)
from results.pages.common import BLOCKS, RESULTS, ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(RESULTS.glob("*.md"))]
REGION = re.compile(r"(<!-- generated: ([\w.-]+) -->\n)(.*?)(<!-- /generated -->)", re.S)


def render(text: str, page: Path) -> str:
    def fill(m: re.Match) -> str:
        name = m[2]
        if name not in BLOCKS:
            raise SystemExit(f"{page.relative_to(ROOT)}: unknown generated block {name!r} "
                             f"(known: {', '.join(sorted(BLOCKS))})")
        return m[1] + BLOCKS[name]() + m[4]
    return REGION.sub(fill, text)


def regions(text: str) -> list[str]:
    return [m[2] for m in REGION.finditer(text)]


def differences(pages: list[Path] | None = None) -> list[str]:
    """`page: block` for every region (of `pages`, default all) whose text differs from what
    its block writes now."""
    out = []
    for page in PAGES if pages is None else pages:
        text = page.read_text()
        new = render(text, page)
        if new != text:
            old_regions = {m[2]: m[3] for m in REGION.finditer(text)}
            new_regions = {m[2]: m[3] for m in REGION.finditer(new)}
            out += [f"{page.relative_to(ROOT)}: {n}" for n in new_regions if new_regions[n] != old_regions.get(n)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a region differs")
    args = ap.parse_args(argv)
    if args.check:
        stale = differences()
        for s in stale:
            print(f"stale: {s} (run: python results/generate.py)")
        return 1 if stale else 0
    for page in PAGES:
        text = page.read_text()
        new = render(text, page)
        if new != text:
            write_file(page, new)
            print(f"wrote {page.relative_to(ROOT)}: {', '.join(regions(new))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


