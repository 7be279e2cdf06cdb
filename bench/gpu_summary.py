"""A Markdown summary of ``bench/gpu_check.sh``'s JSON lines (whatever steps finished)."""

from __future__ import annotations

import json
from pathlib import Path


def _records(path: Path) -> list[dict]:
    out = []
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    return out


def _fmt(value: object, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    return str(value)


def summarize(path: Path) -> str:
    """The summary of the JSON lines file ``path``."""
    records = _records(path)
    lines = ["# GPU check summary", ""]
    env = next((r for r in records if r.get("step") == "env" and "torch" in r), None)
    if env:
        lines += [f"Device: **{env.get('device')}**; torch {env.get('torch')}, Lightning {env.get('lightning')},"
                  f" CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, Python {env.get('python')};"
                  f" TF32 {_fmt(env.get('tf32'))}; GPU memory {_fmt(env.get('gpu_memory_gib'))} GiB", ""]
        failed = {k: v for k, v in (env.get("imports") or {}).items() if str(v).startswith("FAILED")}
        lines += [f"Import failures: {failed}" if failed else "All package imports work.", ""]
    status = [r for r in records if r.get("step") == "status"]
    if status:
        lines += ["| step | exit | seconds | limit |", "|---|---:|---:|---:|"]
        lines += [f"| {r.get('name')} | {r.get('rc')} | {r.get('seconds')} | {r.get('limit')} |" for r in status]
        lines.append("")
    finals = [r for r in records if r.get("event") == "final" and "sec_per_round_after_first" in r]
    if finals:
        lines += ["## J4 through the engine (no Trainer)", "",
                  "| step | engine | precision | rounds | s | s/round (after 1st) | updates/s | test acc | peak MiB |",
                  "|---|---|---|---:|---:|---:|---:|---|---:|"]
        for r in finals:
            lines.append(f"| {r['step']} | {r['engine']} ({_fmt(r.get('formulation'))}) | {r['precision']} |"
                         f" {r['rounds']}/{r['rounds_asked']} | {_fmt(r['seconds'])} | {_fmt(r['sec_per_round_after_first'])} |"
                         f" {_fmt(r['client_updates_per_sec'])} | {_fmt(r.get('test_acc'))} | {_fmt(r.get('peak_gpu_mib'))} |")
        lines.append("")
        by = {r["engine"]: r for r in finals if r.get("precision") == "32-true"}
        start = next((r for r in records if r.get("event") == "start"), {})
        lines.append(f"`engine: auto` on this device: {start.get('auto_engine')} ({start.get('auto_reason')}).")
        if "sequential" in by and "vectorized" in by:
            ratio = by["sequential"]["sec_per_round_after_first"] / by["vectorized"]["sec_per_round_after_first"]
            lines.append(f"Vectorized is {ratio:.1f}x the sequential engine per round (fp32).")
        vec = by.get("vectorized")
        if vec and vec["rounds"] >= 1500:
            lines.append(f"1,500 rounds: {vec['seconds']:.1f} s (target < 75 s:"
                         f" {'MET' if vec['seconds'] < 75 else 'MISSED'}; stretch 15 s), "
                         f"{vec['client_updates_per_sec']:.0f} updates/s (target >= 1000).")
        elif vec:
            est = vec["sec_per_round_after_first"] * 1500 + vec["first_round_seconds"]
            lines.append(f"{vec['rounds']} of {vec['rounds_asked']} rounds ran; 1,500 at this rate: about {est:.0f} s.")
        lines.append("")
    trainer = [r for r in records if r.get("event") == "final" and "seconds_fit" in r]
    if trainer:
        lines += ["## J4 end to end (FederatedLoop under a Trainer)", "",
                  "| precision | engine | rounds | fit s | s/round | updates/s | test acc | finite | scaler skips/updates |",
                  "|---|---|---:|---:|---:|---:|---:|---|---|"]
        lines += [f"| {r['precision']} | {r['engine']} | {r['rounds']}/{r['rounds_asked']} | {_fmt(r['seconds_fit'])} |"
                  f" {_fmt(r['sec_per_round'])} | {_fmt(r['client_updates_per_sec'])} | {_fmt(r.get('test_acc'))} |"
                  f" {r.get('weights_finite')} | {(r.get('grad_scaler') or {}).get('skips', '-')}/"
                  f"{(r.get('grad_scaler') or {}).get('updates', '-')} |" for r in trainer]
        lines.append("")
    speed = [r for r in records if r.get("step") == "speedups" and "variant" in r]
    if speed:
        lines += ["## Speed-ups (vectorized, fp32 unless named)", "", "| variant | rounds | s/round | updates/s | note |",
                  "|---|---:|---:|---:|---|"]
        lines += [f"| {r['variant']} | {_fmt(r.get('rounds'))} | {_fmt(r.get('sec_per_round'))} |"
                  f" {_fmt(r.get('client_updates_per_sec'))} | {r.get('error') or r.get('skipped') or ''} |" for r in speed]
        lines.append("")
    configs = [r for r in records if r.get("step") == "configs" and "config" in r]
    if configs:
        ok = [r for r in configs if r.get("ok")]
        bad = [r for r in configs if r.get("ok") is False]
        skipped = [r for r in configs if r.get("ok") is None]
        lines += ["## Shipped configs through the CLI", "",
                  f"{len(ok)} passed, {len(bad)} failed, {len(skipped)} skipped.", ""]
        lines += [f"- FAILED {r['config']} (rc {r['rc']}, {r['seconds']} s): {r.get('error')}" for r in bad]
        lines += [f"- skipped {r['config']}: {r['skipped']}" for r in skipped]
        lines += [f"- ok {r['config']} ({r['seconds']} s, engine {r.get('engine')})" for r in ok]
        lines.append("")
    errors = [r for r in records if r.get("event") == "error"]
    if errors:
        lines += ["## Errors", ""] + [f"- {r['step']}: {r['error']}" for r in errors] + [""]
    return "\n".join(lines)
