"""Every shipped config for a few rounds through the real CLI on one device (``bench/gpu_check.sh``).

``python -m bench.gpu_configs --results R.jsonl --errors E.log [--accelerator gpu] [--rounds 2]``
runs ``python -m lightning_fl fit --config C --trainer.max_epochs N --trainer.accelerator A
--trainer.devices 1`` for every YAML in ``configs/``, ``configs/robust/``, ``configs/stragglers/`` and
``configs/experiments/`` whose data set is built in (synthetic data, scikit-learn's digits); configs
that need a download are listed as skipped. Runs go ``--jobs`` at a time, each in its own
temporary working directory (its logs and checkpoints stay out of the repository and out of each
other's way). One JSON line per config (pass/fail, seconds, engine, final test accuracy if
printed) is appended to ``--results`` as it finishes; a failure's output tail goes to ``--errors``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("configs", "configs/robust", "configs/stragglers", "configs/experiments", "configs/personalization",
           "configs/user_modules", "configs/privacy")
#: Data modules that need no file: generated, or bundled with an installed package.
BUILT_IN = ("SyntheticDataModule", "PooledSyntheticDataModule", "DigitsDataModule", "SyntheticRegressionDataModule")
#: Data modules whose files ``make data`` puts in ``data/`` (run where that folder travelled with the tree).
FILES = {"ShakespeareDataModule": "shakespeare", "FashionMNISTDataModule": "fashion-mnist"}
_lock = threading.Lock()


def shipped_configs() -> list[tuple[Path, str | None]]:
    """``(config, reason to skip or None)`` for every shipped YAML config."""
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).glob("*.yaml")):
            try:
                data = (yaml.safe_load(path.read_text()) or {}).get("data") or {}
            except yaml.YAMLError as err:
                out.append((path, f"unreadable YAML: {err}"))
                continue
            name = str(data.get("class_path", "")).rsplit(".", 1)[-1] if isinstance(data, dict) else ""
            present = name in FILES and (ROOT / "data" / FILES[name]).is_dir()
            out.append((path, None if name in BUILT_IN or present else f"needs a download ({name or 'no data class'})"))
    return out


def _append(path: Path, text: str) -> None:
    with _lock, path.open("a") as f:
        f.write(text)


def run_one(config: Path, args: argparse.Namespace, deadline: float) -> dict:
    """One config through the CLI; its JSON record (skipped when ``deadline`` has passed)."""
    if time.perf_counter() > deadline:
        return {"step": "configs", "config": str(config.relative_to(ROOT)), "ok": None, "skipped": "no time left"}
    command = [sys.executable, "-m", "lightning_fl", "fit", "--config", str(config),
               "--trainer.max_epochs", str(args.rounds), "--trainer.accelerator", args.accelerator,
               "--trainer.devices", "1", "--trainer.enable_progress_bar", "false", *args.extra.split()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        if (ROOT / "data").is_dir():  # configs name data/ relative to where they run
            os.symlink(ROOT / "data", Path(cwd) / "data")
        try:
            done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=args.timeout,
                                  env=os.environ.copy())
            rc, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as err:
            rc = "timeout"
            output = "".join(s if isinstance(s, str) else (s or b"").decode(errors="replace")
                             for s in (err.stdout, err.stderr))
    seconds = time.perf_counter() - started
    engine = re.findall(r"Client engine: (\w+)", output) or re.findall(r"engine (\w+)\s*$", output, re.M)
    record = {"step": "configs", "config": str(config.relative_to(ROOT)), "ok": rc == 0, "rc": rc,
              "seconds": round(seconds, 1), "engine": engine[-1] if engine else None,
              "accelerator": args.accelerator, "rounds": args.rounds, "extra": args.extra}
    if rc != 0:
        tail = "\n".join(output.strip().splitlines()[-30:])
        record["error"] = (tail.splitlines() or ["(no output)"])[-1][:300]
        _append(Path(args.errors), f"===== {record['config']} (rc {rc}, {seconds:.0f} s)\n{tail}\n\n")
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True)
    parser.add_argument("--errors", required=True)
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per config")
    parser.add_argument("--budget", type=float, default=1e9, help="start no config after this many seconds")
    parser.add_argument("--only", default="", help="comma-separated substrings: run only matching configs")
    parser.add_argument("--extra", default="", help="more CLI arguments for every config (e.g. --trainer.precision 16-mixed)")
    args = parser.parse_args(argv)
    results = Path(args.results)
    todo = []
    for config, skip in shipped_configs():
        if args.only and not any(s in config.name for s in args.only.split(",")):
            continue
        if skip:
            _append(results, json.dumps({"step": "configs", "config": str(config.relative_to(ROOT)), "ok": None,
                                         "skipped": skip}) + "\n")
        else:
            todo.append(config)
    print(f"{len(todo)} configs to run, {args.jobs} at a time", flush=True)
    deadline = time.perf_counter() + args.budget
    with ThreadPoolExecutor(args.jobs) as pool:
        for future in as_completed([pool.submit(run_one, c, args, deadline) for c in todo]):
            record = future.result()
            _append(results, json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
