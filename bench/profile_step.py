"""Where a round's time goes: ``torch.profiler`` over a few rounds of one job and engine.

Usage::

    .venv/bin/python -m bench.profile_step --job J2 --engine vectorized [--formulation vmap] [--rounds 10]
    .venv/bin/python -m bench.profile_step --job J3 --compare [--forms grouped,unfold-bmm] [--chunks 10,5,2]

``--formulation`` forces the vectorized engine's cohort formulation (``fused-linear``, ``batched``,
``vmap``) so the three can be compared on the same model; the per-step time printed first is CPU
time per local step of the longest client (``max_k tau_k`` steps per round).

``--compare`` times one local SGD step of a convolutional job instead, in one process and alternated:
the sequential engine's per-client steps, the centralized bound (one batch of ``K * B``), and the
batched model with each convolution formulation of :data:`CONV_FORMS` and chunk size (clients per
stacked pass); the median CPU and wall times and their ratios to the sequential step are printed.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.profiler import profile

from bench.jobs import Job, build_jobs
from bench.variants import CentralizedRunner, EngineRunner
from lightning_fl.engines.base import num_local_steps
from lightning_fl.engines.batched import FoldedConv
from lightning_fl.engines.folded import FoldedForward
from lightning_fl.engines.formulation import build_forward
from lightning_fl.simulation.sampling import ClientSampler


# --- --compare: one local step of a convolutional job, formulation by formulation ------------------------------
# The engines' steps without their bookkeeping, so that the convolution formulations and chunk sizes can be
# timed against each other in one process, alternated (the development VM is shared and noisy).


def conv_grouped(x: Tensor, weight: Tensor, bias: Tensor | None, conv: dict, channels_last: bool = False) -> Tensor:
    """The engine's formulation: the cohort moved into the channels, one grouped convolution (``groups = C``)."""
    n, out_ch = weight.shape[:2]
    batch = x.shape[0] // n
    grouped = x.reshape(n, batch, *x.shape[1:]).transpose(0, 1).reshape(batch, n * x.shape[1], *x.shape[2:])
    if channels_last:
        grouped = grouped.contiguous(memory_format=torch.channels_last)
    y = F.conv2d(grouped, weight.reshape(n * out_ch, *weight.shape[2:]), None if bias is None else bias.reshape(-1),
                 conv["stride"], conv["padding"], conv["dilation"], n)
    return y.reshape(batch, n, out_ch, *y.shape[2:]).transpose(0, 1).reshape(n * batch, out_ch, *y.shape[2:])


def conv_unfold(x: Tensor, weight: Tensor, bias: Tensor | None, conv: dict) -> Tensor:
    """im2col (``unfold``) of every image, then one ``baddbmm`` over the clients.

    ``(C, B L, Cin k k) @ (C, Cin k k, Out)``; the backward (``col2im``) is autograd's.
    """
    n, out_ch = weight.shape[:2]
    batch = x.shape[0] // n
    cols = F.unfold(x, tuple(weight.shape[3:]), conv["dilation"], conv["padding"], conv["stride"])  # (C B, Cin k k, L)
    length = cols.shape[-1]
    cols = cols.transpose(1, 2).reshape(n, batch * length, -1)
    w = weight.reshape(n, out_ch, -1).mT
    y = torch.bmm(cols, w) if bias is None else torch.baddbmm(bias.unsqueeze(1), cols, w)
    size = [(x.shape[2 + i] + 2 * conv["padding"][i] - conv["dilation"][i] * (weight.shape[3 + i] - 1) - 1)
            // conv["stride"][i] + 1 for i in range(2)]
    return y.reshape(n * batch, *size, out_ch).permute(0, 3, 1, 2)  # a channels-last view, no copy


def conv_loop(x: Tensor, weight: Tensor, bias: Tensor | None, conv: dict) -> Tensor:
    """One ``conv2d`` per client (the sequential engine's kernels), inside the batched model."""
    xs = x.reshape(weight.shape[0], -1, *x.shape[1:])
    return torch.cat([F.conv2d(xs[c], weight[c], None if bias is None else bias[c], conv["stride"], conv["padding"],
                               conv["dilation"]) for c in range(weight.shape[0])])


CONV_FORMS = {"grouped": conv_grouped, "grouped-cl": partial(conv_grouped, channels_last=True),
              "unfold-bmm": conv_unfold, "loop": conv_loop}


def swap_convolutions(forward: FoldedForward, form: str) -> None:
    """Replace every batched ``Conv2d`` of ``forward`` by the formulation ``form`` of :data:`CONV_FORMS`."""
    fn = CONV_FORMS[form]
    for layer in forward.module.modules():
        if isinstance(layer, FoldedConv):
            conv = {"stride": layer.stride, "padding": layer.padding, "dilation": layer.dilation}
            layer.forward = lambda x, layer=layer, conv=conv: fn(x, layer.param("weight"), layer.param("bias"), conv)


def _sgd(params: list[Tensor], loss: Tensor, lr: float) -> None:
    """``w -= lr * grad`` with the gradients in ``.grad``, as the engines' optimizers get them (``backward``
    hands ``.grad`` a gradient in the parameter's own layout: a copy when autograd made it in another)."""
    for p in params:
        p.grad = None
    loss.backward()
    with torch.no_grad():
        torch._foreach_add_(params, [p.grad for p in params], alpha=-lr)


def step_functions(model: nn.Module, x: Tensor, y: Tensor, clients: int, lr: float, forms: list[str],
                   chunks: list[int]) -> tuple[dict[str, Callable[[], None]], dict[str, Callable[[], dict]]]:
    """One local SGD step of ``clients`` clients (client ``c``: the ``c``-th equal slice of ``x, y``), per variant.

    Returns:
        The step of every variant, and for every variant but the centralized one its clients' parameters
        ``{name: (clients, *shape)}`` now (they all start from ``model``'s).
    """
    batch = len(x) // clients
    copies = [copy.deepcopy(model) for _ in range(clients)]
    central = copy.deepcopy(model)

    def sequential() -> None:
        for c, local in enumerate(copies):
            rows = slice(c * batch, (c + 1) * batch)
            _sgd(list(local.parameters()), F.cross_entropy(local(x[rows]), y[rows]), lr)

    def centralized() -> None:
        _sgd(list(central.parameters()), F.cross_entropy(central(x), y), lr)

    steps = {"sequential": sequential, "centralized": centralized}
    weights = {"sequential": lambda: {n: torch.stack([dict(m.named_parameters())[n].detach() for m in copies])
                                      for n, _ in model.named_parameters()}}
    for form in forms:
        for chunk in chunks:
            forward = FoldedForward(model)
            swap_convolutions(forward, form)
            parts = [(s, {n: p.detach().expand(min(chunk, clients - s), *p.shape).clone().requires_grad_()
                          for n, p in model.named_parameters()}) for s in range(0, clients, chunk)]

            def vectorized(forward: FoldedForward = forward, parts: list = parts) -> None:
                for start, params in parts:
                    forward.bind(params)
                    rows = slice(start * batch, (start + len(next(iter(params.values())))) * batch)
                    loss = F.cross_entropy(forward(x[rows]), y[rows], reduction="sum") / batch
                    _sgd(list(params.values()), loss, lr)

            steps[f"{form}/{chunk}"] = vectorized
            weights[f"{form}/{chunk}"] = lambda parts=parts: {
                n: torch.cat([params[n].detach() for _, params in parts]) for n, _ in model.named_parameters()}
    return steps, weights


def compare(job: Job, forms: list[str], chunks: list[int], repeats: int) -> dict[str, float]:
    """Median CPU seconds per local step of every variant, timed alternately; printed with ratios to sequential."""
    model = job.make_model()
    gen = torch.Generator().manual_seed(0)
    rows = job.clients_per_round * job.batch_size
    x = torch.randn(rows, *model.input_shape, generator=gen)
    y = torch.randint(0, model.num_classes, (rows,), generator=gen)
    steps, _ = step_functions(model, x, y, job.clients_per_round, job.lr, forms, chunks)
    for step in steps.values():  # warm-up: allocator, oneDNN primitives
        step()
    cpu: dict[str, list[float]] = {name: [] for name in steps}
    wall: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            started, started_wall = time.process_time(), time.perf_counter()
            step()
            cpu[name].append(time.process_time() - started)
            wall[name].append(time.perf_counter() - started_wall)
    medians = {name: statistics.median(t) for name, t in cpu.items()}
    walls = {name: statistics.median(t) for name, t in wall.items()}
    print(f"{'variant':18s} {'CPU ms':>8s} {'seq/x':>6s} {'wall ms':>8s} {'seq/x':>6s}"
          f"  (median of {repeats}, alternated)")
    for name, value in medians.items():
        print(f"{name:18s} {value * 1e3:8.1f} {medians['sequential'] / value:6.2f} {walls[name] * 1e3:8.1f}"
              f" {walls['sequential'] / walls[name]:6.2f}")
    return medians


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="J2")
    parser.add_argument("--engine", default="vectorized", choices=("sequential", "vectorized", "centralized"))
    parser.add_argument("--formulation", default=None, choices=("fused-linear", "batched", "vmap"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=25, help="profiler table rows")
    parser.add_argument("--compare", action="store_true", help="time one local step per formulation (module doc)")
    parser.add_argument("--forms", default=",".join(CONV_FORMS), help="--compare: convolution formulations")
    parser.add_argument("--chunks", default="10", help="--compare: clients per stacked pass, comma-separated")
    parser.add_argument("--repeats", type=int, default=7, help="--compare: timed steps per variant")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    job = build_jobs()[args.job]
    if args.compare:
        compare(job, args.forms.split(","), [int(c) for c in args.chunks.split(",")], args.repeats)
        return
    data = job.make_data()
    device = torch.device("cpu")
    if args.engine == "centralized":
        runner = CentralizedRunner(job, data, device)
    else:
        runner = EngineRunner(job, data, device, args.engine)
        if args.formulation is not None:
            runner.engine.forward = build_forward(args.formulation, runner.model)
    sampler = ClientSampler(data.num_clients, job.clients_per_round, "uniform", 0, data.train_sizes())
    cohorts = [sampler.sample(t) for t in range(args.rounds + 1)]
    runner.round(0, cohorts[0])  # warm-up
    steps = sum(int(num_local_steps(data.train_sizes()[c], job.run_epochs, job.batch_size).max()) for c in cohorts[1:])
    started = time.process_time()
    for t, cohort in enumerate(cohorts[1:], start=1):
        runner.round(t, cohort)
    elapsed = time.process_time() - started
    print(f"{args.job} {args.engine} {args.formulation or ''}: {elapsed / args.rounds * 1e3:.2f} ms CPU per round,"
          f" {elapsed / steps * 1e6:.0f} us per step of the longest client ({steps / args.rounds:.1f} steps/round)")
    with profile() as prof:
        for t, cohort in enumerate(cohorts[1:], start=1):
            runner.round(t, cohort)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    from bench.variants import quiet_lightning

    quiet_lightning()
    main()
