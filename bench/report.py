"""The benchmark's table and its check of the issue-3 targets."""

from __future__ import annotations

import torch

# (job, description, function of the job record -> (value, passed)), from issue 3.
_CPU_TARGETS = [
    ("J1", "vectorized >= 8x faster than naive", lambda r: _ratio(r, "naive", "vectorized"), lambda v: v >= 8),
    ("J1", "vectorized within 1.5x of centralized", lambda r: _ratio(r, "vectorized", "centralized"),
     lambda v: v <= 1.5),
    ("J1", "sequential >= 3x faster than naive", lambda r: _ratio(r, "naive", "sequential"), lambda v: v >= 3),
    ("J2", "vectorized >= 2000 client updates/s",
     lambda r: r["variants"].get("vectorized", {}).get("client_updates_per_sec"), lambda v: v >= 2000),
    ("J2", "vectorized >= 20x faster than naive", lambda r: _ratio(r, "naive", "vectorized"), lambda v: v >= 20),
]
_GPU_TARGETS = [
    ("J3", "vectorized >= 10x faster than sequential (GPU)", lambda r: _ratio(r, "sequential", "vectorized"),
     lambda v: v >= 10),
]


def _ratio(record: dict, slow: str, fast: str) -> float | None:
    variants = record["variants"]
    if slow not in variants or fast not in variants:
        return None
    return variants[slow]["sec_per_round"] / variants[fast]["sec_per_round"]


def check_targets(jobs: dict, device: torch.device) -> list[dict]:
    """Each target of issue 3 that applies to ``device``, with the measured value and verdict."""
    targets = _CPU_TARGETS + (_GPU_TARGETS if device.type == "cuda" else [])
    out = []
    for job, text, measure, passed in targets:
        value = measure(jobs[job]) if job in jobs else None
        out.append({"job": job, "target": text, "value": value, "met": None if value is None else bool(passed(value))})
    if device.type != "cuda":
        out.append({"job": "J3", "target": "vectorized >= 10x faster than sequential (GPU)", "value": None,
                    "met": None, "note": "no GPU on this machine"})
    return out


def format_table(result: dict) -> str:
    """A plain-text table: seconds per round, updates per second, ratios, peak memory."""
    lines = [f"machine: {result['machine']}", ""]
    header = (f"{'job':4} {'variant':12} {'s/round':>9} {'cpu s/rnd':>9} {'upd/s':>9} {'naive/x':>8} "
              f"{'x/central':>9} {'peak MiB':>9}")
    lines += [header, "-" * len(header)]
    for name, record in result["jobs"].items():
        variants = record["variants"]
        cen = variants.get("centralized", {}).get("sec_per_round")
        naive = variants.get("naive", {}).get("sec_per_round")
        for variant, v in variants.items():
            sec = v["sec_per_round"]
            mark = "*" if v["extrapolated"] else " "
            lines.append(
                f"{name:4} {variant:12} {sec:9.4f}{mark}{v['cpu_sec_per_round']:9.4f} "
                f"{v['client_updates_per_sec']:9.1f} "
                f"{(naive / sec if naive else float('nan')):8.1f} {(sec / cen if cen else float('nan')):9.2f} "
                f"{v['peak_mib']:9.1f}")
        extra = [f"{record.get('torch_threads', '?')} torch thread(s), best of {record.get('passes', 1)} pass(es) of"
                 f" {record['rounds_timed']} rounds, load avg {record['load_average']}"]
        if "sequential_vs_vectorized_rel_diff" in record:
            extra.append(f"seq-vs-vec weights rel diff {record['sequential_vs_vectorized_rel_diff']:.1e}")
        if "formulation" in variants.get("vectorized", {}):
            extra.append(f"vectorized formulation: {variants['vectorized']['formulation']}")
        lines.append("     " + "; ".join(extra + record["notes"]))
    lines += ["", "* extrapolated (see notes)", "", "targets:"]
    for t in result["targets"]:
        verdict = "n/a" if t["met"] is None else ("MET" if t["met"] else "MISSED")
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        note = f"  ({t['note']})" if "note" in t else ""
        lines.append(f"  {t['job']} {t['target']:48} {value:>9}  {verdict}{note}")
    lines.append(f"total benchmark time: {result['total_seconds']:.0f} s")
    return "\n".join(lines)
