"""Central DP on a model with BatchNorm: floating buffers are clipped and noised with the update, while
integer buffers (``num_batches_tracked``) keep the global model's values exactly (without DP they are the
first cohort member's, which depend on its data)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.callbacks.helpers import load_last
from tests.conftest import run_cli

CLIP = 1e-3
BN_MLP = {"class_path": "lightning_fl.models.MLP",
          "init_args": {"in_features": 60, "num_classes": 10, "hidden": [8], "batch_norm": True}}


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """The state after one round: without DP, with clipping alone, and with clipping and noise."""
    from tests.conftest import tiny_config, write_config

    root = tmp_path_factory.mktemp("bn")
    dps = {"plain": None, "clipped": {"noise_multiplier": 0.0, "clip_norm": CLIP, "sampling": "fixed"},
           "noised": {"noise_multiplier": 1.0, "clip_norm": CLIP, "sampling": "fixed", "delta": 1e-3,
                      "on_budget": "continue"}}
    out = {}
    for version, (name, dp) in enumerate(dps.items()):
        overrides = {"model.client": BN_MLP, "trainer.max_epochs": 1, "trainer.check_val_every_n_epoch": 1,
                     "trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg",
                                            "init_args": {"weighting": "uniform"}},
                                           {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                                            "init_args": {"filename": "last", "save_on_train_epoch_end": True,
                                                          "enable_version_counter": False}}]}
        if dp is not None:
            overrides["model.dp"] = dp
        config = write_config(root / f"{name}.yaml", tiny_config(root / "logs", **overrides))
        assert run_cli("fit", "--config", str(config)) == 0
        out[name] = load_last(root, version)["state_dict"]
    return out


def _buffers(state, suffix):
    return {k: v for k, v in state.items() if k.endswith(suffix)}


def test_integer_buffers_keep_the_global_value_exactly_under_dp(states):
    counters = _buffers(states["plain"], "num_batches_tracked")
    assert counters, "the model has no BatchNorm counter"
    # Without DP: the first member's count, one per local step (2 epochs of at least one batch each).
    assert all(int(v) >= 2 for v in counters.values())
    for name in ("clipped", "noised"):
        for key, value in _buffers(states[name], "num_batches_tracked").items():
            # w^0's value (a fresh BatchNorm counts 0), exact and still an integer: neither clipped nor noised.
            assert value.dtype == torch.long and int(value) == 0, (name, key, value)


def test_floating_buffers_are_part_of_the_clipped_and_noised_update(states):
    def buffer_change(state):  # a fresh BatchNorm starts at running_mean 0 and running_var 1
        deltas = [v.double() for v in _buffers(state, "running_mean").values()]
        deltas += [v.double() - 1.0 for v in _buffers(state, "running_var").values()]
        return math.sqrt(sum(float((d ** 2).sum()) for d in deltas))

    plain, clipped = buffer_change(states["plain"]), buffer_change(states["clipped"])
    assert plain > 10 * CLIP  # unclipped, the statistics move far more than C
    # Fixed-size sampling, no noise: w^1 - w^0 = mean of K clipped rows, so even the buffers' share of its
    # norm is at most C (they are clipped with the parameters, in one flat vector).
    assert 0 < clipped <= CLIP * (1 + 1e-5)
    # Same seed, so the same cohort and clipped mean: the difference is the noise, N(0, (z C / K)^2) per
    # entry with z = 1 and K = 3, on the buffers as on the parameters.
    noise = torch.cat([(states["noised"][k].double() - states["clipped"][k].double()).flatten()
                       for k in states["clipped"] if k.endswith(("running_mean", "running_var"))])
    rms = float(noise.pow(2).mean().sqrt())
    assert noise.numel() == 16 and 0.5 < rms / (CLIP / 3) < 2.0
