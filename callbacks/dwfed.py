"""DWFed: aggregation weights from the index of statistical heterogeneity (docs/algorithms.md, DWFed)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import torch

from lightning_fl.callbacks.fedfa import log_client_weights
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.functional.dwfed import DISTANCES, distance_to_population, ish_weights
from lightning_fl.functional.weights import normalize_weights
from lightning_fl.privacy.mechanism import dp_safe_ish_weights
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation

CLIENT_LR = "client_lr"
#: ``population`` values other than a file: the public uniform ``P`` of the DP-safe variant.
UNIFORM = "uniform"
#: File types ``population`` reads.
POPULATION_FILES = (".json", ".csv", ".pt")


def load_population(path: str) -> Tensor:
    """A declared label distribution ``P`` from ``path``: ``C`` non-negative numbers, normalised to sum 1 (fp64).

    ``.json``: a list of numbers; ``.csv``: the numbers, comma- or line-separated (a first line that is not
    numeric, a header, is skipped); ``.pt``: a tensor (or list) saved with ``torch.save``.

    Raises:
        ConfigError: In one line naming ``population``, if the file is missing, of another type, unreadable,
            or not at least two finite non-negative numbers with a positive sum.
    """
    file = Path(path)
    suffix = file.suffix.lower()
    if suffix not in POPULATION_FILES:
        raise ConfigError(f"population must be '{UNIFORM}' or a {', '.join(POPULATION_FILES)} file of label"
                          f" frequencies; got {path!r}")
    if not file.is_file():
        raise ConfigError(f"population: the file {path!r} does not exist")
    try:
        if suffix == ".json":
            values = json.loads(file.read_text())
        elif suffix == ".csv":
            rows = [cell.strip() for row in csv.reader(file.read_text().splitlines()) for cell in row if cell.strip()]
            values = [float(v) for v in (rows[1:] if rows and not _is_number(rows[0]) else rows)]
        else:
            values = torch.load(file, weights_only=True)
        population = torch.as_tensor(values, dtype=torch.float64).flatten()
    except (ValueError, TypeError, RuntimeError, OSError) as err:  # json errors are ValueErrors
        raise ConfigError(f"population: cannot read {path!r} as a list of numbers ({type(err).__name__})") from None
    if population.numel() < 2 or not bool(torch.isfinite(population).all()) or bool((population < 0).any()) \
            or float(population.sum()) <= 0:
        raise ConfigError(f"population: {path!r} must hold at least two finite numbers >= 0 with a positive sum"
                          f" (one per label); got {population.tolist()[:10]}")
    return population / population.sum()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class DWFed(AggregationCallback):
    """DWFed (Frontiers 2022): weights from each client's label-distribution distance to the population.

    docs/algorithms.md, DWFed. With ``p_k`` client ``k``'s label distribution and ``P`` the normalised sum of
    *all* ``N`` clients' label histograms (train splits):

    - ``D_k = sum_c |p_k(c) - P(c)|`` (EMD between label distributions, L1 form, eq. 7; ``distance: l1``), or
      ``D_k = sum_{c=0}^{C-2} |F_k(c) - F_P(c)|`` with ``F`` the cumulative distributions over the label
      indices ``0..C-1`` (``distance: wasserstein``);
    - ``ISH_k = max(0, (1 - eta_ish D_k / K) / (1 + D_k))`` with ``K`` the cohort size (eq. 12);
    - ``alpha_k = ISH_k / sum_j ISH_j`` (times ``n_k`` before normalising with
      ``weight_by_samples``); ``w^{t+1} = sum_k alpha_k y_k``.

    Readings:

    - Eq. 7 writes an L1 sum, but the paper then remarks that the EMD changes with the order of the labels,
      which only an order-dependent distance does. ``distance: l1`` (default) takes the formula as printed;
      ``distance: wasserstein`` takes the remark: the 1-D earth mover's distance over the label indices with
      unit spacing. On equal-size 1-class or 2-class shards of a class-balanced set every client has the same
      L1 distance, so DWFed's weights are FedAvg's; under the Wasserstein reading they differ (up to about
      1.8x for 1-class and 2.7x for 2-class shards of 10 classes in a cohort of 20).
    - The server learns every client's label histogram to build ``P`` (a privacy trade-off the paper
      makes too). ``P`` covers all clients, not only the cohort.
    - ``eta_ish = 1`` is eq. 12 (default). The algorithm box writes the client learning rate ``eta``
      there instead; ``eta_ish: client_lr`` selects that variant and reads the client optimizer's
      ``lr`` (``federation.optimizer.lr``) each round.
    - If every ``ISH_k`` clamps to 0 the weights fall back to uniform (docs/algorithms.md, Server arithmetic) with a warning
      logged once; a one-client cohort gets weight 1.
    - DWFed keeps no state across rounds.

    TensorBoard (step = round number ``t + 1``): ``server/weights`` and ``server/weights_figure``
    (histogram and bar chart of ``alpha_k``) and ``server/emd`` (histogram of the cohort's ``D_k``).

    Args:
        eta_ish: ``eta`` in ``ISH_k``: a number ``>= 0`` or the string ``client_lr``. Default 1.0.
        distance: The reading of eq. 7: ``l1`` (default) or ``wasserstein``. A hyperparameter (recorded
            with the run's settings and checked on resume), not state.
        weight_by_samples: Multiply ``ISH_k`` by ``n_k`` before normalising. Default ``False``.
        figure_every_n_rounds: Log the weights bar chart every this many rounds (0: never). Default 1.
        dp_safe: The DP-safe variant (ours, not the paper's;
            docs/algorithms.md, Client-level differential privacy): a public ``P`` (``population``: uniform or
            declared) instead of one built from every client's labels, ``K := model.clients_per_round`` (the
            expected cohort ``qN``) and ``ISH_k`` never normalised over the cohort, so ``model.dp`` sums them
            over a fixed denominator.
            Not with ``weight_by_samples`` (``ISH_k n_k`` is unbounded). Without ``model.dp`` the cohort is
            averaged with ``ISH_k / sum ISH``. It always uses the L1 form (``distance: l1``).
        population: The DP-safe variant's public ``P``: ``uniform`` (default, ``1/C`` per label) or a file
            (``.json``, ``.csv`` or ``.pt``) of ``C`` non-negative label frequencies, normalised, declared
            from public knowledge (e.g. a census of the labels), never from the clients' data. Read when the
            callback is built; ``C`` is checked against the data at set-up.

    Raises:
        ConfigError: If ``eta_ish`` is negative, not finite or a string other than ``client_lr``,
            ``distance`` is not ``l1`` or ``wasserstein``, ``figure_every_n_rounds`` is not an integer
            ``>= 0``, ``dp_safe`` is combined with ``weight_by_samples`` or ``distance: wasserstein``,
            ``population`` is a file without ``dp_safe`` or not a readable distribution, or its length
            is not the data's number of labels.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.DWFed
          init_args: {eta_ish: 1.0, weight_by_samples: false, distance: l1}
    """

    supports_reduce = True  # only weighted sums of the clients' weights (model.exchange: reduce)

    def __init__(self, eta_ish: float | str = 1.0, weight_by_samples: bool = False,
                 figure_every_n_rounds: int = 1, dp_safe: bool = False, distance: str = "l1",
                 population: str = UNIFORM) -> None:
        super().__init__()
        if isinstance(eta_ish, str):
            if eta_ish != CLIENT_LR:
                raise ConfigError(f"eta_ish must be a number >= 0 or '{CLIENT_LR}'; got {eta_ish!r}")
        elif isinstance(eta_ish, bool) or not (isinstance(eta_ish, (int, float)) and math.isfinite(eta_ish)
                                               and eta_ish >= 0):
            raise ConfigError(f"eta_ish must be a number >= 0 or '{CLIENT_LR}'; got {eta_ish!r}")
        if not isinstance(weight_by_samples, bool):
            raise ConfigError(f"weight_by_samples must be true or false; got {weight_by_samples!r}")
        if isinstance(figure_every_n_rounds, bool) or not isinstance(figure_every_n_rounds, int) \
                or figure_every_n_rounds < 0:
            raise ConfigError(f"figure_every_n_rounds must be an integer >= 0; got {figure_every_n_rounds!r}")
        check_choice("distance", distance, DISTANCES)
        if dp_safe and weight_by_samples:
            raise ConfigError("dp_safe: DWFed's DP-safe weights cannot use weight_by_samples (ISH_k n_k is unbounded)")
        if dp_safe and distance != "l1":
            raise ConfigError("dp_safe: DWFed's DP-safe weights use distance l1 (against the public uniform P);"
                              f" got distance {distance!r}")
        if not isinstance(population, str):
            raise ConfigError(f"population must be '{UNIFORM}' or a path to a .json, .csv or .pt file;"
                              f" got {population!r}")
        if population != UNIFORM and not dp_safe:
            raise ConfigError("population: a declared P is the DP-safe variant's (set dp_safe: true); without it DWFed"
                              " builds P from every client's labels")
        self.population = population
        self.public_population = None if population == UNIFORM else load_population(population)
        self.eta_ish = eta_ish
        self.weight_by_samples = weight_by_samples
        self.distance = distance
        self.dp_safe = self.dp_own_weights = bool(dp_safe)
        self.figure_every_n_rounds = figure_every_n_rounds
        self._emd_cache: tuple[Any, Tensor] | None = None

    @override
    def on_federation_setup(self, federation: Federation) -> None:
        # Real-valued targets have empty label histograms: every EMD would be 0 and the weights silently uniform.
        if federation.num_classes == 0:
            raise ConfigError("DWFed weights clients by their label distributions; this data has real-valued targets"
                              " (num_classes 0, e.g. SyntheticRegressionDataModule): use another aggregation")
        if self.public_population is not None and len(self.public_population) != federation.num_classes:
            raise ConfigError(f"population: {self.population!r} holds {len(self.public_population)} frequencies; the"
                              f" data has {federation.num_classes} labels")

    def eta(self, federation: Federation) -> float:
        """The ``eta`` used in ``ISH_k`` (the client lr for ``eta_ish: client_lr``)."""
        return float(federation.optimizer.lr) if self.eta_ish == CLIENT_LR else float(self.eta_ish)

    def population_emd(self, federation: Federation) -> Tensor:
        """``(N,)`` float64 ``D_k`` of every client under ``distance`` (computed once per data object)."""
        if self._emd_cache is None or self._emd_cache[0] is not federation.label_histograms:
            self._emd_cache = (federation.label_histograms,
                               distance_to_population(federation.label_histograms, self.distance))
        return self._emd_cache[1]

    @override
    def combination(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                    log: RoundLogger) -> Combination:
        if self.dp_safe:  # each client's own labels against the public P (uniform or declared), K := qN
            ids = update.client_ids.to(federation.label_histograms.device).long()
            own = dp_safe_ish_weights(federation.label_histograms[ids], float(federation.clients_per_round),
                                      self.eta(federation), self.public_population).to(global_w)
            weights, degenerate = normalize_weights(own)
            if degenerate:
                self.warn_degenerate_once("ISH weights", round_idx)
            figure = self.figure_every_n_rounds > 0 and round_idx % self.figure_every_n_rounds == 0
            log_client_weights(log, weights, update.client_ids, "DWFed weights (DP-safe)", figure)
            return Combination(weights, own_weights=own)
        all_emd = self.population_emd(federation)
        emd = all_emd[update.client_ids.to(all_emd.device).long()].to(device=global_w.device)
        samples = update.num_samples.to(global_w.device) if self.weight_by_samples else None
        weights, degenerate = ish_weights(emd, update.cohort_size, self.eta(federation), samples)
        if degenerate:
            self.warn_degenerate_once("ISH weights", round_idx)
        weights = weights.to(global_w.dtype)
        figure = self.figure_every_n_rounds > 0 and round_idx % self.figure_every_n_rounds == 0
        log_client_weights(log, weights, update.client_ids, "DWFed weights", figure)
        log.log_histogram("server/emd", emd.float())
        return Combination(weights)
