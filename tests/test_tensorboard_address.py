"""``make tensorboard`` prints an address that opens Time Series on the fairness scalars (issue 26)."""

from __future__ import annotations

import json
import urllib.parse

from lightning_fl.apps import tensorboard as tb


def test_the_address_pins_each_reported_metrics_table_columns_accuracy_first(tmp_path) -> None:
    for run, header in (("regression/version_0", "stage,round,mse_mean,mse_worst20,mse_best20,mse_var"),
                        ("fedfa/version_0", "stage,round,acc_mean,acc_worst20,acc_best20,acc_var,jain")):
        (tmp_path / run).mkdir(parents=True)
        (tmp_path / run / "fairness_history.csv").write_text(header + "\nval,5,1,2,3,4\n")
    metrics = tb.declared_metrics(tb._headers(tmp_path))
    url = urllib.parse.urlsplit(tb.address(6006, metrics))
    assert (url.netloc, url.fragment) == ("localhost:6006", "timeseries")
    pins = json.loads(urllib.parse.parse_qs(url.query)["pinnedCards"][0])
    assert [p["tag"] for p in pins] == ["test/acc_mean", "test/acc_worst20", "test/acc_best20", "test/acc_var",
                                        "test/mse_mean", "test/mse_worst20", "test/mse_best20", "test/mse_var"]
    assert {p["plugin"] for p in pins} == {"scalars"}
    assert tb.address(6006, []) == "http://localhost:6006/#timeseries"


def test_a_missing_log_folder_is_one_line(tmp_path, capsys) -> None:
    assert tb.main(["--logdir", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--logdir" in err and "is not a folder" in err
