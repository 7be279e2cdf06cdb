"""``make robust``: its cells, their configs, and one small grid trained in-process end to end."""

from __future__ import annotations

from functools import partial

import matplotlib.image
import pytest
import yaml

from lightning_fl.experiments import robust
from lightning_fl.experiments.launcher import launch
from tests.conftest import run_cli


def test_the_cells_cover_every_method_attack_fraction_and_rule_once():
    cells = robust.cells()
    # 4 methods x 3 rules x (no attack + 2 attacks x 2 fractions)
    assert len(cells) == 4 * 3 * 5 == len({c.name for c in cells})
    assert robust.Cell("FedFa", "alie", 0.2, "trimmed_mean").name == "FedFa-alie20-trimmed_mean"
    assert robust.Cell("DWFed", "none", 0.0, "mean").name == "DWFed-none-mean"


def test_a_cell_is_the_shipped_config_with_its_attack_and_rule():
    config = robust.cell_config(robust.Cell("q-FFL", "label_flip", 0.1, "geometric_median"))
    assert config["model"]["attack"] == {"class_path": "lightning_fl.aggregation.attacks.LabelFlip",
                                         "init_args": {"fraction": 0.1}}
    assert config["model"]["aggregation"] == {"rule": {"class_path": "lightning_fl.aggregation.GeometricMedian"},
                                              "f_fraction": 0.2}
    assert config["trainer"]["callbacks"][0]["class_path"] == "lightning_fl.callbacks.QFFL"
    plain = robust.cell_config(robust.Cell("FedAvg", "none", 0.0, "mean"))
    assert "attack" not in plain["model"] and "aggregation" not in plain["model"]


def test_a_small_grid_reports_accuracy_and_the_attackers_weight(tmp_path, capsys):
    text = robust.main(["--save-dir", str(tmp_path), "--seeds", "2", "--rounds", "2", "--methods", "FedAvg",
                        "--attacks", "alie", "--rules", "mean"], launcher=partial(launch, train=_in_process))
    lines = [line for line in text.splitlines() if line.startswith("| FedAvg")]
    assert [line.split(" | ")[1:4] for line in lines] == [["none", "0", "mean"], ["alie", "0.1", "mean"],
                                                         ["alie", "0.2", "mean"]]
    rows = (tmp_path / "robust.csv").read_text().splitlines()
    assert rows[0].startswith("method,attack,fraction,rule,honest_acc_mean,honest_acc_mean_ci,change_same_clients,")
    attacked = [r.split(",") for r in rows[1:] if ",alie," in r]
    weight, share = float(attacked[1][12]), float(attacked[1][14])
    assert 0 < share <= 0.5 and 0 < weight < 1  # 6 of 30 clients are Byzantine: some land in 2-round cohorts
    assert matplotlib.image.imread(tmp_path / "robust.png").shape[2] in (3, 4)
    config = yaml.safe_load((tmp_path / "configs" / "FedAvg-alie20-mean.yaml").read_text())
    assert config["model"]["attack"]["init_args"] == {"fraction": 0.2}


def test_unknown_choices_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        robust.main(["--save-dir", str(tmp_path), "--rules", "krum"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: --rules must list some of mean, trimmed_mean,"
                                               " geometric_median; got 'krum'")


def _in_process(run) -> int:
    return run_cli(*run.command[2:])


def test_the_paired_change_compares_the_same_clients_and_seed(tmp_path):
    from lightning_fl.experiments.runs import Run

    def run(name, seed, accuracies):
        folder = tmp_path / name / f"seed_{seed}"
        folder.mkdir(parents=True)
        rows = ["round,stage,client,accuracy,samples", "5,test,0,0.0,0"]  # no samples: left out
        rows += [f"{r},test,{k},{a - (0.5 if r == 5 else 0)},10" for r in (5, 10) for k, a in enumerate(accuracies)]
        (folder / "client_accuracy.csv").write_text("\n".join(rows) + "\n")
        return Run(name, seed, folder, ())

    # Every client loses 0.1 in seed 0 and 0.3 in seed 1 at the final round (10): the change is
    # -0.1 and -0.3 whoever the Byzantine clients are; mean -0.2, t interval 12.706 x 0.1414 / sqrt(2).
    clean = [run("clean", 0, [0.5, 0.6, 0.7, 0.8]), run("clean", 1, [0.9, 0.9, 0.9, 0.9])]
    attacked = [run("attacked", 0, [0.4, 0.5, 0.6, 0.7]), run("attacked", 1, [0.6, 0.6, 0.6, 0.6])]
    change = robust.paired_drop(attacked, clean, 0.25, 4)
    assert change.n == 2 and change.mean == pytest.approx(-0.2)
    assert change.ci == pytest.approx(12.706204736 * 0.1414213562 / 2 ** 0.5, rel=1e-6)
