"""Benchmark job J4 on a GPU, step by step, for ``bench/gpu_check.sh`` (issue 24).

Every step appends JSON lines to ``--results`` as it goes (progress every ``--progress`` rounds, then
a final record), so a step stopped by its time limit still leaves what it measured. Each step also
stops by itself once ``--budget`` seconds have passed and reports the rounds it did.

Steps (``python -m bench.gpu_j4 STEP ...``):

* ``env``: versions, the device, TF32 flags, which of the package's optional imports work.
* ``harness``: J4 through a client engine plus FedAvg without a Trainer (as ``bench.run`` times
  it): rounds, seconds, client updates per second, test accuracy at ``--eval-at`` rounds, peak memory,
  what ``engine: auto`` picks on this device.
* ``trainer``: J4 end to end, ``FederatedLoop`` under a Lightning ``Trainer`` at ``--precision``
  (``32-true``, ``16-mixed``, ``bf16-mixed``): wall time, rounds, final test accuracy.
* ``speedups``: the vectorized engine in fp32, then with ``cudnn.benchmark``, with TF32 matmuls and
  convolutions, and with ``torch.compile`` on the cohort forward (compile time reported apart),
  ``--rounds`` each.
* ``summary``: a Markdown table of everything in ``--results`` (written to ``--out``).

Runs on a CPU too (``--users 20 --cohort 4`` shrinks the federation) to check the script itself.
"""

from __future__ import annotations

import time

_STARTED = time.time()  # before torch's import: the step's time limit (GPU_CHECK_STEP_LIMIT) counts from here

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

if __package__ in (None, ""):  # `python bench/gpu_j4.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bench.jobs import pfl_job
from bench.variants import EngineRunner
from lightning_fl.engines import LocalTrainingPlan
from lightning_fl.engines.selection import choose_engine
from lightning_fl.simulation.sampling import ClientSampler


class Results:
    """JSON lines appended (and flushed) as they are measured, echoed to stdout."""

    def __init__(self, path: str, step: str) -> None:
        self.path, self.step = Path(path), step
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, **record: object) -> None:
        line = json.dumps({"step": self.step, "time": time.strftime("%H:%M:%S"), **record}, default=str)
        with self.path.open("a") as f:
            f.write(line + "\n")
        print(line, flush=True)


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _card(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or 'cpu'})"


@torch.no_grad()
def test_accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2000) -> float:
    """Pooled accuracy of ``model`` (eval mode, fp32) on ``x, y``."""
    was_training = model.training
    model.eval()
    correct = sum(int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum()) for i in range(0, len(y), batch))
    model.train(was_training)
    return correct / max(len(y), 1)


def _job(args: argparse.Namespace):  # noqa: ANN202 - a bench.jobs.Job
    job = pfl_job(num_users=args.users)
    job.clients_per_round = args.cohort
    return job


def step_env(args: argparse.Namespace, out: Results) -> None:
    import pytorch_lightning as pl

    device = _device()
    record = {"python": platform.python_version(), "torch": torch.__version__, "lightning": pl.__version__,
              "cuda_available": torch.cuda.is_available(), "device": _card(device),
              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
              "cpu_threads": torch.get_num_threads(), "float32_matmul_precision": torch.get_float32_matmul_precision()}
    try:
        record["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    except RuntimeError as err:  # torch's newer fp32_precision API in use
        record["tf32"] = str(err)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        record["gpu_memory_gib"] = {"free": round(free / 2**30, 1), "total": round(total / 2**30, 1)}
    imports = {}
    for name in ("lightning_fl", "lightning_fl.callbacks", "lightning_fl.datamodules", "lightning_fl.apps.cli",
                 "jsonargparse", "docstring_parser", "typeshed_client", "sklearn", "tensorboard", "matplotlib"):
        try:
            module = __import__(name, fromlist=["_"])
            imports[name] = getattr(module, "__version__", None) or getattr(module, "__file__", "ok")
        except Exception as err:  # noqa: BLE001 - report every import problem, go on
            imports[name] = f"FAILED {type(err).__name__}: {err}"
    record["imports"] = imports
    out.emit(**record)


def _workload(args: argparse.Namespace) -> tuple:  # (torch.device, bench.jobs.Job, FederatedData, ClientSampler)
    """The device, J4, its data on the device and the uniform cohort sampler (seed 0); torch seeded."""
    device = _device()
    job = _job(args)
    data = job.make_data().to(device)
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    torch.manual_seed(0)
    return device, job, data, sampler


def step_harness(args: argparse.Namespace, out: Results) -> None:
    device, job, data, sampler = _workload(args)
    runner = EngineRunner(job, data, device, args.engine, args.precision)
    plan = LocalTrainingPlan(job.optimizer, 1, job.batch_size, 0, job.lr, args.precision)
    auto, reason = choose_engine(plan, runner.model, device)
    formulation = getattr(getattr(runner.engine, "forward", None), "kind", None)
    base = {"engine": args.engine, "precision": args.precision, "device": _card(device), "data": job.data_source,
            "users": data.num_clients, "cohort": job.clients_per_round, "formulation": formulation}
    out.emit(event="start", auto_engine=auto, auto_reason=reason, **base)
    eval_at = {int(r) for r in args.eval_at.split(",") if r}
    accuracy, started = {}, time.perf_counter()
    first = None
    paused = 0.0  # seconds spent evaluating, not counted as training time
    done = 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for t in range(args.rounds):
        runner.round(t, sampler.sample(t))
        done = t + 1
        if t == 0:
            _sync(device)
            first = time.perf_counter() - started
        if done in eval_at or done % args.progress == 0:
            _sync(device)
            now = time.perf_counter()
            trained = now - started - paused
            if done in eval_at:
                accuracy[done] = test_accuracy(runner.model, data.x_test, data.y_test)
                paused += time.perf_counter() - now
            out.emit(event="progress", rounds=done, train_seconds=round(trained, 3), **(
                {"test_acc": accuracy[done]} if done in accuracy else {}))
        if time.perf_counter() - started - paused > args.budget or time.time() > args.deadline:
            break
    _sync(device)
    seconds = time.perf_counter() - started - paused
    if done not in accuracy:
        accuracy[done] = test_accuracy(runner.model, data.x_test, data.y_test)
    steady = (seconds - first) / (done - 1) if done > 1 else seconds
    updates = done * job.clients_per_round
    out.emit(event="final", rounds=done, rounds_asked=args.rounds, seconds=round(seconds, 3),
             first_round_seconds=round(first or 0.0, 3), sec_per_round_after_first=round(steady, 5),
             client_updates_per_sec=round(updates / seconds, 1), steady_updates_per_sec=round(job.clients_per_round / steady, 1),
             test_acc=accuracy, weights_finite=bool(torch.isfinite(runner.weights()).all()),
             peak_gpu_mib=round(torch.cuda.max_memory_allocated(device) / 2**20) if device.type == "cuda" else None,
             **base)


def step_trainer(args: argparse.Namespace, out: Results) -> None:
    import pytorch_lightning as pl

    from bench.cifar_like import CifarLikeDataModule
    from lightning_fl.callbacks.fedavg import FedAvg
    from lightning_fl.models import PflCNN
    from lightning_fl.simulation.loop import FederatedLoop

    class Budget(pl.Callback):
        def __init__(self) -> None:
            self.started = time.perf_counter()

        def on_train_epoch_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
            if time.perf_counter() - self.started > args.budget or time.time() > args.deadline:
                trainer.should_stop = True

    device = _device()
    scaler = _count_scaler_skips()
    torch.manual_seed(0)
    loop = FederatedLoop(client=PflCNN(), optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
                         clients_per_round=args.cohort, local_epochs=1, batch_size=10, engine=args.engine, seed=0)
    datamodule = CifarLikeDataModule(num_users=args.users)
    base = {"precision": args.precision, "engine_asked": args.engine, "device": _card(device)}
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(accelerator=device.type, devices=1, precision=args.precision, max_epochs=args.rounds,
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0,
                             check_val_every_n_epoch=args.rounds + 1, default_root_dir=root,
                             callbacks=[FedAvg(), Budget()])
        started = time.perf_counter()
        trainer.fit(loop, datamodule=datamodule)
        _sync(device)
        seconds = time.perf_counter() - started
    evaluation = loop.last_evaluation
    acc = float(evaluation.correct.sum() / evaluation.total.sum()) if evaluation is not None else None
    done = loop.rounds_completed
    out.emit(event="final", rounds=done, rounds_asked=args.rounds, seconds_fit=round(seconds, 3),
             sec_per_round=round(seconds / max(done, 1), 5), client_updates_per_sec=round(done * args.cohort / seconds, 1),
             test_acc=acc, engine=loop.engine.name, data=datamodule.source, grad_scaler=scaler,
             weights_finite=bool(all(torch.isfinite(p).all() for p in loop.model.parameters())), **base)


def _count_scaler_skips() -> dict[str, int]:
    """Count ``GradScaler.update`` calls and those that lowered the scale (a step skipped for inf/NaN).

    Under ``16-mixed`` the vectorized engine steps a chunk of clients with one scaler, so an overflow
    in any client's gradients skips that step for all of them; this shows how often it happens. The
    Lightning scaler of the loop's empty marker optimizer counts too (one update per round, never a skip).
    """
    counts = {"updates": 0, "skips": 0}
    original = torch.amp.GradScaler.update

    def update(self: torch.amp.GradScaler, new_scale: object = None) -> None:
        before = self._scale.clone() if getattr(self, "_scale", None) is not None else None
        original(self, new_scale)
        counts["updates"] += 1
        if before is not None and bool(self._scale < before):
            counts["skips"] += 1

    torch.amp.GradScaler.update = update
    return counts


def step_speedups(args: argparse.Namespace, out: Results) -> None:
    device, job, data, sampler = _workload(args)
    runner = EngineRunner(job, data, device, "vectorized")
    started, t = time.perf_counter(), 0

    def timed(label: str, rounds: int, **extra: object) -> None:
        nonlocal t
        _sync(device)
        begin = time.perf_counter()
        for _ in range(rounds):
            runner.round(t, sampler.sample(t))
            t += 1
        _sync(device)
        seconds = time.perf_counter() - begin
        out.emit(variant=label, rounds=rounds, seconds=round(seconds, 3), sec_per_round=round(seconds / rounds, 5),
                 client_updates_per_sec=round(rounds * job.clients_per_round / seconds, 1), device=_card(device), **extra)

    timed("warm-up", 1)
    timed("fp32", args.rounds)
    backends = torch.backends
    backends.cudnn.benchmark = True  # cuDNN times its algorithms for each new shape, then keeps the fastest
    timed("cudnn.benchmark first round (autotunes)", 1)
    timed("cudnn.benchmark", args.rounds)
    backends.cudnn.benchmark = False
    try:
        saved = backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32
        backends.cuda.matmul.allow_tf32 = backends.cudnn.allow_tf32 = True
        timed("tf32 (matmul and cudnn)", args.rounds)
        backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = saved
    except Exception as err:  # noqa: BLE001
        out.emit(variant="tf32", error=f"{type(err).__name__}: {err}")
    if time.perf_counter() - started > args.budget or time.time() > args.deadline - 60:
        out.emit(variant="torch.compile", skipped="no time left")
        return
    forward = runner.engine.forward
    try:
        forward.module = torch.compile(forward.module)
        timed("torch.compile first round (compiles)", 1)
        timed("torch.compile", args.rounds, dynamo=_dynamo_stats())
    except Exception as err:  # noqa: BLE001 - an unsupported op or a missing compiler is a result here
        out.emit(variant="torch.compile", error=f"{type(err).__name__}: {str(err)[:400]}")


def _dynamo_stats() -> dict:
    """Graphs compiled and recompilations (a recompile every round would hide any gain)."""
    try:
        from torch._dynamo.utils import counters

        return {group: dict(counters[group]) for group in ("stats", "recompiles") if counters.get(group)}
    except Exception as err:  # noqa: BLE001 - private API: report, do not fail the step
        return {"unavailable": str(err)[:200]}


def step_summary(args: argparse.Namespace, out: Results) -> None:
    from bench.gpu_summary import summarize

    text = summarize(Path(args.results))
    Path(args.out).write_text(text)
    print(text)


STEPS = {"env": step_env, "harness": step_harness, "trainer": step_trainer, "speedups": step_speedups,
         "summary": step_summary}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("--results", required=True, help="JSON lines file to append to")
    parser.add_argument("--label", default=None, help="step name in the records (default: the step)")
    parser.add_argument("--engine", default="vectorized", help="sequential, vectorized or auto (trainer)")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument("--budget", type=float, default=150.0, help="stop after this many seconds of training")
    parser.add_argument("--eval-at", default="", help="rounds after which to measure test accuracy, e.g. 300,1500")
    parser.add_argument("--progress", type=int, default=100, help="a progress record every N rounds")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--out", default=None, help="summary: the Markdown file to write")
    args = parser.parse_args(argv)
    # Stop in time to evaluate and write the final record before gpu_check.sh's limit kills the step.
    args.deadline = _STARTED + float(os.environ.get("GPU_CHECK_STEP_LIMIT", "inf")) - 20
    out = Results(args.results, args.label or args.step)
    try:
        STEPS[args.step](args, out)
    except Exception as err:
        out.emit(event="error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc()[-3000:])
        raise


if __name__ == "__main__":
    from bench.variants import quiet_lightning

    quiet_lightning()
    main()
