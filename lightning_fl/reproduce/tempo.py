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
from lightning_fl.reproduce.targets import configured_target, fraction_of_final, reached_by, rounds_to, seconds_to

#: The Fashion-MNIST experiment: data and model (its header describes the data setting).
FMNIST = "configs/experiments/tempo_fmnist.yaml"
#: Tempo runs FedAvg at both levels (paper eqs. 4, 6) with adaptive epochs; the baseline FedAdp at both
#: levels with a fixed tau_c of 4, 6 or 8 (section 4). The shipped three-layer configs carry these
#: callbacks and the network model; the data and model are switched to the Fashion-MNIST experiment's.
METHODS = {"Tempo": "configs/tempo_synthetic.yaml", "FedAdp-E4": "configs/fedadp_e4_hierarchy_synthetic.yaml",
           "FedAdp-E6": "configs/fedadp_e6_hierarchy_synthetic.yaml",
           "FedAdp-E8": "configs/fedadp_e8_hierarchy_synthetic.yaml"}
FEDADP = ("FedAdp-E4", "FedAdp-E6", "FedAdp-E8")
#: Table 1's FedAdp column is the least time over tau_c 4, 6, 8; here per seed and metric.
BEST = {"FedAdp-best": list(FEDADP)}
FEDADP_BOTH_LEVELS = {"model.hierarchy.institution_aggregation": "fedadp"}
#: Section 4: one client lr for every method. Nothing is tuned: the claims are about the local-epoch
#: schedules at the paper's lr (FedAdp's alpha = 5 is its own paper's); an equal budget of zero trials.
PAPER_LR = 0.01
#: What a tuned run of the setting would be selected on: the accuracy the targets are set on.
OBJECTIVES = {m: "val/acc_pooled" for m in METHODS}

#: Report name -> (per-client Dirichlet concentration rho over 10 classes, Table 1's target accuracy,
#: Table 1's hours for FedAdp at its best tau_c and for Tempo). rho = alpha * 10 for the paper's Dir(alpha);
#: "IID" is rho = 1e5: every client's class mix is the population's to within 1%.
TABLE1 = {"Dir(0.1)": (1.0, 0.850, 10.66, 8.82), "Dir(1)": (10.0, 0.855, 8.04, 7.93), "IID": (1e5, 0.859, 7.35, 7.34)}
DISTRIBUTIONS = {name: (rho, target) for name, (rho, target, _, _) in TABLE1.items()}
#: Fig. 2 (Dir(0.1)): iterations to 84% ("for instance, 84%"); Tempo's highest accuracy 85.37%.
FIG2_TARGET, FIG2_TEMPO_ACCURACY = 0.84, 85.37
#: Table 1 in seconds, beside both of our time columns.
PAPER_VALUES = {(setting, method, key): 3600.0 * hours for setting, (_, _, *pair) in TABLE1.items()
                for method, hours in zip(("FedAdp-best", "Tempo"), pair, strict=True) for key in ("seconds", "seconds_wan")}
PAPER_VALUES[("Dir(0.1)", "Tempo", "accuracy")] = FIG2_TEMPO_ACCURACY
#: A communication-bound deployment like the paper's (institutions reach the server over a limited wide-area
#: link): 1 Mbit/s and 100 ms instead of the configs' 10 Mbit/s and 50 ms. LeNet-5's 247 kB then take about
#: 4 s per global iteration each way and back (our choice; the paper gives no link).
WAN_MBPS, WAN_LATENCY_MS = 1.0, 100.0
#: Compute is modelled, not measured: one LeNet-5 step on a minibatch of 10 costs 3 ms (measured on one core
#: of the 2-core CPU these runs were sized on: 2.7 ms at best, up to 4.6 ms while other work shared it).
SECONDS_PER_STEP = 0.003

#: Small scale: 84% is out of reach of 10 clients with 100 samples each (FedAdp-E6 ends at 67.7% after 20
#: global iterations, seed 0; 74.3% with 20 clients), so the target is a declared fraction of the
#: reference's final test accuracy in the same seed (the paper's 84% is 98.4% of Tempo's final 85.37%).
#: It is reached late, at the 11th of 20 iterations in both measured runs: adaptive epochs act from the
#: second global iteration on, and a target met in the first few tests nothing. One run of FedAdp-E6 takes
#: about 2 CPU-minutes (1 min 56 s measured; 3 min 51 s with 20 clients), Tempo about 20% more.
REFERENCE, SMALL_FRACTION = "FedAdp-E6", 0.95
SMALL_ROUNDS, SMALL_CLIENTS = 20, 10
#: The paper does not state its number of global iterations; 50 as configs/experiments/tempo_fmnist.yaml's
#: paper-scale override.
PAPER_ROUNDS = 50


def _target(kind: str):
    """The target of a run: Table 1's (``time``) or Fig. 2's 84% on Dir(0.1) (``rounds``) where the setting
    keeps the configs' RoundsToTarget, else :data:`SMALL_FRACTION` of :data:`REFERENCE`'s final accuracy."""
    fraction = fraction_of_final(REFERENCE, SMALL_FRACTION)

    def target(results: SettingResults, seed: int) -> float:
        fixed = configured_target(results, REFERENCE, seed)
        if fixed is None:
            return fraction(results, seed)
        return FIG2_TARGET if kind == "rounds" and results.setting.name == "Dir(0.1)" else fixed

    return target


def _final_accuracy(results: SettingResults, method: str, seed: int) -> float:
    """The global test accuracy (Fig. 2's) at the last global iteration, in percent."""
    return 100.0 * results.final(method, seed, "acc_pooled")


METRICS = {
    "seconds_wan": Metric("Time to target, 1 Mbit/s link (s)", seconds_to(_target("time"), (WAN_MBPS, WAN_LATENCY_MS)),
                          digits=1, higher_is_better=False),
    "seconds": Metric("Time to target, 10 Mbit/s link (s)", seconds_to(_target("time")), digits=1,
                      higher_is_better=False),
    "rounds": Metric("Global iterations to target", rounds_to(_target("rounds")), digits=1, higher_is_better=False),
    "reached": Metric("Reached the target (fraction of seeds)", reached_by(_target("time")), digits=2),
    "accuracy": Metric("Final test accuracy (%)", _final_accuracy),
}


def _claims() -> list[Claim]:
    """Every comparison of Table 1 and Fig. 2's text, then the ones the paper does not make.

    Table 1 (each setting, the primary claim): Tempo reaches the target in less time than FedAdp at its
    best tau_c. Fig. 2 (Dir(0.1)): Tempo reaches 84% in fewer global iterations than FedAdp with any of
    the three tau_c, and converges to the highest accuracy. Not in the paper: Tempo's time against each
    tau_c alone, its iterations on Dir(1) and IID, and the time over the configs' faster link.
    """
    claims = []
    for setting in TABLE1:
        fig2 = setting == "Dir(0.1)"
        # Table 1's hours are a GPU deployment's wall time, ours a model of a scaled-down one: the numbers stand
        # beside ours in the results (PAPER_VALUES) and the relative saving in the discussion, but the size of
        # the gap in seconds is not comparable, so the claim is judged on its direction and interval.
        claims.append(Claim(setting, "Tempo", "FedAdp-best", "seconds_wan", False, "Table 1", primary=True))
        for member in FEDADP:
            claims.append(Claim(setting, "Tempo", member, "rounds", False,
                                "Fig. 2, section 4" if fig2 else "ours (Fig. 2 is Dir(0.1))", in_paper=fig2))
            if fig2:
                claims.append(Claim(setting, "Tempo", member, "accuracy", True, "Fig. 2, section 4",
                                    paper_ours=FIG2_TEMPO_ACCURACY))
        claims += [Claim(setting, "Tempo", member, "seconds_wan", False, "ours (Table 1: FedAdp at its best tau_c)",
                         in_paper=False) for member in FEDADP]
        claims.append(Claim(setting, "Tempo", "FedAdp-best", "seconds", False, "ours (Table 1 over a faster link)",
                            in_paper=False))
    return claims


@cache
def _fmnist() -> dict[str, Any]:
    return yaml.safe_load(Path(FMNIST).read_text())


def _changes(rho: float, target: float | None, clients: int, size: int, subsample: float, rounds: int
             ) -> dict[str, Any]:
    """Dotted changes common to the four methods: the Fashion-MNIST data and LeNet-5 of the experiment, the
    paper's lr, the modelled compute; ``target`` ``None``: no fixed target (a fraction, after the runs)."""
    data = _fmnist()["data"]
    partition = {**data["init_args"]["partition"],
                 "init_args": {**data["init_args"]["partition"]["init_args"], "rho": rho, "size": size}}
    # The paper's target is on the global model's test accuracy; nothing is selected or stopped on it.
    target_changes = ({"callbacks.RoundsToTarget": None} if target is None else
                      {"callbacks.RoundsToTarget.monitor": "test/acc_pooled",
                       "callbacks.RoundsToTarget.target": target})
    return {"data": {**data, "init_args": {**data["init_args"], "num_clients": clients, "partition": partition,
                                           "subsample": subsample}},
            "model.client": _fmnist()["model"]["client"], "model.optimizer.init_args.lr": PAPER_LR,
            "trainer.max_epochs": rounds, "trainer.check_val_every_n_epoch": 1,
            "callbacks.CommunicationCost.seconds_per_step": SECONDS_PER_STEP, **target_changes}


def _settings(scale: str) -> list[Setting]:
    changes = {m: FEDADP_BOTH_LEVELS for m in METHODS if m != "Tempo"}
    if scale == "smoke":
        # The shipped synthetic data (no download): a check of the pipeline, not of the paper.
        common = {"trainer.max_epochs": 2, "trainer.check_val_every_n_epoch": 1, "data.init_args.num_samples": 300,
                  "data.init_args.num_clients": 6, "model.hierarchy.num_institutions": 3,
                  "model.hierarchy.local_rounds": 1, "model.optimizer.init_args.lr": PAPER_LR,
                  "callbacks.CommunicationCost.seconds_per_step": SECONDS_PER_STEP, "callbacks.RoundsToTarget": None}
        methods = {m: METHODS[m] for m in ("Tempo", "FedAdp-E4", "FedAdp-E6")}
        return [Setting("Dir(0.1)", methods, common, changes, {"FedAdp-best": ["FedAdp-E4", "FedAdp-E6"]},
                        objectives=OBJECTIVES)]
    if scale == "small":
        common = _changes(DISTRIBUTIONS["Dir(0.1)"][0], None, SMALL_CLIENTS, 100, 0.34, SMALL_ROUNDS)
        return [Setting("Dir(0.1)", METHODS, common, changes, BEST, objectives=OBJECTIVES)]
    return [Setting(name, METHODS, _changes(rho, target, 200, 600, 1.0, PAPER_ROUNDS), changes, BEST,
                    objectives=OBJECTIVES) for name, (rho, target) in DISTRIBUTIONS.items()]


def _not_run(scale: str) -> list[str]:
    lines = ["Table 1's MNIST and CIFAR-10 rows (6 of its 9 comparisons; Fashion-MNIST is the dataset of Fig. 2)."]
    if scale != "paper":
        lines.append("Table 1's Fashion-MNIST Dir(1) and IID rows (and our claims there): scale `paper` only.")
    return lines


def _scaled_down(scale: str) -> list[str]:
    lines = [("Time is modelled, not measured (`net/elapsed_seconds`;"
              " docs/algorithms.md, Communication accounting): per global iteration, the slowest institution's"
              f" local steps (per local round its slowest client's) x {1000 * SECONDS_PER_STEP:g} ms, a declared"
              " cost of one LeNet-5 step on a minibatch of 10 (measured on one core of a 2-core CPU: 2.7 ms at best), plus transfers over 100"
              " Mbit/s client links and the institution-server link: the configs' 10 Mbit/s and 50 ms, and a"
              f" communication-bound {WAN_MBPS:g} Mbit/s and {WAN_LATENCY_MS:g} ms like the paper's cloud server"
              " (about 4 s of transfers per global iteration; computed from the same runs). The same runs give"
              " the same times on any machine. The paper measured wall time on GPUs. A run that never reaches"
              " the target counts its whole length."),
             ("Each seed draws its own partition (`data.init_args.seed` = seed), the same for all methods; 10% of"
              " each client's samples are held out for validation, so clients train on 90% of theirs; the target"
              " is on the global test accuracy (`test/acc_pooled`, the official test set), as in the paper.")]
    if scale == "paper":
        return [("Nothing in the setting (5 institutions x 40 clients, tau_i = 4, 600 samples per client drawn with"
                 " replacement, B = 10, lr 0.01, LeNet-5, c = 6, FedAdp tau_c 4, 6, 8, Table 1's targets for the"
                 f" time and Fig. 2's 84% for the iterations on Dir(0.1)); {PAPER_ROUNDS} global iterations."),
                *lines]
    if scale == "smoke":
        return [("Smoke scale: synthetic data, 3 institutions x 2 clients, 2 iterations, Tempo against FedAdp-E4 and"
                 " FedAdp-E6; a check of the pipeline, not of the paper."), *lines]
    return [(f"Dir(0.1) only (Table 1 row 3, the headline, and Fig. 2); 5 institutions x {SMALL_CLIENTS // 5} clients"
             f" instead of x 40, 100 samples per client instead of 600 (drawn from 34% of the training images;"
             f" tested on 34% of the test set), {SMALL_ROUNDS} global iterations. Target: {100 * SMALL_FRACTION:.0f}%"
             f" of {REFERENCE}'s final test accuracy in the same seed (declared; {SMALL_CLIENTS} clients do not reach the"
             f" paper's 84-85%; the paper's 84% is 98.4% of Tempo's final 85.37%), for both time and"
             " iterations."), *lines]


#: What a verdict means for the time claim, in the discussion's words.
_MEANING = {"contradicted": " (a significant reversal: Tempo is slower)",
            "inconclusive": " (no evidence either way)", "direction only": " (Tempo is faster on average, not significantly)",
            "reproduced in direction only": " (Tempo is faster on average, not significantly)"}


def _discussion(verdicts, values, tuned) -> str:
    """Per setting run: each method's iterations and time to the target, and the primary claim's verdict."""
    def mean(setting: str, method: str, key: str) -> float | None:
        v = values.get((setting, method, key))
        return fmean(v) if v else None

    parts = []
    for setting in TABLE1:
        run = [m for m in ("Tempo", *FEDADP) if values.get((setting, m, "rounds")) and values.get((setting, m, "seconds_wan"))]
        if "Tempo" not in run:
            continue
        rounds = {m: mean(setting, m, "rounds") for m in run}
        times = {m: mean(setting, m, "seconds_wan") for m in run}
        text = (f"{setting}: the target is reached after " + ", ".join(f"{r:.1f}" for r in rounds.values())
                + f" global iterations on average ({', '.join(rounds)}), so adaptive epochs, which act from the"
                " second iteration on, have had " + f"{rounds['Tempo'] - 1:.1f} iterations to act for Tempo."
                " Over the 1 Mbit/s link: " + ", ".join(f"{t:.1f} s for {m}" for m, t in times.items()) + ".")
        for v in verdicts:
            if v.claim.setting == setting and v.claim.primary:
                d = v.difference
                best = mean(setting, "FedAdp-best", "seconds_wan")
                _, _, fedadp_hours, tempo_hours = TABLE1[setting]
                text += (f" Table 1's claim (Tempo faster than FedAdp at its best tau_c, per seed the least of its"
                         f" members' times, a choice known only after running them all):"
                         f" {v.verdict}{_MEANING.get(v.verdict, '')}; Tempo saves"
                         f" {d.mean:+.1f} s [{d.ci_low:+.1f}, {d.ci_high:+.1f}]"
                         + (f", {100 * d.mean / best:+.1f}% of FedAdp-best's time," if best else "")
                         + f" where the paper's saves {100 * (1 - tempo_hours / fedadp_hours):.1f}%.")
        slower = [m for m in run[1:] if rounds[m] > rounds["Tempo"]]
        text += (f" Tempo needs fewer iterations than {' and '.join(slower)}." if slower
                 else " Tempo needs no fewer iterations than any fixed tau_c.")
        parts.append(text)
    return "\n\n".join(parts)


PAPER = Paper(
    key="tempo",
    title="Tempo (ICASSP 2022), Table 1 and Fig. 2",
    experiment=("The paper trains LeNet-5 on Fashion-MNIST in a three-layer federation (5 institutions x 40 clients,"
                " tau_i = 4 institution rounds per global iteration, 600 samples per client, B = 10, lr 0.01) and"
                " reports the wall time to a target test accuracy (Table 1) for Tempo (adaptive local epochs, c = 6)"
                " and for FedAdp at both levels with a fixed tau_c of 4, 6 or 8, at its best tau_c (FedAdp-best"
                " here: per seed the best of the three runs); Fig. 2 shows the accuracy per global iteration on"
                " Dir(0.1). We run the same methods on Fashion-MNIST with the per-client Dirichlet partition and"
                " report the modelled time (counted steps x a declared cost per step, plus transfers) and the"
                " global iterations to the target, with the accuracy per global iteration in `curves.png`. Table 1"
                " prints hours; the table shows them in seconds."),
    not_run=_not_run,
    settings=_settings,
    metrics=METRICS,
    claims=_claims(),
    paper_values=PAPER_VALUES,
    scaled_down=_scaled_down,
    discussion=_discussion,
    methods_note=("Methods as the paper: Tempo with FedAvg at institutions and server (eqs. 4, 6), FedAdp (alpha = 5)"
                  " at both levels (`model.hierarchy.institution_aggregation: fedadp`), all at the paper's client lr 0.01"
                  " (section 4: one lr for every method) and nothing tuned, so the claims compare the local-epoch"
                  " schedules alone. The paper's Tempo needs 17% less time than FedAdp on Dir(0.1), 1.4% on Dir(1)"
                  " and 0.1% on IID; its hours are a GPU deployment's, our seconds a model of a scaled-down one, so"
                  " the paper's numbers stand beside ours for the direction and the relative size, not the size."),
)
