"""``--ckpt_path last`` / ``best`` resume the config's own run (not a fresh ``version_N``), or stop in one line."""

from __future__ import annotations

import torch

from tests.conftest import ROUND_CHECKPOINT, run_cli

BEST = {"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
        "init_args": {"monitor": "val/acc_mean", "mode": "max", "filename": "best-{epoch}",
                      "save_on_train_epoch_end": False}}


def _weights(path):
    state = torch.load(path, weights_only=False)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("model.")}


def test_last_resumes_the_configs_latest_run_bitwise(tiny, tmp_path, caplog):
    straight = tiny(**{"trainer.logger.init_args.name": "straight"})
    assert run_cli("fit", "--config", str(straight)) == 0
    halves = tiny(**{"trainer.logger.init_args.name": "halves"})
    assert run_cli("fit", "--config", str(halves), "--trainer.max_epochs", "2") == 0
    assert run_cli("fit", "--config", str(halves), "--ckpt_path", "last") == 0
    runs = tmp_path / "logs" / "halves"
    # One run folder, resumed in place: Lightning alone would have trained 4 rounds into version_1.
    assert sorted(p.name for p in runs.iterdir()) == ["version_0"]
    assert f"--ckpt_path last: {runs / 'version_0' / 'checkpoints' / 'last.ckpt'}" in caplog.text
    a = _weights(tmp_path / "logs" / "straight" / "version_0" / "checkpoints" / "last.ckpt")
    b = _weights(runs / "version_0" / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_last_picks_the_newest_version_with_a_checkpoint(tiny, tmp_path, caplog):
    config = tiny(**{"trainer.max_epochs": 2})
    assert run_cli("fit", "--config", str(config)) == 0
    assert run_cli("fit", "--config", str(config)) == 0  # a second run: version_1
    (tmp_path / "logs" / "run" / "version_7").mkdir()  # a folder with no checkpoint is passed over
    assert run_cli("fit", "--config", str(config), "--trainer.max_epochs", "3", "--ckpt_path", "last") == 0
    assert "version_1/checkpoints/last.ckpt" in caplog.text
    state = torch.load(tmp_path / "logs" / "run" / "version_1" / "checkpoints" / "last.ckpt", weights_only=False)
    assert state["federated"]["rounds_completed"] == 3


def test_last_without_a_run_stops_in_one_line(tiny, tmp_path, capsys):
    assert run_cli("fit", "--config", str(tiny()), "--ckpt_path", "last") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --ckpt_path last: no run of this config has a last.ckpt")
    assert not (tmp_path / "logs" / "run").exists()


def test_best_is_the_monitored_checkpoint_of_the_run(tiny, tmp_path, caplog, capsys):
    config = tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.FedAvg"},
                                           {"class_path": "lightning_fl.callbacks.FairnessMetrics"},
                                           ROUND_CHECKPOINT, BEST]})
    assert run_cli("fit", "--config", str(config)) == 0
    best_files = sorted((tmp_path / "logs" / "run" / "version_0" / "checkpoints").glob("best-*.ckpt"))
    assert len(best_files) == 1
    assert run_cli("validate", "--config", str(config), "--ckpt_path", "best") == 0
    assert f"--ckpt_path best: {best_files[0]}" in caplog.text
    # Without a monitored checkpoint there is no best: one line.
    plain = tiny(**{"trainer.logger.init_args.name": "plain"})
    assert run_cli("fit", "--config", str(plain), "--trainer.max_epochs", "2") == 0
    capsys.readouterr()
    assert run_cli("validate", "--config", str(plain), "--ckpt_path", "best") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no ModelCheckpoint with a monitor" in err[0]


def test_a_resumed_run_shows_each_round_once_in_tensorboard(tiny, tmp_path):
    # Rounds 3-4 are logged, then the run resumes from its round-2 checkpoint (as after a kill -9 that
    # left metrics logged past the last checkpoint): TensorBoard must show rounds 3-4 once, the new ones.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = tiny()
    run = tmp_path / "logs" / "run" / "version_0"
    assert run_cli("fit", "--config", str(config), "--trainer.max_epochs", "2") == 0
    early = run / "checkpoints" / "round2.ckpt"
    early.write_bytes((run / "checkpoints" / "last.ckpt").read_bytes())
    assert run_cli("fit", "--config", str(config), "--ckpt_path", "last") == 0
    assert run_cli("fit", "--config", str(config), "--ckpt_path", str(early)) == 0
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    for tag in ("train/loss", "round/seconds", "val/acc_mean"):
        steps = [e.step for e in events.Scalars(tag)]
        assert steps == sorted(set(steps)) and steps[-1] == 4, (tag, steps)
