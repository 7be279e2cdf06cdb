"""Benchmark job J4 through pfl-research 0.6.0 itself, for a side-by-side figure on the same card (issue 24).

``python -m bench.pfl_j4 --rounds 1500 --out DIR`` trains J4 (:func:`bench.jobs.pfl_job`: the same
federation from :func:`bench.cifar_like.cifar_like`, the same ``PflCNN``, cohort 50, one local epoch at batch 10,
local SGD lr 0.1, central SGD lr 1 so the update is the cohort average) with pfl's own ``FederatedAveraging``,
``SimulatedBackend``, ``PyTorchModel`` and ``MinimizeReuseUserSampler``: the pipeline of pfl-research's
``benchmarks/image_classification/pytorch/train.py``, written against its public API. Each user's images
are on the training device before the clock starts, as our engines' are, so both sides time training and
aggregation, not host-to-device copies.

It prints (and writes to ``DIR/pfl_results.jsonl``) one JSON line per progress point and a final line: rounds,
seconds, seconds per round after the first, client updates per second and the test accuracy of the
central model. pfl is not a dependency of lightning_fl: install it (``pip install --no-deps pfl==0.6.0
prv-accountant multiprocess dill``; its ``dp-accounting<0.6`` pin does not matter here, no DP is used)
where the comparison runs. ``bench/gpu_check.sh`` runs it with ``GPU_CHECK_STEPS=pfl``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


class PflModule(nn.Module):
    """``PflCNN`` with the ``loss`` and ``metrics`` methods pfl's ``PyTorchModel`` calls."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:  # noqa: A002 - pfl's name
        self.train(not eval)
        return F.cross_entropy(self(x), y)

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict:  # noqa: A002
        from pfl.metrics import Weighted  # noqa: PLC0415 - pfl is optional

        self.train(not eval)
        logits = self(x)
        return {"loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), len(y)),
                "accuracy": Weighted(float((logits.argmax(1) == y).sum()), len(y))}


def run(rounds: int, users: int, cohort: int, out_dir: Path, progress: int) -> dict:
    """Train J4 for ``rounds`` rounds with pfl; returns the final record."""
    import os

    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByUser
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.internal.ops import pytorch_ops
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel

    from bench.gpu_j4 import test_accuracy
    from bench.jobs import pfl_job

    device = torch.device(os.environ.get("PFL_PYTORCH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
    os.environ["PFL_PYTORCH_DEVICE"] = str(device)  # pfl places its model by this variable
    assert pytorch_ops.get_default_device() == device
    job = pfl_job(num_users=users)
    data = job.make_data()
    torch.manual_seed(0)
    offsets = data.train_offsets.tolist()
    x, y = data.x_train.to(device), data.y_train.to(device)
    slices = {u: [x[offsets[u]:offsets[u + 1]], y[offsets[u]:offsets[u + 1]]] for u in range(data.num_clients)}
    federated = FederatedDataset(lambda u: Dataset(slices[u], user_id=u),
                                 get_user_sampler("minimize_reuse", list(range(data.num_clients))))
    module = PflModule(job.make_model()).to(device)
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(module.parameters(), lr=1.0))
    x_test, y_test = data.x_test.to(device), data.y_test.to(device)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = (out_dir / "pfl_results.jsonl").open("a")
    marks: list[float] = []

    def emit(**record: object) -> None:
        line = json.dumps({"bench": "pfl_j4", **record})
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    class Clock(TrainingProcessCallback):
        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):  # noqa: ANN001, ANN202
            sync()
            marks.append(time.perf_counter())
            done = central_iteration + 1
            if done % progress == 0:
                emit(event="progress", rounds=done, seconds=round(marks[-1] - started, 3))
            return False, Metrics()

    import pfl

    emit(event="start", pfl=pfl.__version__ if hasattr(pfl, "__version__") else "0.6.0", torch=torch.__version__,
         device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", users=data.num_clients,
         cohort=cohort, data=job.data_source)
    sync()
    started = time.perf_counter()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(central_num_iterations=rounds, evaluation_frequency=rounds + 1,
                                           train_cohort_size=cohort, val_cohort_size=0),
        backend=SimulatedBackend(training_data=federated, val_data=None, postprocessors=[WeightByUser()]),
        model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=job.lr, local_num_epochs=1,
                                              local_batch_size=job.batch_size),
        model_eval_params=NNEvalHyperParams(local_batch_size=1000),
        callbacks=[Clock()])
    sync()
    seconds = time.perf_counter() - started
    with torch.no_grad():
        accuracy = test_accuracy(module, x_test, y_test)
    first = marks[0] - started if marks else seconds
    steady = (marks[-1] - marks[0]) / (len(marks) - 1) if len(marks) > 1 else seconds
    record = {"event": "final", "rounds": len(marks), "seconds": round(seconds, 3), "first_round_seconds": round(first, 3),
              "sec_per_round_after_first": round(steady, 5), "client_updates_per_sec": round(len(marks) * cohort / seconds, 1),
              "steady_updates_per_sec": round(cohort / steady, 1), "test_acc": accuracy}
    emit(**record)
    log.close()
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument("--users", type=int, default=1000, help="1,000 in pfl-research's workload")
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--progress", type=int, default=100, help="print a progress line every N rounds")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args(argv)
    run(args.rounds, args.users, args.cohort, args.out, args.progress)


if __name__ == "__main__":
    main()
