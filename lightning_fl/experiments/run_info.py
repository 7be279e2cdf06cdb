"""Per-run facts of an experiment: wall time, the TensorBoard HParams session, rounds to target.

:func:`run_record` reads one finished run: its total wall time (``finished.json``: the training
process from start to exit), the time of each round as the run logged it (``round/seconds``: local
training and aggregation, not evaluation), the HParams session TensorBoard shows for it with the
latest value of every HParams metric, and :func:`hparams_problems` checks that the session records
the run's seed and data seed. :func:`target_markdown` tabulates ``rounds_to_target.json`` across seeds.
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_fl.experiments.runs import FINISHED, Run
from lightning_fl.experiments.stats import stats
from lightning_fl.simulation.hparams import METRIC_TAGS

__all__ = ["hparams_problems", "read_events", "read_scalars", "run_record", "target_markdown", "timing_markdown",
           "write_records"]

#: What an event reader keeps: every scalar, and one of each other kind (the figures and histograms are skipped).
SCALARS_ONLY = {"scalars": 0, "images": 1, "histograms": 1, "tensors": 1}


def read_scalars(log_dir: Path, tags: Iterable[str]) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` from the TensorBoard event files in ``log_dir`` (absent tags: empty), one read."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance=SCALARS_ONLY)
    events.Reload()
    present = set(events.Tags()["scalars"])
    return {tag: {e.step: e.value for e in events.Scalars(tag)} if tag in present else {} for tag in tags}


def read_events(log_dir: Path) -> tuple[dict[str, float], dict[int, float], dict[str, Any]]:
    """``(latest value per HParams metric tag, {round: round/seconds}, HParams session)`` of a run directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    # Only scalars and the plugin data are needed: skip the figures and histograms.
    events = EventAccumulator(str(log_dir), size_guidance=SCALARS_ONLY)
    events.Reload()
    tags = set(events.Tags()["scalars"])
    latest = {tag: events.Scalars(tag)[-1].value for tag in METRIC_TAGS if tag in tags}
    seconds = {e.step: e.value for e in events.Scalars("round/seconds")} if "round/seconds" in tags else {}
    session: dict[str, Any] = {}
    try:
        content = events.PluginTagToContent("hparams")
    except KeyError:  # no HParams session (a run without the loop's TensorBoard logger)
        content = {}
    if "_hparams_/session_start_info" in content:
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        for key, value in start.session_start_info.hparams.items():
            session[key] = getattr(value, value.WhichOneof("kind"))
    return latest, seconds, session


def hparams_problems(run: Run, session: Mapping[str, Any]) -> list[str]:
    """What the run's HParams session lacks or gets wrong: its seed, its data seed (when the runner set one)."""
    expected = {"model.seed": run.seed, **({"data.seed": run.data_seed} if run.data_seed is not None else {})}
    return [f"{run.name}: HParams {key} is {session.get(key, 'absent')}, expected {value}"
            for key, value in expected.items() if session.get(key) != value]


def run_record(run: Run) -> dict[str, Any]:
    """One row of ``runs.csv``: the run, its wall time, the HParams check and the final HParams metrics."""
    marker = json.loads((run.log_dir / FINISHED).read_text())
    latest, seconds, session = read_events(run.log_dir)
    per_round = list(seconds.values())
    return {
        "run": run.name, "method": run.method, "seed": run.seed, "data_seed": "" if run.data_seed is None else run.data_seed,
        "rounds": max(seconds, default=0), "seconds": marker["seconds"], "resumed": marker.get("resumed", False),
        "round_seconds_mean": sum(per_round) / len(per_round) if per_round else math.nan,
        "train_seconds": sum(per_round),
        "hparams_seed": session.get("model.seed", ""), "hparams_data_seed": session.get("data.seed", ""),
        "hparams_problems": "; ".join(hparams_problems(run, session)),
        **{tag: latest.get(tag, "") for tag in METRIC_TAGS},
    }


def write_records(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write :func:`run_record` rows as CSV."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["run"])
        writer.writeheader()
        writer.writerows(records)


def timing_markdown(records: Iterable[Mapping[str, Any]]) -> str:
    """Per method, mean ± std across seeds: the wall time of a run's process (start to exit: imports,
    data, training, evaluation, files) and of a round's training and aggregation (``round/seconds``)."""
    by_method: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        by_method[record["method"]].append(record)
    lines = ["| Method | Runs | Wall time per run (s) | Training per round (s) |", "| :--- | ---: | ---: | ---: |"]
    for method, rows in by_method.items():
        total, per_round = stats([r["seconds"] for r in rows]), stats([r["round_seconds_mean"] for r in rows])
        lines.append(f"| {method} | {total.n} | {total.mean:.1f} ± {total.std:.1f} | "
                     f"{per_round.mean:.3f} ± {per_round.std:.3f} |")
    return "\n".join(lines) + "\n"


def target_markdown(runs: Iterable[Run]) -> str | None:
    """Rounds, wall time and estimated deployment time to the target across seeds (``None``: no run has one).

    Means are over the seeds that reached the target; ``Reached`` counts them.
    """
    by_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        path = run.log_dir / "rounds_to_target.json"
        if path.exists():
            by_method[run.method].append(json.loads(path.read_text()))
    if not by_method:
        return None
    lines = ["| Method | Target | Reached | Rounds to target | Wall time (s) | Estimated deployment time (s) |",
             "| :--- | ---: | ---: | ---: | ---: | ---: |"]
    for method, results in by_method.items():
        first = results[0]
        target = f"{first['monitor']} {'>=' if first['mode'] == 'max' else '<='} {first['target']}"
        reached = [r for r in results if r["round"] is not None]
        cells = []
        for key, digits in (("round", 1), ("seconds", 1), ("estimated_seconds", 1)):
            values = [r[key] for r in reached if r.get(key) is not None]
            s = stats(values) if values else None
            cells.append("n/a" if s is None else f"{s.mean:.{digits}f} ± {s.std:.{digits}f}")
        lines.append(f"| {method} | {target} | {len(reached)}/{len(results)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
