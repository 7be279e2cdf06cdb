"""The benchmark's engine runners still drive the current engine and aggregation interfaces."""

from __future__ import annotations

import dataclasses
import importlib
import logging

import torch


def test_engine_runners_train_a_round_of_j1() -> None:
    # bench.variants silences Lightning's loggers when imported (for the benchmark's output); keep
    # that from reaching the other tests, which read Lightning's log.
    names = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        build_jobs = importlib.import_module("bench.jobs").build_jobs
        engine_runner = importlib.import_module("bench.variants").EngineRunner
        job = build_jobs(quick=True)["J1"]
        data = job.make_data()
        for engine in ("sequential", "vectorized"):
            torch.manual_seed(0)
            runner = engine_runner(job, data, torch.device("cpu"), engine)
            before = runner.layout.flatten(runner.model.state_dict()).clone()
            runner.round(0, torch.arange(job.clients_per_round))
            assert not torch.equal(before, runner.layout.flatten(runner.model.state_dict())), engine
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_the_robust_rule_benchmark_times_every_rule_beside_the_weighted_sum(tmp_path, monkeypatch, capsys) -> None:
    robust_bench = importlib.import_module("bench.robust")
    monkeypatch.setattr(robust_bench, "RESULTS", tmp_path / "robust.json")
    robust_bench.main(["--cohorts", "7", "--dims", "50", "--repeats", "1"])
    rows = [line.split(" | ")[2] for line in capsys.readouterr().out.splitlines()[2:]]
    # f = max(1, 0.1 x 7) = 1: Bulyan needs K >= 4f + 3 = 7, so at K = 7 every rule runs.
    assert rows == ["fedavg_sum", "median", "median_weighted", "trimmed_mean", "geometric_median",
                    "centered_clipping", "krum", "krum_gram", "multi_krum", "bulyan", "nnm"]
    assert (tmp_path / "robust.json").is_file()


def test_j4_is_the_pfl_research_workload_and_one_small_round_runs_in_every_variant() -> None:
    names = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        jobs = importlib.import_module("bench.jobs")
        variants = importlib.import_module("bench.variants")
        job = jobs.build_jobs()["J4"]
        # pfl-research's setting: cohort 50, batch 10, 1 epoch of 50 images (5 steps), SGD lr 0.1.
        assert (job.clients_per_round, job.batch_size, job.local_epochs, job.lr) == (50, 10, 1, 0.1)
        assert sum(p.numel() for p in job.make_model().parameters()) == 1_626_442
        small = jobs.pfl_job(num_users=12)
        small.clients_per_round, small.naive_clients = 3, 1
        data = small.make_data()
        assert small.data_source in ("CIFAR-10", "synthetic CIFAR-shaped")
        assert data.num_clients == 12 and data.x_train.shape == (600, 3, 32, 32)
        assert data.train_sizes().unique().tolist() == [50]
        ids = torch.tensor([1, 5, 9])
        for name, make in (("naive", variants.NaiveRunner), ("centralized", variants.CentralizedRunner),
                           ("sequential", None), ("vectorized", None)):
            torch.manual_seed(0)
            runner = (make(small, data, torch.device("cpu")) if make else
                      variants.EngineRunner(small, data, torch.device("cpu"), name))
            before = runner.weights().clone()
            runner.round(0, ids)
            after = runner.weights()
            assert torch.isfinite(after).all() and not torch.equal(before, after), name
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_the_gpu_check_lists_every_shipped_config_and_summarizes_what_finished(tmp_path) -> None:
    configs = importlib.import_module("bench.gpu_configs")
    listed = {path.relative_to(configs.ROOT).as_posix(): skip for path, skip in configs.shipped_configs()}
    assert listed["configs/fedavg_synthetic.yaml"] is None and listed["configs/experiments/fedfa_digits.yaml"] is None
    # Fashion-MNIST runs where `make data` put its files in data/, and is listed as a download elsewhere.
    fmnist = listed["configs/experiments/fedfa_fmnist.yaml"]
    assert fmnist is None if (configs.ROOT / "data" / "fashion-mnist").is_dir() else "download" in fmnist
    assert listed["configs/user_modules/regression.yaml"] is None  # generated regression data
    assert {"configs/robust/fedfa_alie_trimmed_mean.yaml", "configs/stragglers/fedavg_drop.yaml"} <= set(listed)
    # One tiny harness run (CPU) appends its records; a line cut by a kill is ignored by the summary.
    results = tmp_path / "r.jsonl"
    names = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        importlib.import_module("bench.gpu_j4").main(
            ["harness", "--results", str(results), "--users", "6", "--cohort", "2", "--rounds", "2", "--eval-at", "1"])
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    with results.open("a") as f:
        f.write('{"step": "configs", "config": "configs/x.yaml", "ok": false, "rc": 1, "seconds": 2, "error": "E"}\n')
        f.write('{"step": "status", "na')
    text = importlib.import_module("bench.gpu_summary").summarize(results)
    assert "| harness | vectorized (batched) | 32-true | 2/2 |" in text
    assert "FAILED configs/x.yaml" in text


def test_the_user_module_benchmark_times_the_three_paths_on_one_federation(monkeypatch) -> None:
    names = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
    levels = {name: logging.getLogger(name).level for name in names}
    try:
        jobs = importlib.import_module("bench.jobs")
        full = jobs.build_jobs
        tiny = dataclasses.replace(full()["J1"], local_epochs=1, clients_per_round=3, rounds=1)
        monkeypatch.setattr(jobs, "build_jobs", lambda quick=False, rounds=None: {"J1": tiny})
        # run() asserts each variant runs on the path it names (fused-linear, training_step) and that the
        # three trained models agree.
        row = importlib.import_module("bench.user_module").run("J1", None, 1)
        assert row["max_rel_diff"] < 1e-5
        assert all(row[v] > 0 for v in ("fused", "plain vectorized", "plain sequential"))
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
