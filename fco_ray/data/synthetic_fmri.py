"""An fMRI-like stand-in with a known sparse truth (`dataset: synthetic_fmri`).

Voxels lie on a `grid` x `grid` x `grid` volume (d = grid^3). For each of the `conditions`
c = 1 .. k-1 the truth holds one weight map w*_c (condition 0 is the reference, w*_0 = 0):
`blobs` Gaussian bumps of width `smoothness` (voxels) at random centres, with alternating
signs (regions selective for one condition or against it) and amplitudes in [0.5, 1], summed;
only the `support` voxels of largest |value| are kept, every other voxel is exactly 0. So the
map is sparse (`support` of d nonzeros) and smooth (it varies over `smoothness` voxels).

A scan is x = mu_s + e: e is white noise smoothed over space by a Gaussian of width
`noise_smoothness` (correlated neighbouring voxels) and scaled to unit variance per voxel,
mu_s a subject's own offset (the same smoothed noise times `subject_shift`, fixed per
subject: the client heterogeneity). Labels follow the multinomial logistic model
P(y = c | x) = softmax_c(<x, w*_c>) (for k = 2: y ~ Bernoulli(sigmoid(<x, w*_1>))), with the
maps scaled together so that the logits <e, w*_c> have standard deviation `signal` over the
scans (a larger signal: labels nearer a deterministic function of x).

A client holds the scans of `subjects_per_client` subjects (`scans_per_subject` each);
`clients` training clients and `val_clients` validation clients of held-out subjects. All
of it is drawn from `seed` alone. `bayes_accuracy` is the accuracy of the true model on the
validation scans (the ceiling of any classifier there, up to sampling).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DATA_TAG = 0xF3A1


@dataclass
class SyntheticFmri:
    """Per-client (x, y) pairs: x (scans, d) float64, y (scans,) int64 in 0..conditions-1."""

    train: list[tuple[np.ndarray, np.ndarray]]
    val: list[tuple[np.ndarray, np.ndarray]]
    truth: np.ndarray  # (d,) for two conditions, else (d, conditions) with column 0 zero
    bayes_accuracy: float


def smoothed_noise(rng: np.random.Generator, count: int, grid: int, sigma: float) -> np.ndarray:
    """(count, grid^3) Gaussian noise smoothed over the volume with a Gaussian of width
    `sigma` voxels (0: white), scaled to unit variance per voxel (exactly, from the filter)."""
    from scipy.ndimage import gaussian_filter

    e = rng.standard_normal((count, grid, grid, grid))
    if sigma > 0:
        e = gaussian_filter(e, sigma=(0, sigma, sigma, sigma), mode="wrap")
        impulse = np.zeros((grid, grid, grid))
        impulse[0, 0, 0] = 1.0  # periodic filter: every voxel's variance is ||kernel||^2
        e /= np.sqrt(np.sum(gaussian_filter(impulse, sigma, mode="wrap") ** 2))
    return e.reshape(count, -1)


def truth_maps(rng: np.random.Generator, grid: int, maps: int, blobs: int, smoothness: float,
               support: int) -> np.ndarray:
    """(grid^3, maps) sparse smooth weight maps: each the sum of `blobs` signed Gaussian
    bumps, all but its `support` largest-|value| voxels set to 0, scaled to unit l2 norm."""
    axes = np.stack(np.meshgrid(*[np.arange(grid)] * 3, indexing="ij"), axis=-1).reshape(-1, 3)
    out = np.zeros((grid ** 3, maps))
    for m in range(maps):
        field = np.zeros(grid ** 3)
        for j in range(blobs):
            centre = rng.uniform(0.0, grid - 1.0, 3)
            sign = 1.0 if (j + m) % 2 == 0 else -1.0
            amplitude = rng.uniform(0.5, 1.0)
            field += sign * amplitude * np.exp(-np.sum((axes - centre) ** 2, axis=1) / (2 * smoothness ** 2))
        keep = np.argsort(-np.abs(field), kind="stable")[:support]
        out[keep, m] = field[keep]
        out[:, m] /= np.linalg.norm(out[:, m])
    return out


def _labels(rng: np.random.Generator, logits: np.ndarray) -> np.ndarray:
    """One draw of y ~ softmax(logits) per row."""
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return (rng.uniform(size=(len(p), 1)) > np.cumsum(p, axis=1)).sum(axis=1).astype(np.int64)


def make_synthetic_fmri(seed: int, grid: int = 10, conditions: int = 2, support: int = 50,
                        blobs: int = 4, smoothness: float = 1.5, noise_smoothness: float = 1.0,
                        subject_shift: float = 0.5, signal: float = 4.0, clients: int = 20,
                        val_clients: int = 5, subjects_per_client: int = 2,
                        scans_per_subject: int = 20) -> SyntheticFmri:
    """The stand-in of the module docstring, drawn from `seed`."""
    d = grid ** 3
    if not 1 <= support <= d:
        raise ValueError(f"support must be in [1, {d}] (grid^3), got {support}")
    rng = np.random.default_rng([seed, DATA_TAG])
    maps = truth_maps(rng, grid, conditions - 1, blobs, smoothness, support)
    subjects = (clients + val_clients) * subjects_per_client
    offsets = subject_shift * smoothed_noise(rng, subjects, grid, noise_smoothness)
    noise = smoothed_noise(rng, subjects * scans_per_subject, grid, noise_smoothness)
    # scale the maps together so that the logits of the noise have std `signal`
    maps *= signal / np.sqrt(np.mean((noise @ maps) ** 2))
    x = noise + np.repeat(offsets, scans_per_subject, axis=0)
    logits = np.concatenate([np.zeros((len(x), 1)), x @ maps], axis=1)
    y = _labels(rng, logits)
    per_client = subjects_per_client * scans_per_subject
    pairs = [(x[i:i + per_client], y[i:i + per_client]) for i in range(0, len(y), per_client)]
    val_rows = slice(clients * per_client, None)
    bayes = float(np.mean(np.argmax(logits[val_rows], axis=1) == y[val_rows])) if val_clients else float("nan")
    truth = maps[:, 0] if conditions == 2 else np.concatenate([np.zeros((d, 1)), maps], axis=1)
    return SyntheticFmri(train=pairs[:clients], val=pairs[clients:], truth=truth, bayes_accuracy=bayes)
