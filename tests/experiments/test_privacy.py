"""``make privacy``: its cells and configs, the rarity definition, the per-client pairing and the report,
from fake run outputs whose numbers are worked out by hand."""

from __future__ import annotations

import math
from functools import partial

import matplotlib.image
import numpy as np
import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from lightning_fl.experiments import privacy
from lightning_fl.experiments.launcher import launch
from lightning_fl.experiments.runs import Run


def test_a_cell_is_the_dp_safe_method_with_its_epsilon_and_inf_drops_clip_and_noise():
    assert privacy.Cell("q-FFL", math.inf).name == "q-FFL-epsinf" and privacy.Cell("FedFa", 2.0).name == "FedFa-eps2"
    public = privacy.cell_config(privacy.Cell("FedFa", math.inf))
    assert public["trainer"]["callbacks"][0]["init_args"]["dp_safe"] is True
    assert public["model"]["dp"] == {"noise_multiplier": 0.0, "clip_norm": math.inf, "sampling": "poisson"}
    assert public["model"]["optimizer"]["init_args"]["momentum"] == 0.5  # FedFa's client momentum
    private = privacy.cell_config(privacy.Cell("q-FFL", 1.0))
    assert private["model"]["dp"]["target_epsilon"] == 1.0 and private["model"]["dp"]["sampling"] == "poisson"
    assert private["trainer"]["callbacks"][0]["init_args"] == {"q": 1.0, "dp_safe": True, "f_max": 2.3026}
    assert "momentum" not in private["model"]["optimizer"]["init_args"]
    # FedFa's DP-safe weights are about 0.04 on the shipped setting: its server lr 25 restores FedAvg-sized steps.
    assert public["trainer"]["callbacks"][0]["init_args"]["server_lr"] == 25.0
    assert privacy.data_name(public) == "FashionMNIST"
    synthetic = yaml.safe_load((privacy.REPO / "configs" / "privacy" / "privacy_synthetic.yaml").read_text())
    assert privacy.data_name(synthetic) == "Synthetic(1,1)"


def test_label_rarity_by_hand():
    # Pooled labels (3, 2, 1) of 6: P = (1/2, 1/3, 1/6), C = 3, so 1 / (C P) = (2/3, 1, 2) per label.
    hist = np.array([[2, 0, 0], [0, 1, 1], [1, 1, 0], [0, 0, 0]])
    rarity = privacy.label_rarity(hist)
    np.testing.assert_allclose(rarity[:3], [2 / 3, (1 + 2) / 2, (2 / 3 + 1) / 2])
    assert math.isnan(rarity[3])  # no samples


def _run(root, name, seed, accuracies, epsilon=None, worst=None):
    """A finished run's files: the final test accuracies per client, their mean, and dp/epsilon."""
    folder = root / name / f"seed_{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["round,stage,client,accuracy,samples", "5,test,0,0.0,0"]  # an earlier round: not the final one
    rows += [f"10,test,{k},{a},10" for k, a in enumerate(accuracies)]
    (folder / "client_accuracy.csv").write_text("\n".join(rows) + "\n")
    mean = float(np.mean(accuracies))
    (folder / "fairness_history.csv").write_text(
        f"stage,round,acc_mean,acc_worst20\nval,10,{mean},{worst if worst is not None else min(accuracies)}\n"
        f"test,10,{mean},{worst if worst is not None else min(accuracies)}\n")
    if epsilon is not None:
        with SummaryWriter(str(folder)) as writer:
            writer.add_scalar("dp/epsilon", epsilon / 2, 1)
            writer.add_scalar("dp/epsilon", epsilon, 2)
    return Run(name, seed, folder, ())


def test_the_loss_pairs_each_client_with_itself_in_the_same_seed(tmp_path):
    public = [_run(tmp_path, "inf", s, a) for s, a in enumerate([[0.9, 0.8], [0.7, 0.6], [0.5, 0.5]])]
    private = [_run(tmp_path, "dp", s, a) for s, a in [(1, [0.6, 0.2]), (0, [0.8, 0.8])]]  # no seed 2
    assert privacy.paired_losses(private, public) == [
        (0, 0, pytest.approx(0.1)), (0, 1, pytest.approx(0.0)), (1, 0, pytest.approx(0.1)), (1, 1, pytest.approx(0.4))]


def _fake_train(run: Run) -> int:
    # FedAvg: clients 0..3 of seed s reach 0.6 + 0.01 s^2 + 0.02 k without DP (mean 0.63 + 0.01 s^2); at
    # epsilon 2 client k loses 0.1 (k + 1): the smallest, rarest client (see _features) loses least.
    seed, inf = run.seed, "epsinf" in run.method
    accuracies = [0.6 + 0.01 * seed ** 2 + 0.02 * k - (0 if inf else 0.1 * (k + 1)) for k in range(4)]
    _run(run.log_dir.parents[1], run.method, seed, accuracies, None if inf else 1.98 + 0.01 * seed, worst=0.1 * seed)
    return 0


def _features(config, seed):
    return np.array([10.0, 20.0, 30.0, 40.0]), np.array([4.0, 3.0, 2.0, 1.0])


def test_the_report_from_fake_runs_by_hand(tmp_path, capsys):
    text = privacy.main(["--save-dir", str(tmp_path), "--seeds", "3", "--methods", "FedAvg", "--epsilons", "inf,2",
                         "--jobs", "1"], launcher=partial(launch, train=_fake_train), features=_features)
    rows = [line for line in text.splitlines() if line.startswith("| FedAvg")]
    # inf: means 0.63, 0.64, 0.67 per seed: mean 0.6467, std sqrt((0.0167^2 + 0.0067^2 + 0.0233^2) / 2) = 0.02082,
    # 95% t interval 4.3027 x 0.02082 / sqrt(3) = 0.05172: [59.5, 69.8]. Worst 20%: 0, 0.1, 0.2: 10.0 [-14.8, 34.8]
    # (std 0.1, 4.3027 x 0.1 / sqrt(3) = 0.2484). epsilon 2 loses 0.25 on average: 39.7 [34.5, 44.8].
    assert rows[0] == "| FedAvg | inf | inf | 64.7 [59.5, 69.8] | 10.0 [-14.8, 34.8] |"
    # Realised epsilon: the last dp/epsilon of each run, 1.98, 1.99, 2.00: mean 1.99.
    assert rows[1] == "| FedAvg | 2 | 2.0 | 39.7 [34.5, 44.8] | 10.0 [-14.8, 34.8] |"
    # 12 clients (4 x 3 seeds); the loss grows with size and falls with rarity, monotone: rho +1 and -1.
    impact = [line for line in text.splitlines() if line.startswith("| FedAvg | 12")]
    assert impact[0].startswith("| FedAvg | 12 | 25.0 | +1.00 (") and "| -1.00 (" in impact[0]
    csv_rows = (tmp_path / "privacy.csv").read_text().splitlines()
    assert csv_rows[0] == ("method,epsilon,acc_mean,acc_mean_ci,acc_worst20,acc_worst20_ci,realised_epsilon,"
                           "realised_epsilon_ci")
    values = csv_rows[2].split(",")
    assert values[:2] == ["FedAvg", "2.0"] and float(values[6]) == pytest.approx(1.99, abs=1e-6)
    # std 0.01 over 3 seeds (logged as fp32: hence rel 1e-4): 4.3027 x 0.01 / sqrt(3)
    assert float(values[7]) == pytest.approx(4.302652729 * 0.01 / 3 ** 0.5, rel=1e-4)
    assert matplotlib.image.imread(tmp_path / "privacy.png").shape[2] in (3, 4)


@pytest.mark.parametrize(("argv", "message"), [
    (["--methods", "Krum"], "error: --methods must list some of FedAvg, FedFa, q-FFL; got 'Krum'"),
    (["--epsilons", "inf,0"], "error: --epsilons must list numbers > 0 (inf: no DP), e.g. inf,8,2,1; got 'inf,0'"),
    (["--epsilons", "inf,-1"], "error: --epsilons must list numbers > 0 (inf: no DP), e.g. inf,8,2,1; got 'inf,-1'"),
    (["--epsilons", "8,2"], "error: --impact-epsilon must be a finite one of --epsilons, which must include inf;"
                            " got 2 and '8,2'"),
    (["--config", "no/such.yaml"], "error: --config must name a YAML file; got 'no/such.yaml'"),
])
def test_bad_input_is_one_line_before_anything_trains(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        privacy.main(["--save-dir", str(tmp_path), *argv], launcher=lambda run: pytest.fail("trained"))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == message


def test_client_features_build_nested_class_paths_as_the_cli_does():
    # The shipped setting names its partition by class path inside the data's init_args; the features must
    # build it (a dict would be refused by the datamodule) and see the runs' clients.
    partition = privacy.build({"class_path": "lightning_fl.datamodules.partitions.Shards",
                               "init_args": {"classes_per_client": 1}})
    assert type(partition).__name__ == "Shards" and partition.classes_per_client == 1
    config = {"data": {"class_path": "lightning_fl.datamodules.DigitsDataModule",
                       "init_args": {"num_clients": 10, "partition": {
                           "class_path": "lightning_fl.datamodules.partitions.Shards",
                           "init_args": {"classes_per_client": 1}}}}}
    sizes, rarity = privacy.client_features(config, 0)
    assert len(sizes) == 10 and (sizes > 0).all()
    # one label per client: 1 / (C P(y)) with P(y) near 1/10 and C = 10, so each rarity is about 1
    assert np.allclose(rarity, 1.0, atol=0.1)
