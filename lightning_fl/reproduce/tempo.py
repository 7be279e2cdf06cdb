"""Tempo (ICASSP 2022) Table 1 and Fig. 2 on Fashion-MNIST: time to a target accuracy, Tempo against FedAdp."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from statistics import fmean
from typing import Any

import yaml

from lightning_fl.reproduce.claims import Claim
from lightning_fl.reproduce.paper import Metric, Paper, SettingResults
from lightning_fl.reproduce.settings import Setting
from lightning_fl.reproduce.targets import (
    estimated_seconds_to_target,
    reached,
    rounds_to_target,
    seconds_over_institution_link,
)

#: The Fashion-MNIST experiment: data and model (its header describes the data setting).
FMNIST = "configs/experiments/tempo_fmnist.yaml"
#: Tempo runs FedAvg at both levels (paper eqs. 4, 6) with adaptive epochs; the baseline FedAdp at both
#: levels with a fixed tau_c of 4, 6 or 8 (section 4). The shipped three-layer configs carry these
#: callbacks and the network model; the data and model are switched to the Fashion-MNIST experiment's.
METHODS = {"Tempo": "configs/tempo_synthetic.yaml", "FedAdp-E4": "configs/fedadp_e4_hierarchy_synthetic.yaml",
           "FedAdp-E6": "configs/fedadp_e6_hierarchy_synthetic.yaml",
           "FedAdp-E8": "configs/fedadp_e8_hierarchy_synthetic.yaml"}
#: Table 1's FedAdp column is the least time over tau_c 4, 6, 8; here per seed and metric.
BEST = {"FedAdp-best": ["FedAdp-E4", "FedAdp-E6", "FedAdp-E8"]}
#: Tuned on the validation splits: FedAdp at tau_c = 6 selects the client lr, which the other two and Tempo
#: take (none has another grid parameter). The paper uses one lr (0.01) for every method, and its claims are
#: about the local epochs, so Tempo shares the selected lr rather than keep 0.01 against tuned baselines.
BASELINES = ("FedAdp-E6", "FedAdp-E4", "FedAdp-E8", "Tempo")
FEDADP_BOTH_LEVELS = {"model.hierarchy.institution_aggregation": "fedadp"}

#: Report name -> (per-client Dirichlet concentration rho over 10 classes, Table 1's target accuracy).
#: rho = alpha * 10 for the paper's Dir(alpha); "IID" is rho = 1e5: every client's class mix is the
#: population's to within 1% (600 samples, like the others; an IID split of 60,000 gives 300 each).
DISTRIBUTIONS = {"Dir(0.1)": (1.0, 0.850), "Dir(1)": (10.0, 0.855), "IID": (1e5, 0.859)}
#: Table 1, Fashion-MNIST, hours -> seconds (FedAdp: the best of tau_c 4, 6, 8).
_HOURS = {"Dir(0.1)": (10.66, 8.82), "Dir(1)": (8.04, 7.93), "IID": (7.35, 7.34)}
PAPER_VALUES = {(setting, method, key): 3600.0 * hours for setting, pair in _HOURS.items()
                for method, hours in zip(("FedAdp-best", "Tempo"), pair, strict=True) for key in ("seconds", "seconds_wan")}
#: A communication-bound deployment like the paper's (institutions reach the server over a limited wide-area
#: link): 1 Mbit/s and 100 ms instead of the configs' 10 Mbit/s and 50 ms. LeNet-5's 247 kB then take about
#: 4 s per global iteration each way and back, against about 1 s of compute (our choice; the paper gives no link).
WAN_MBPS, WAN_LATENCY_MS = 1.0, 100.0
PAPER_VALUES[("Dir(0.1)", "Tempo", "accuracy")] = 85.37  # Fig. 2 / section 4: Tempo's highest accuracy

#: Small scale: the target on the global test accuracy, global iterations and clients (5 institutions);
#: sized by a measured seed: the four methods took 9 CPU-minutes (3 seeds, 2 at a time: ~13 minutes).
SMALL_TARGET, SMALL_ROUNDS, SMALL_CLIENTS = 0.65, 12, 20
#: The paper does not state its number of global iterations; 50 as configs/experiments/tempo_fmnist.yaml's
#: paper-scale override.
PAPER_ROUNDS = 50


def _final_accuracy(results: SettingResults, method: str, seed: int) -> float:
    """The global test accuracy (Fig. 2's) at the last global iteration, in percent."""
    return 100.0 * results.final(method, seed, "acc_pooled")


METRICS = {
    "seconds": Metric("Estimated time to target, 10 Mbit/s link (s)", estimated_seconds_to_target, digits=1,
                      higher_is_better=False),
    "seconds_wan": Metric("Estimated time to target, 1 Mbit/s link (s)",
                          seconds_over_institution_link(WAN_MBPS, WAN_LATENCY_MS), digits=1, higher_is_better=False),
    "rounds": Metric("Global iterations to target", rounds_to_target, digits=1, higher_is_better=False),
    "reached": Metric("Reached the target (fraction of seeds)", reached, digits=2),
    "accuracy": Metric("Final test accuracy (%)", _final_accuracy),
}


def _claims() -> list[Claim]:
    """Table 1: Tempo reaches the target in less time than FedAdp at its best tau_c, most clearly on
    Dir(0.1); Fig. 2 (Dir(0.1)): in fewer global iterations, and to the highest accuracy. The paper's
    hours are a GPU deployment's wall time and ours an estimate (CPU compute plus a network model), so
    the time claims carry no paper numbers: their direction and interval are judged, not the gap's size.
    Both network models are judged: the configs' (compute weighs more) and a communication-bound one."""
    claims = []
    for setting in DISTRIBUTIONS:
        claims.append(Claim(setting, "Tempo", "FedAdp-best", "seconds", False, "Table 1"))
        claims.append(Claim(setting, "Tempo", "FedAdp-best", "seconds_wan", False, "Table 1"))
    claims.append(Claim("Dir(0.1)", "Tempo", "FedAdp-best", "rounds", False, "Fig. 2, section 4"))
    claims.append(Claim("Dir(0.1)", "Tempo", "FedAdp-best", "accuracy", True, "Fig. 2, section 4",
                        paper_ours=PAPER_VALUES[("Dir(0.1)", "Tempo", "accuracy")]))
    return claims


@cache
def _fmnist() -> dict[str, Any]:
    return yaml.safe_load(Path(FMNIST).read_text())


def _changes(rho: float, target: float, clients: int, size: int, subsample: float, rounds: int) -> dict[str, Any]:
    """Dotted changes common to the four methods: the Fashion-MNIST data and LeNet-5 of the experiment."""
    data = _fmnist()["data"]
    partition = {**data["init_args"]["partition"],
                 "init_args": {**data["init_args"]["partition"]["init_args"], "rho": rho, "size": size}}
    return {"data": {**data, "init_args": {**data["init_args"], "num_clients": clients, "partition": partition,
                                           "subsample": subsample}},
            "model.client": _fmnist()["model"]["client"], "trainer.max_epochs": rounds,
            "trainer.check_val_every_n_epoch": 1,
            # The paper's target is on the global model's test accuracy; nothing is selected or stopped on it.
            "callbacks.RoundsToTarget.monitor": "test/acc_pooled", "callbacks.RoundsToTarget.target": target}


def _settings(scale: str) -> list[Setting]:
    changes = {m: FEDADP_BOTH_LEVELS for m in METHODS if m != "Tempo"}
    if scale == "smoke":
        # The shipped synthetic data (no download): a check of the pipeline, not of the paper.
        common = {"trainer.max_epochs": 1, "trainer.check_val_every_n_epoch": 1, "data.init_args.num_samples": 300,
                  "data.init_args.num_clients": 6, "model.hierarchy.num_institutions": 3,
                  "model.hierarchy.local_rounds": 1, "callbacks.RoundsToTarget.monitor": "test/acc_pooled",
                  "callbacks.RoundsToTarget.target": 0.5}
        methods = {m: METHODS[m] for m in ("Tempo", "FedAdp-E4", "FedAdp-E8")}
        return [Setting("Dir(0.1)", methods, common, changes, {"FedAdp-best": ["FedAdp-E4", "FedAdp-E8"]},
                        tuned_methods=("FedAdp-E4", "FedAdp-E8", "Tempo"))]
    if scale == "small":
        common = _changes(DISTRIBUTIONS["Dir(0.1)"][0], SMALL_TARGET, SMALL_CLIENTS, 100, 0.34, SMALL_ROUNDS)
        return [Setting("Dir(0.1)", METHODS, common, changes, BEST, BASELINES)]
    return [Setting(name, METHODS, _changes(rho, target, 200, 600, 1.0, PAPER_ROUNDS), changes, BEST, BASELINES)
            for name, (rho, target) in DISTRIBUTIONS.items()]


def _scaled_down(scale: str) -> list[str]:
    lines = [("Time is the estimated deployment time (`net/elapsed_seconds`; docs/algorithms.md,"
              " Communication accounting): per global iteration, the compute of each institution's slowest client, measured on"
              " this CPU while the other runs share it, plus transfers over 100 Mbit/s client links and a 10 Mbit/s"
              " institution-server link. The paper measured wall time on GPUs with the server behind a limited cloud"
              " link, where communication took most of the time (so its time follows the global iterations); in"
              " our estimate compute weighs more, and Tempo's closest institutions train 2c = 12 epochs. So the"
              " table also gives the time over a communication-bound institution-server link (1 Mbit/s, 100 ms:"
              " about 4 s of transfers per global iteration against about 1 s of compute; computed from the same"
              " runs: the estimate plus, per global iteration to the target, the difference of the two links'"
              " transfer times). A run that never reaches the target counts its whole length."),
             ("Each seed draws its own partition (`data.init_args.seed` = seed), the same for all methods; 10% of"
              " each client's samples are held out for validation, so clients train on 90% of theirs; the target"
              " is on the global test accuracy (`test/acc_pooled`, the official test set), as in the paper.")]
    if scale == "paper":
        return [("Nothing in the setting (5 institutions x 40 clients, tau_i = 4, 600 samples per client drawn with"
                 " replacement, B = 10, lr 0.01, LeNet-5, c = 6, FedAdp tau_c 4, 6, 8, Table 1's targets);"
                 f" {PAPER_ROUNDS} global iterations."), *lines]
    if scale == "smoke":
        return [("Smoke scale: synthetic data, 3 institutions x 2 clients, 1 iteration, Tempo against FedAdp-E4 and"
                 " FedAdp-E8; a check of the pipeline, not of the paper."), *lines]
    return [(f"Dir(0.1) only (Table 1 row 3, the headline; Dir(1) and IID run at scale `paper`); 5 institutions x"
             f" {SMALL_CLIENTS // 5} clients instead of x 40, 100 samples per client instead of 600 (drawn from 34% of"
             f" the training images; tested on 34% of the test set), {SMALL_ROUNDS} global iterations; target test"
             f" accuracy {100 * SMALL_TARGET:.0f}% instead of 85.0%, which 20 clients do not reach."), *lines]


def _discussion(verdicts, values, tuned) -> str:
    """Tempo against each fixed tau_c and against the per-seed best of them, from the measured values."""
    def mean(method: str, key: str) -> float | None:
        v = values.get(("Dir(0.1)", method, key))
        return fmean(v) if v else None

    tempo, rounds = mean("Tempo", "seconds_wan"), mean("Tempo", "rounds")
    members = {m: mean(m, "seconds_wan") for m in BEST["FedAdp-best"]}
    if tempo is None or rounds is None or None in members.values():
        return ""
    slower = [m for m, t in members.items() if t > tempo]
    return (f"Over the 1 Mbit/s link Tempo needs {tempo:.1f} s on average, against "
            + ", ".join(f"{t:.1f} s for {m}" for m, t in members.items())
            + (f": less than {' and '.join(slower)} alone" if slower else "")
            + ". FedAdp-best takes, per seed, the least of the three, a choice known only after running all"
            " three (Table 1 reports FedAdp the same way), so it is a stronger baseline than any one tau_c. And"
            f" the small scale's target is reached after {rounds:.1f} global iterations on average, which leaves"
            " Tempo's adaptation, which changes the epochs from one global iteration to the next, little room"
            " to pay off (the paper's targets, 85.0-85.9%, are far later in training).")


PAPER = Paper(
    key="tempo",
    title="Tempo (ICASSP 2022), Table 1 and Fig. 2",
    experiment=("The paper trains LeNet-5 on Fashion-MNIST in a three-layer federation (5 institutions x 40 clients,"
                " tau_i = 4 institution rounds per global iteration, 600 samples per client, B = 10, lr 0.01) and"
                " reports the wall time to a target test accuracy (Table 1) for Tempo (adaptive local epochs, c = 6)"
                " and for FedAdp at both levels with a fixed tau_c of 4, 6 or 8, at its best tau_c (FedAdp-best"
                " here: per seed the best of the three runs); Fig. 2 shows the accuracy per global iteration on"
                " Dir(0.1). We run the same methods on Fashion-MNIST with the per-client Dirichlet partition and"
                " report the estimated time and the global iterations to the target. Table 1 prints hours; the"
                " table shows them in seconds."),
    settings=_settings,
    metrics=METRICS,
    claims=_claims(),
    paper_values=PAPER_VALUES,
    scaled_down=_scaled_down,
    discussion=_discussion,
    methods_note=("Methods as the paper: Tempo with FedAvg at institutions and server (eqs. 4, 6), FedAdp (alpha = 5)"
                  " at both levels (`model.hierarchy.institution_aggregation: fedadp`). The paper uses one client lr (0.01)"
                  " for every method; here FedAdp at tau_c = 6 selects it on the validation splits and all four"
                  " methods use it, so the claims compare the local-epoch schedules at one tuned lr. The paper's"
                  " Tempo needs 17% less time than FedAdp on Dir(0.1), 1.4% on Dir(1) and 0.1% on IID; the time"
                  " claims judge the direction and its interval only, as our time is an estimate on another"
                  " machine."),
)
