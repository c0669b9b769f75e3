"""docs/gpu.md: GPU timings from benchmarks/results/gpu_*.json (benchmarks/gpu.py)."""
from __future__ import annotations

import json


from results.pages.benchmarks import BENCH
from results.pages.common import block, para


#: (label, problem, G, the issue's target per configuration-round in ms or None)
GPU_WORK = [("E5 l1, FeDualEx, K = 10, 100 clients", "bilinear_l1", 1, None),
            ("", "bilinear_l1", 35, None),
            ("", "bilinear_l1", 350, 0.08),
            ("E1, FedDualAvg, 10 of 64 clients, K = 10", "lasso", 1, 0.3),
            ("", "lasso", 35, None),
            ("", "lasso", 504, 0.003),
            ("E5 nuclear, FeDualEx, K = 10", "bilinear_nuclear", 1, None),
            ("", "bilinear_nuclear", 35, 5.0)]


def gpu_records() -> tuple[dict, list[dict]]:
    """The baseline record (gpu_h200.json: each round returned to the host) and the records of
    the compiled rounds on a GPU (gpu_compiled_*.json, copied from a device session's
    OUT/bench/gpu.json), oldest first."""
    base = json.loads((BENCH / "gpu_h200.json").read_text())
    compiled = [json.loads(p.read_text()) for p in sorted(BENCH.glob("gpu_compiled_*.json"))]
    return base, sorted(compiled, key=lambda r: r["environment"]["started_utc"])


def gpu_time(record: dict | None, device: str, problem: str, g: int) -> float | None:
    """A record's minimum ms per configuration-round (the default nuclear route), or None."""
    for r in (record or {}).get("timings", []):
        if (r.get("device") == device and r.get("problem") == problem and r.get("G") == g
                and "route" not in r and "per_config_round_min_ms" in r):
            return r["per_config_round_min_ms"]
    return None


def ms_text(ms: float | None, missing: str = "-") -> str:
    if ms is None:
        return missing
    return f"{ms * 1e3:.3g} us" if ms < 0.1 else f"{ms:,.3g} ms" if ms < 1000 else f"{ms:,.0f} ms"


@block("gpu.measured")
def gpu_measured() -> str:
    base, compiled = gpu_records()
    last = compiled[-1] if compiled else None
    env = base["environment"]
    head = ("| work | G | compiled rounds (GPU) | target (issue 43) | rounds returning to the host (GPU) "
            "| CPU engine |\n|---|---|---|---|---|---|\n")
    lines = []
    for label, problem, g, target in GPU_WORK:
        now = gpu_time(last, "cuda", problem, g)
        verdict = "-" if target is None else f"<= {ms_text(target)}" + (
            "" if now is None else (": met" if now <= target else ": not met"))
        lines.append(f"| {label} | {g} | {ms_text(now, 'not measured yet')} | {verdict} | "
                     f"{ms_text(gpu_time(base, 'cuda', problem, g))} | {ms_text(gpu_time(base, 'cpu', problem, g))} |")
    where = (f"Compiled rounds: {last['environment'].get('gpu', '?')}, {last['environment']['started_utc']} UTC, "
             f"JAX {last['environment'].get('jax')}, `python3 {' '.join(last['environment']['argv'])}`."
             if last else "Compiled rounds: not measured on a GPU yet (no benchmarks/results/gpu_compiled_*.json).")
    note = (f"{where} Rounds returning to the host, and the CPU engine beside them: "
            f"{env.get('gpu', '?')}, {env['started_utc']} UTC, JAX {env.get('jax')}, "
            f"`python3 {' '.join(env['argv'])}` (benchmarks/results/gpu_h200.json). Per configuration-round: "
            "the minimum over the timed rounds of a round's wall time / G.")
    return head + "\n".join(lines) + "\n\n" + para(note)
