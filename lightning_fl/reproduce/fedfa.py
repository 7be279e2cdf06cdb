"""FedFa Table 2 (and Table 3's FedFa-mo) on the four Synthetic federations."""

from __future__ import annotations

from statistics import fmean

from lightning_fl.reproduce.claims import Claim
from lightning_fl.reproduce.paper import Metric, Paper
from lightning_fl.reproduce.settings import Setting

#: Report name -> ``SyntheticDataModule`` variant, in the paper's order (increasing heterogeneity).
VARIANTS = {"Synthetic-IID": "iid", "Synthetic(0,0)": "0_0", "Synthetic(0.5,0.5)": "0.5_0.5", "Synthetic(1,1)": "1_1"}
METHODS = {"FedAvg": "configs/fedavg_synthetic.yaml", "FedProx": "configs/fedprox_synthetic.yaml",
           "q-FFL": "configs/qffl_synthetic.yaml", "FedFa-mo": "configs/fedfa_mo_synthetic.yaml",
           "FedFa": "configs/fedfa_synthetic.yaml"}
#: Table 2 and Table 3's columns, in the paper's order.
COLUMNS = ("average", "worst20", "best20", "variance")
#: The methods FedFa is compared with: Table 2's baselines, then Table 3's ablation.
OTHERS = ("FedAvg", "FedProx", "q-FFL", "FedFa-mo")

#: Table 2 (FedAvg, FedProx, q-Fair = q-FFL, FedFa) and Table 3 (FedFa-mo): Average, Worst 20%, Best 20%, Variance.
_PRINTED = {
    "Synthetic-IID": {"FedAvg": (89.11, 78.17, 100.00, 68.04), "FedProx": (71.92, 55.46, 86.09, 129.09),
                      "q-FFL": (83.22, 60.70, 99.21, 204.49), "FedFa-mo": (80.11, 60.90, 96.05, 151.76),
                      "FedFa": (85.70, 71.46, 100.00, 98.74)},
    "Synthetic(0,0)": {"FedAvg": (54.67, 6.81, 98.18, 1112.46), "FedProx": (75.02, 37.21, 100.00, 611.10),
                       "q-FFL": (73.79, 28.29, 100.00, 809.76), "FedFa-mo": (78.06, 24.21, 100.00, 971.18),
                       "FedFa": (78.25, 43.41, 100.00, 530.27)},
    "Synthetic(0.5,0.5)": {"FedAvg": (40.24, 0.00, 98.18, 1448.46), "FedProx": (67.84, 33.60, 100.00, 618.00),
                           "q-FFL": (71.67, 30.99, 100.00, 732.20), "FedFa-mo": (73.06, 31.12, 100.00, 740.16),
                           "FedFa": (73.30, 41.27, 100.00, 464.81)},
    "Synthetic(1,1)": {"FedAvg": (54.78, 1.38, 96.85, 1069.37), "FedProx": (64.75, 9.72, 100.00, 1088.87),
                       "q-FFL": (72.78, 25.24, 100.00, 887.05), "FedFa-mo": (76.44, 27.48, 100.00, 818.90),
                       "FedFa": (76.88, 37.03, 100.00, 603.69)},
}
PAPER_VALUES = {(setting, method, metric): value
                for setting, rows in _PRINTED.items() for method, numbers in rows.items()
                for metric, value in zip(COLUMNS, numbers, strict=True)}

#: Claims section 4.3 words as other than "better": "In the IID synthetic dataset, our method is slightly inferior
#: to FedAvg" (said of the average, which the next sentence says improves "except for the IID" federation), and
#: Table 3's "the average accuracy of both is close" (FedFa and FedFa-mo; on the non-IID federations, where the
#: printed gap is 0.19-0.44 points; on Synthetic-IID it is 5.59 points, which "close" cannot describe).
WORDED = {("Synthetic-IID", "FedAvg", "average"): "slightly_better",
          **{(setting, "FedFa-mo", "average"): "comparable" for setting in list(VARIANTS)[1:]}}


def _final(metric: str, scale: float):
    return lambda results, method, seed: scale * results.final(method, seed, metric)


METRICS = {
    "average": Metric("Average (%)", _final("acc_mean", 100.0)),
    "worst20": Metric("Worst 20% (%)", _final("acc_worst20", 100.0)),
    "best20": Metric("Best 20% (%)", _final("acc_best20", 100.0)),
    "variance": Metric("Variance", _final("acc_var", 1.0), higher_is_better=False),
}


#: Tuned on the validation splits (FedAvg selects the client lr); FedFa and its FedFa-mo ablation keep
#: the paper's settings (at scale small: the configs' momenta, see :func:`_scaled_down`).
BASELINES = ("FedAvg", "FedProx", "q-FFL")
#: The validation metric each method is selected on. q-FFL's q trades average accuracy for uniformity, so
#: selecting it on the average would favour q -> 0 (plain FedAvg) and test a fairness method by what it gives
#: up; it is selected on the worst 20%, the fairness column its claims are read on first. FedAvg and FedProx
#: aim at accuracy, as do FedFa's double momenta (section 4.3 claims its average first): the average.
OBJECTIVES = {"FedAvg": "val/acc_mean", "FedProx": "val/acc_mean", "q-FFL": "val/acc_worst20",
              "FedFa-mo": "val/acc_mean", "FedFa": "val/acc_mean"}


def claims_from_table(printed: dict[str, dict[str, tuple[float, ...]]]) -> list[Claim]:
    """Every comparison Tables 2 and 3 make for FedFa, each in the direction of the printed numbers.

    FedFa against each of :data:`OTHERS` on every column: where FedFa's number is ahead the claim is
    "FedFa better", where it is behind (FedAvg on Synthetic-IID) the claim is the paper's reverse, "FedAvg
    better"; equal numbers (the Best 20% columns' many 100.00) are "comparable", and :data:`WORDED` gives
    the section's own wording. A setting's primary claim: FedFa's worst 20% against the strongest Table 2
    baseline it beats there (the highest printed worst 20% below FedFa's). Section 4.3 presents FedFa as
    the remedy for the fairness problem of the worst 20% devices ("FedFa ... 37.03% on the worst 20% devices
    which is 12.03% better than q-Fair"), and beating the strongest baseline is its hardest such claim.

    Args:
        printed: ``{setting: {method: (average, worst 20%, best 20%, variance)}}`` as printed.

    Returns:
        The claims, setting by setting, in the order of :data:`OTHERS` and :data:`COLUMNS`.
    """
    claims = []
    for setting, rows in printed.items():
        table = {method: dict(zip(COLUMNS, numbers, strict=True)) for method, numbers in rows.items()}
        fedfa = table["FedFa"]
        beaten = [m for m in OTHERS[:3] if table[m]["worst20"] < fedfa["worst20"]]
        primary = max(beaten, key=lambda m: table[m]["worst20"]) if beaten else None
        for other in OTHERS:
            source = "Table 3" if other == "FedFa-mo" else "Table 2"
            for metric in COLUMNS:
                theirs = table[other][metric]
                higher = metric != "variance"
                ahead = (fedfa[metric] - theirs) * (1 if higher else -1)
                form = WORDED.get((setting, other, metric), "comparable" if ahead == 0 else "better")
                ours, baseline = ("FedFa", other) if ahead >= 0 else (other, "FedFa")
                claims.append(Claim(setting, ours, baseline, metric, higher, source,
                                    table[ours][metric], table[baseline][metric],
                                    primary=(other == primary and metric == "worst20"), form=form))
    return claims


def _settings(scale: str) -> list[Setting]:
    if scale == "smoke":
        common = {"trainer.max_epochs": 2, "trainer.check_val_every_n_epoch": 1, "data.init_args.num_clients": 6,
                  "data.init_args.max_samples_per_client": 40, "model.clients_per_round": 3, "model.local_epochs": 1}
        methods = ("FedAvg", "FedFa")
        return [Setting("Synthetic(1,1)", {m: METHODS[m] for m in methods},
                        {**common, "data.init_args.variant": "1_1"}, tuned_methods=("FedAvg",),
                        objectives={m: OBJECTIVES[m] for m in methods})]
    settings = []
    for name, variant in VARIANTS.items():
        common = {"data.init_args.variant": variant, "trainer.check_val_every_n_epoch": 5}
        # The weights' bar chart every 10 rounds, not every round: drawing it would otherwise dominate FedFa's
        # time per round (the histogram is still logged every round).
        figures = {"FedFa": {"callbacks.FedFa.figure_every_n_rounds": 10},
                   "FedFa-mo": {"callbacks.FedFaMo.figure_every_n_rounds": 10}}
        changes = dict(figures)
        if scale == "paper":
            # Section 4.1: 10 devices per round, E = 20, lr 0.01 for the baselines and 0.0001 for FedFa,
            # client momentum 0.9 on the two left federations and 0.5 on the others, server momentum 0.5, q = 1;
            # 200 rounds as in the FedProx paper whose synthetic setting FedFa uses.
            common |= {"trainer.max_epochs": 200, "model.local_epochs": 20}
            client_momentum = 0.9 if variant in ("iid", "0_0") else 0.5
            fedfa = {"model.optimizer.init_args.lr": 0.0001, "model.optimizer.init_args.momentum": client_momentum}
            changes = {"FedFa": {**figures["FedFa"], **fedfa}, "FedFa-mo": {**figures["FedFa-mo"], **fedfa},
                       "FedProx": {"callbacks.FedProx.mu": 1.0}}
        # Every method, FedFa and FedFa-mo included, gets the same tuning budget (tuned_methods: all).
        settings.append(Setting(name, METHODS, common, changes, objectives=OBJECTIVES))
    return settings


def _scaled_down(scale: str) -> list[str]:
    if scale == "paper":
        return [("Nothing in the setting (30 devices, 10 per round, E = 20, 200 rounds, batch 10, the learning rates and"
                " momenta of section 4.1); the data are our Synthetic(alpha, beta) generator, FedProx's, drawn anew"
                " for each seed.")]
    lines = [("E = 2 local epochs instead of 20 and 60 rounds (the paper trains until convergence; FedProx's"
             " synthetic runs use 200)."),
             ("Every method's hyperparameters are selected on the validation splits with the same budget (below):"
             " the client lr of all five, FedFa's and FedFa-mo's client and server momenta, FedProx's mu and q-FFL's"
             " q, q-FFL on its worst 20% and the others on their average accuracy (the paper: lr 0.0001 for FedFa with"
             " client momentum 0.9 or 0.5, which needs far more than 60 rounds; with `TUNE=0` every method keeps the"
             " shipped configs' lr 0.01, momenta 0.5, mu = 0.01 and q = 1)."),
             ("The federation is drawn anew for each seed (`data.init_args.seed` = seed), the same for all methods;"
             " 10% of each client's training data is held out for validation, so clients train on 72% of their"
             " samples instead of 80%.")]
    if scale == "smoke":
        lines.insert(0, "Smoke scale: 6 clients, 2 rounds, only FedAvg and FedFa; a check of the pipeline, not of the paper.")
    return lines


def _not_run(scale: str) -> list[str]:
    lines = [("Tables 2 and 3's Femnist and Sent140 rows (LEAF's real federations): only the four synthetic"
              " federations run here."),
             ("Figs. 2-6 (training curves against SCAFFOLD and FedNova, at client lr 0.01, 0.001 and 0.0001, on"
              " real and Dirichlet federations): not run; each setting's `curves.png` has the five methods' curves."),
             ("Figs. 8 and 9 (the sweep of alpha and beta on Synthetic(1,1) and MNIST): FedFa runs alpha = beta ="
              " 0.5 only; section 4.3 names (0.5, 0.5), (0, 1) and (1, 0) without saying which gives Table 2's"
              " numbers.")]
    if scale == "smoke":
        lines.insert(0, ("FedProx, q-FFL, FedFa-mo and three of the four federations: the smoke scale runs FedAvg and"
                         " FedFa on Synthetic(1,1) only, so 4 of the claims are judged."))
    return lines


def _mean(values, key) -> float | None:
    return fmean(values[key]) if key in values else None


def _discussion(verdicts, values, tuned) -> str:
    """Likely reasons, from the measured values: seed spread, the baselines' settings, IID, the 100% ceiling."""
    lines = []
    short = [v for v in verdicts if v.verdict != "reproduced" and v.claim.in_paper]
    spread = sorted({v.claim.setting for v in short if v.claim.metric == "average" and v.claim.form == "better"
                     and v.claim.setting != "Synthetic-IID"}, key=list(VARIANTS).index)
    stds = {}
    for setting in spread:
        vals = values.get((setting, "FedAvg", "average"), [])
        if len(vals) > 1:
            mean = sum(vals) / len(vals)
            stds[setting] = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5
    if stds:
        lines.append("Average accuracy: FedAvg's varies by " + ", ".join(f"±{sd:.1f} points on {name}"
                     for name, sd in stds.items()) + " across seeds (each seed draws a new federation), so the"
                     " interval of FedFa's gain in average accuracy, widened by Holm's correction over the paper's"
                     " claims, can include 0 even where the gain is large; the worst-20% and variance claims, whose per-seed differences vary less,"
                     " are the sharper evidence. More seeds (`SEEDS=10`) narrow the intervals.")
    fedavg, fedprox = _mean(values, ("Synthetic(1,1)", "FedAvg", "average")), _mean(values, ("Synthetic(1,1)", "FedProx", "average"))
    if fedavg is not None and fedprox is not None and abs(fedavg - fedprox) < 1.0:
        selected = tuned.get("Synthetic(1,1)", {}).get("FedProx")
        why = (f"the validation splits selected {selected} for it; at a small lr and E = 2 the local models drift"
               " little from the global one, so the proximal term has little to pull back" if selected
               else "with the config's mu = 0.01 the proximal term barely acts at E = 2, and the baselines were not"
                    " tuned (`TUNE=0`)")
        lines.append(f"FedProx ({fedprox:.1f}%) is within a point of FedAvg ({fedavg:.1f}%) on Synthetic(1,1): {why}.")
    iid = [v for v in short if v.claim.setting == "Synthetic-IID" and v.claim.metric == "average"]
    avg, fa = _mean(values, ("Synthetic-IID", "FedAvg", "average")), _mean(values, ("Synthetic-IID", "FedFa", "average"))
    if iid and avg is not None and fa is not None:
        lr = tuned.get("Synthetic-IID", {}).get("FedAvg")
        if avg > fa:
            lines.append(f"Synthetic-IID: FedAvg is ahead of FedFa ({avg:.1f}% against {fa:.1f}%), as in the paper"
                         " (89.1% against 85.7%, \"slightly inferior\"), and " + ", ".join(v.claim.text for v in iid)
                         + " fall short: FedFa runs at the configs' lr 0.01 with momentum, "
                         + (f"the baselines at the settings their validation splits selected (FedAvg: {lr})." if lr
                            else "the baselines at the configs' settings (`TUNE=0`)."))
        else:
            lines.append(f"Synthetic-IID: the paper has FedAvg slightly ahead of FedFa (89.1% against 85.7%); here"
                         f" FedAvg reaches {avg:.1f}% and FedFa {fa:.1f}%. Likely reason: at this scale (E = 2, 60"
                         " rounds) FedAvg has not converged (the paper's 89% is near convergence), and FedFa's double"
                         " momentum converges faster, so the ranking of converged models is not what a short run"
                         " measures.")
    ceiling = [v for v in short if v.claim.metric == "best20" and v.claim.form == "better"
               and min(_mean(values, (v.claim.setting, m, "best20")) or 0.0 for m in (v.claim.ours, v.claim.baseline)) >= 99.0]
    if ceiling:
        lines.append("Best 20%: in " + ", ".join(f"{v.claim.text} ({v.claim.setting})" for v in ceiling) + " both"
                     " methods' best clients are at 99-100% here, so the column cannot separate them; the paper's"
                     " gaps there come from the baseline's best clients falling short of 100%.")
    return "\n\n".join(lines)


PAPER = Paper(
    key="fedfa",
    title="FedFa (Information Sciences 2022), Table 2 and Table 3",
    experiment=("The paper compares FedAvg, FedProx, q-Fair (q-FFL), FedFa-mo (double momentum only) and FedFa on"
                " four Synthetic federations of increasing heterogeneity (30 devices, 10 sampled per round, 80/20"
                " train/test split per device) and reports the distribution of the devices' final test accuracy:"
                " average, worst 20%, best 20% and variance. We run the same five methods on the same four"
                " federations from FedProx's generator; every comparison of FedFa the two tables print is a claim."),
    settings=_settings,
    metrics=METRICS,
    claims=claims_from_table(_PRINTED),
    paper_values=PAPER_VALUES,
    scaled_down=_scaled_down,
    not_run=_not_run,
    discussion=_discussion,
)
