"""A per-round client learning-rate schedule (``--lr_scheduler`` / ``model.lr_scheduler``).

The reference for a scheduled run is an unscheduled one: round 1 at ``lr_0``, then a resume whose
optimizer is configured with ``lr_0 gamma`` for round 2 must give bitwise the weights of two
scheduled rounds.
"""

from __future__ import annotations

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_cli

EXPONENTIAL = ["--lr_scheduler", "ExponentialLR", "--lr_scheduler.gamma", "0.5"]


def _run(tmp_path, name):
    return tmp_path / "logs" / name / "version_0"


def _weights(run):
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("model.")}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_round_two_trains_at_the_decayed_rate(tiny, tmp_path, engine):
    config = tiny(**{"model.engine": engine, "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "scheduled", *EXPONENTIAL) == 0
    # The reference: one round at 0.05, then one more with the optimizer's lr set to 0.025 by hand.
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "by_hand",
                   "--trainer.max_epochs", "1") == 0
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "by_hand",
                   "--model.optimizer.init_args.lr", "0.025", "--model.resume_despite_changes", "true",
                   "--ckpt_path", str(_run(tmp_path, "by_hand") / "checkpoints" / "last.ckpt")) == 0
    assert _same(_weights(_run(tmp_path, "scheduled")), _weights(_run(tmp_path, "by_hand")))
    events = EventAccumulator(str(_run(tmp_path, "scheduled")), size_guidance={"scalars": 0})
    events.Reload()
    assert [(e.step, round(e.value, 7)) for e in events.Scalars("train/lr")] == [(1, 0.05), (2, 0.025)]


def test_schedule_resumes_exactly_and_engines_agree(tiny, tmp_path):
    # SGD with momentum, state kept between participations: a kept state's saved lr must not win.
    common = {"model.optimizer.init_args.momentum": 0.9, "model.keep_client_optimizer_state": True}
    runs = {}
    for engine in ("sequential", "vectorized"):
        config = tiny(**common, **{"model.engine": engine, "trainer.logger.init_args.name": engine})
        assert run_cli("fit", "--config", str(config), *EXPONENTIAL) == 0
        runs[engine] = _weights(_run(tmp_path, engine))
    halves = tiny(**common, **{"model.engine": "vectorized", "trainer.logger.init_args.name": "halves"})
    assert run_cli("fit", "--config", str(halves), "--trainer.max_epochs", "2", *EXPONENTIAL) == 0
    assert run_cli("fit", "--config", str(halves), "--ckpt_path", "last", *EXPONENTIAL) == 0
    assert _same(_weights(_run(tmp_path, "halves")), runs["vectorized"])
    a, b = runs["sequential"], runs["vectorized"]
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)
    # The schedule changed the result (gamma 0.5 against a constant rate).
    constant = tiny(**common, **{"model.engine": "vectorized", "trainer.logger.init_args.name": "constant"})
    assert run_cli("fit", "--config", str(constant)) == 0
    assert not _same(_weights(_run(tmp_path, "constant")), runs["vectorized"])


def test_top_level_optimizer_is_the_client_optimizer(tiny, tmp_path):
    config = tiny(**{"trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "alias",
                   "--optimizer", "Adam", "--optimizer.lr", "0.01") == 0
    assert run_cli("fit", "--config", str(config), "--trainer.logger.init_args.name", "model",
                   "--model.optimizer", "torch.optim.Adam", "--model.optimizer.lr", "0.01") == 0
    assert _same(_weights(_run(tmp_path, "alias")), _weights(_run(tmp_path, "model")))


def test_a_schedule_that_needs_a_metric_is_refused_in_one_line(tiny, capsys):
    assert run_cli("fit", "--config", str(tiny()), "--lr_scheduler", "torch.optim.lr_scheduler.ReduceLROnPlateau") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: model.lr_scheduler: ReduceLROnPlateau needs a monitored metric")


def test_a_scheduled_checkpoint_refuses_a_resume_without_its_schedule(tiny, tmp_path, capsys):
    config = tiny(**{"trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config), *EXPONENTIAL) == 0
    capsys.readouterr()
    assert run_cli("fit", "--config", str(config), "--trainer.max_epochs", "3", "--ckpt_path", "last") == 2
    assert "model.lr_scheduler" in capsys.readouterr().err


def test_a_kept_client_state_trains_at_the_current_rate():
    from lightning_fl.engines.optimizers import load_state

    param = torch.nn.Parameter(torch.ones(3))
    saved = torch.optim.SGD([param], lr=0.05, momentum=0.9)
    param.grad = torch.ones(3)
    saved.step()
    fresh = torch.optim.SGD([param], lr=0.05, momentum=0.9)
    load_state(fresh, saved.state_dict(), 0.025)
    assert fresh.param_groups[0]["lr"] == 0.025
    assert torch.equal(fresh.state[param]["momentum_buffer"], torch.ones(3))


def test_a_per_step_schedule_restarts_every_round_and_engines_agree(tiny, tmp_path):
    from lightning_fl.simulation.lr_schedule import ClientLrSchedule

    schedule = ClientLrSchedule(lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.5),
                                lambda params: torch.optim.SGD(params, lr=0.05), interval="step")
    assert [schedule.step_rate(s) for s in (0, 1, 2)] == [0.05, 0.025, 0.0125] and schedule.lr() == 0.05
    per_step = [*EXPONENTIAL, "--lr_scheduler_interval", "step"]
    runs = {}
    for engine in ("sequential", "vectorized"):
        config = tiny(**{"model.engine": engine, "trainer.logger.init_args.name": engine})
        assert run_cli("fit", "--config", str(config), *per_step) == 0
        runs[engine] = _weights(_run(tmp_path, engine))
    a, b = runs["sequential"], runs["vectorized"]
    assert all(torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a)
    halves = tiny(**{"model.engine": "vectorized", "trainer.logger.init_args.name": "halves"})
    assert run_cli("fit", "--config", str(halves), "--trainer.max_epochs", "2", *per_step) == 0
    assert run_cli("fit", "--config", str(halves), "--ckpt_path", "last", *per_step) == 0
    assert _same(_weights(_run(tmp_path, "halves")), runs["vectorized"])
    # A per-step schedule that never changes within a round is the constant rate, to float rounding: the constant
    # rate's plain SGD takes the vectorized engine's one-loop path (one baddbmm_ update), a per-step rate does not.
    flat = tiny(**{"trainer.logger.init_args.name": "flat", "trainer.max_epochs": 2})
    constant = tiny(**{"trainer.logger.init_args.name": "constant", "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(flat), "--lr_scheduler", "StepLR", "--lr_scheduler.step_size", "100000",
                   "--lr_scheduler_interval", "step") == 0
    assert run_cli("fit", "--config", str(constant)) == 0
    flat_w, constant_w = _weights(_run(tmp_path, "flat")), _weights(_run(tmp_path, "constant"))
    assert all(torch.allclose(flat_w[k], constant_w[k], rtol=1e-6, atol=1e-7) for k in flat_w)
    decayed = tiny(**{"trainer.logger.init_args.name": "decayed", "trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(decayed), *per_step) == 0
    assert not _same(_weights(_run(tmp_path, "constant")), _weights(_run(tmp_path, "decayed")))
