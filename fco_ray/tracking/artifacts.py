"""A finished run's artifacts: the final model as `model.npz`, and pictures of it."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def trial_artifacts(cfg, model: dict, folder: Path) -> list[Path]:
    """Write a finished run's artifacts to `folder` and return their paths: `model.npz` (the
    final model's blocks, `np.savez`: arrays only, read back with
    `np.load(path, allow_pickle=False)`) and, for the adversarial problem (E6), `attack.png`
    (`render_attack` of the attack `delta`, the image the E6 report shows)."""
    written = [Path(folder) / "model.npz"]
    np.savez(written[0], **model)
    if cfg.problem.name == "adversarial" and "delta" in model:
        from ..problems.adversarial import render_attack  # matplotlib: only for E6

        written.append(render_attack(model["delta"], Path(folder) / "attack.png"))
    return written
