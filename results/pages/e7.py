"""results/e7.md: the calibrated region (the same function as `results/e7_calibration.py
--render-only --page`) and the uncalibrated sections (results/e7_page.py)."""
from __future__ import annotations

import json

from results.pages.common import RESULTS, block


def e7_calibration():
    from results import e7_calibration  # noqa: PLC0415

    return e7_calibration


@block("e7_calibrated")
def e7_calibrated() -> str:
    cal = e7_calibration()
    record = json.loads((RESULTS / "e7_statistics.json").read_text())
    lines = [json.loads(s) for s in (RESULTS / "e7_fig2_calibrated.jsonl").read_text().splitlines()]
    return cal.fig2_region(record, lines, "results/e7_fig2_calibrated.jsonl") + "\n"


def e7_page():
    from results import e7_page  # noqa: PLC0415

    return e7_page


for _name, _fn in (("e7.uncalibrated_10k", "e7_10k_table"), ("e7.uncalibrated_10k_claims", "e7_10k_claims"),
                   ("e7.uncalibrated_10k_earlier", "e7_10k_earlier"), ("e7.uncalibrated_300", "e7_300_table"),
                   ("e7.uncalibrated_300_claims", "e7_300_claims"), ("e7.memory", "e7_memory")):
    block(_name)(lambda fn=_fn: getattr(e7_page(), fn)())
