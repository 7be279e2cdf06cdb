"""``model.eval``: the declared evaluation protocol of a personalized run (docs/personalization.md).

A personalized FL number means nothing without saying which model was evaluated, on which clients,
on which split, at which rounds and with which weighting; the papers differ on every one of these.
:class:`EvalProtocol` holds that declaration, refuses the combinations that have no meaning (a global
model for FedRep, a personal one for FedAvg, a best-on-test round) with one ``ConfigError`` line
naming the field, prints itself above every table (:meth:`EvalProtocol.describe`), logs itself as
hparams (:meth:`EvalProtocol.hparams`) and draws the held-out unseen clients
(:meth:`EvalProtocol.unseen_clients`). It runs nothing: the engines evaluate what it declares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor

from lightning_fl.faults.validation import ConfigError, check_choice, check_positive
from lightning_fl.functional.personal_metrics import ROUND_RULES
from lightning_fl.state.seeding import generator_for

__all__ = ["CLIENT_SETS", "EVAL_MODELS", "FINETUNE_PARAMS", "ON_MISSING_PERSONAL", "PAPER_COMPAT", "WEIGHTINGS", "EvalProtocol"]

#: The configuration path of every field, as the one-line errors name it.
FIELD = "model.eval"
#: ``model``: the global ``w^t``, each method's personal model, or FedAvg-FT(k) applied to ``w^t``.
EVAL_MODELS = ("global", "personal", "finetuned")
#: ``clients``: every client, those with a completed participation, or the held-out unseen ones.
CLIENT_SETS = ("all", "participated", "unseen")
#: ``weighting`` of the headline; both are always logged.
WEIGHTINGS = ("client_mean", "pooled")
#: ``on_missing_personal``: what a ``personal`` evaluation of a client without ``p_k`` does.
ON_MISSING_PERSONAL = ("error", "finetune")
#: ``paper_compat``: ``max_test`` also logs the best-on-test round as ``test_optimistic/*``.
PAPER_COMPAT = (None, "max_test")
#: ``finetune_params``: what fine-tuning trains (``head``: FedRep's FedAvg baseline).
FINETUNE_PARAMS = ("all", "head")
#: The split rule is fixed, not configurable: it is printed so a reader does not have to assume it.
SPLIT_RULE = "val for selection, test for report"


def _check_count(name: str, value: int) -> None:
    """Raise ``ConfigError`` unless ``value`` is an integer >= 0 (``bool`` is not a count)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be an integer >= 0; got {value!r}")


@dataclass
class EvalProtocol:
    """What a reported number measures: model, clients, split, rounds and weighting.

    Args:
        model: ``global`` (``w^t``), ``personal`` (each method's evaluated model) or ``finetuned``
            (FedAvg-FT(k): ``k`` client-optimizer steps from ``w^t`` on the train split, then discarded).
        finetune_steps: ``k`` of ``finetuned(k)`` and of ``on_missing_personal: finetune``.
        finetune_epochs: Fine-tune for this many epochs instead of ``finetune_steps``.
        clients: ``all``, ``participated`` (at least one completed participation) or ``unseen``;
            ``None``: ``participated`` for ``model: personal``, else ``all``.
        unseen_fraction: ``u`` in ``[0, 1)``: ``max(1, floor(u N))`` clients are held out before
            training, never trained and reported under ``unseen/*`` (0: none).
        rounds: ``last``, ``mean_last`` (each statistic averaged over the last ``last_r``
            evaluations) or ``best_val`` (test at the first evaluation maximising the monitored val
            metric). Best-on-test is refused.
        last_r: ``r`` of ``mean_last``.
        weighting: The headline, ``client_mean`` (``(1/|C|) sum_k acc_k``) or ``pooled``
            (``sum_k correct_k / sum_k m_k``); both are always logged.
        on_missing_personal: ``error`` or ``finetune`` (FedAvg-FT(k) for a client without ``p_k``).
        paper_compat: ``max_test``: the best test round is also logged, as ``test_optimistic/*``
            only, to compare with papers that report it (pFedMe).
        finetune_prox: ``lambda >= 0`` of FedAvg-FT's ``ft_prox`` (Ditto repo ``finetuning.py``): fine-tuning
            adds ``lambda (v - w^t)`` to the gradient and takes ``max(floor(k n_k / B), k)`` steps; 0: off.
        finetune_params: ``all`` or ``head`` (only the model's head is fine-tuned, as FedRep's FedAvg baseline).
        client_subset: ``m``: every evaluation scores ``m`` clients drawn uniformly without replacement from
            the ``N``, anew at each evaluation round, from the stream keyed ``(seed, "eval_subset", round)``
            (the same set in every engine and for any number of processes); ``clients`` and the unseen
            clients are taken within it, and the fairness statistics are over the clients scored.
            ``None`` (default): every client.

    Raises:
        ConfigError: One line naming ``model.eval.<field>`` and what it accepts.

    Example (YAML)::

        model:
          eval: {model: personal, rounds: mean_last, last_r: 10, unseen_fraction: 0.1,
                 on_missing_personal: finetune, finetune_steps: 5}
    """

    model: str = "global"
    finetune_steps: int = 0
    finetune_epochs: int = 0
    clients: str | None = None
    unseen_fraction: float = 0.0
    rounds: str = "last"
    last_r: int = 10
    weighting: str = "client_mean"
    on_missing_personal: str = "error"
    paper_compat: str | None = None
    finetune_prox: float = 0.0
    finetune_params: str = "all"
    client_subset: int | None = None

    def __post_init__(self) -> None:
        check_choice(f"{FIELD}.finetune_params", self.finetune_params, FINETUNE_PARAMS)
        if self.client_subset is not None:
            check_positive(f"{FIELD}.client_subset", self.client_subset, integer=True)
            if self.unseen_fraction:  # the gap compares both sets in one evaluation; a subset may miss one
                raise ConfigError(f"{FIELD}.client_subset cannot be combined with unseen_fraction > 0 (a subset may"
                                  " hold no unseen client to measure the participation gap); drop one of them")
        if isinstance(self.finetune_prox, bool) or not isinstance(self.finetune_prox, (int, float)) \
                or not self.finetune_prox >= 0:
            raise ConfigError(f"{FIELD}.finetune_prox must be a number >= 0 (0: off); got {self.finetune_prox!r}")
        check_choice(f"{FIELD}.model", self.model, EVAL_MODELS)
        if self.clients is not None:
            check_choice(f"{FIELD}.clients", self.clients, CLIENT_SETS)
        self._check_rounds()
        check_choice(f"{FIELD}.weighting", self.weighting, WEIGHTINGS)
        check_choice(f"{FIELD}.on_missing_personal", self.on_missing_personal, ON_MISSING_PERSONAL)
        check_choice(f"{FIELD}.paper_compat", self.paper_compat, PAPER_COMPAT)
        u = self.unseen_fraction
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 <= u < 1:
            raise ConfigError(f"{FIELD}.unseen_fraction must be a number in [0, 1) (0: no unseen clients); got {u!r}")
        self._check_finetuning()
        if self.clients == "unseen":
            if self.unseen_fraction == 0:
                raise ConfigError(f"{FIELD}.clients: unseen needs {FIELD}.unseen_fraction > 0 (the held-out share)")
            if self.model == "personal":
                raise ConfigError(f"{FIELD}.clients: unseen clients are never trained and have no personal model;"
                                  " evaluate them with model: global or finetuned")
        if self.model == "personal" and self.unseen_fraction > 0 and self.on_missing_personal == "error":
            # The unseen clients are reported beside the personal models (unseen/*), and have none.
            raise ConfigError(f"{FIELD}.on_missing_personal: error cannot evaluate the unseen clients (no personal"
                              " model); set on_missing_personal: finetune or unseen_fraction: 0")

    def _check_rounds(self) -> None:
        # Best-on-test gets its own message: it is the one choice people ask for on purpose.
        if isinstance(self.rounds, str) and "test" in self.rounds.lower():
            raise ConfigError(f"{FIELD}.rounds must be one of {', '.join(ROUND_RULES)}; got {self.rounds!r}: choosing"
                              " the round on the test split reports the best of noisy test estimates, an optimistic"
                              " number (use best_val; paper_compat: max_test also logs it as test_optimistic/*)")
        check_choice(f"{FIELD}.rounds", self.rounds, ROUND_RULES)
        check_positive(f"{FIELD}.last_r", self.last_r, integer=True)

    def _check_finetuning(self) -> None:
        _check_count(f"{FIELD}.finetune_steps", self.finetune_steps)
        _check_count(f"{FIELD}.finetune_epochs", self.finetune_epochs)
        if self.finetune_steps and self.finetune_epochs:
            raise ConfigError(f"{FIELD}.finetune_epochs: give finetune_steps or finetune_epochs, not both; got"
                              f" {self.finetune_steps} steps and {self.finetune_epochs} epochs")
        needed_by = ("model: finetuned" if self.model == "finetuned" else "on_missing_personal: finetune"
                     if self.model == "personal" and self.on_missing_personal == "finetune" else None)
        if needed_by and not (self.finetune_steps or self.finetune_epochs):
            raise ConfigError(f"{FIELD}.finetune_steps: {needed_by} needs finetune_steps >= 1 (k of finetuned(k))"
                              " or finetune_epochs >= 1; got 0")
        if not needed_by and (self.finetune_prox or self.finetune_params != "all"):
            name = "finetune_prox" if self.finetune_prox else "finetune_params"
            raise ConfigError(f"{FIELD}.{name} is read only by model: finetuned or on_missing_personal: finetune;"
                              f" got {getattr(self, name)!r} with model: {self.model}")
        if not needed_by and (self.finetune_steps or self.finetune_epochs):
            # A fine-tuning budget nothing reads would be printed on the card as if it were used.
            name = "finetune_steps" if self.finetune_steps else "finetune_epochs"
            raise ConfigError(f"{FIELD}.{name} is read only by model: finetuned or on_missing_personal: finetune;"
                              f" got {getattr(self, name)} with model: {self.model}")

    # ------------------------------------------------------------------ the run's facts
    def check(self, num_clients: int, *, method_name: str, method_has_personal_model: bool,
              method_has_global: bool = True) -> None:
        """Refuse what this run's method and federation cannot evaluate, before training.

        Args:
            num_clients: ``N``, the number of clients.
            method_name: The algorithm, as the error names it (``FedRep``).
            method_has_personal_model: The method keeps a personal model ``p_k`` (docs/personalization.md).
            method_has_global: The method's ``w^t`` is a whole model to evaluate (false for FedRep,
                FedPer and FedBN, whose heads or BN layers in ``w^t`` are never trained).

        Raises:
            ConfigError: One line naming ``model.eval.<field>``.
        """
        check_positive("num_clients", num_clients, integer=True)
        self._check_holdout(num_clients)
        if self.client_subset is not None and self.client_subset > num_clients:
            raise ConfigError(f"{FIELD}.client_subset must be at most {num_clients} (the number of clients; leave it"
                              f" out to evaluate every client); got {self.client_subset}")
        if self.model == "global" and not method_has_global:
            raise ConfigError(f"{FIELD}.model must be one of personal, finetuned for {method_name}; got 'global'"
                              f" ({method_name}'s global model has untrained personal layers)")
        if self.model == "personal" and not method_has_personal_model:
            raise ConfigError(f"{FIELD}.model must be one of global, finetuned for {method_name}; got 'personal'"
                              f" ({method_name} keeps no personal model)")

    def _check_holdout(self, num_clients: int) -> None:
        held_out = self.num_unseen(num_clients)
        if held_out >= num_clients:
            raise ConfigError(f"{FIELD}.unseen_fraction {self.unseen_fraction} holds out {held_out} of {num_clients}"
                              " clients and leaves no training client; lower it")

    def num_unseen(self, num_clients: int) -> int:
        """``max(1, floor(u N))`` when ``u > 0``, else 0 (the pFL-Bench count).

        ``u N`` is taken from the decimal ``u`` as written (``Fraction(str(u))``): in floating point
        ``0.57 * 100`` is ``56.99999999999999``, whose floor would hold out one client too few.

        Example:
            >>> EvalProtocol(unseen_fraction=0.57).num_unseen(100), EvalProtocol(unseen_fraction=0.01).num_unseen(50)
            (57, 1)
        """
        if self.unseen_fraction == 0:
            return 0
        return max(1, math.floor(Fraction(str(self.unseen_fraction)) * num_clients))

    def unseen_clients(self, seed: int, num_clients: int) -> Tensor:
        """The sorted ids of the held-out clients, drawn before training.

        The first :meth:`num_unseen` entries of a permutation of the ``N`` ids keyed by
        ``(seed, "unseen")``: the set depends on nothing but the seed and ``N`` (not on the
        method, the engine or the number of processes), so a Local run and a method run share it.

        Returns:
            ``(num_unseen,)`` int64 ids, ascending (empty when ``unseen_fraction`` is 0).

        Raises:
            ConfigError: If the holdout leaves no training client.
        """
        self._check_holdout(num_clients)
        perm = torch.randperm(num_clients, generator=generator_for(seed, "unseen"))
        return perm[: self.num_unseen(num_clients)].sort().values

    # ------------------------------------------------------------------ what is printed and logged
    @property
    def effective_clients(self) -> str:
        """``clients``, with ``None`` resolved: ``participated`` for ``model: personal``, else ``all``."""
        if self.clients is not None:
            return self.clients
        return "participated" if self.model == "personal" else "all"

    def _finetune_budget(self) -> str:
        budget = f"{self.finetune_epochs} epochs" if self.finetune_epochs else f"k={self.finetune_steps}"
        return budget + (f", prox={self.finetune_prox:g}" if self.finetune_prox else "") + \
            (", head only" if self.finetune_params == "head" else "")

    def describe(self) -> str:
        """The one line printed above every table.

        Example:
            >>> print(EvalProtocol(model="personal").describe())  # doctest: +NORMALIZE_WHITESPACE
            eval: model=personal clients=participated split=val for selection, test for report rounds=last
            weighting=client_mean (pooled also logged)
        """
        model = f"finetuned({self._finetune_budget()})" if self.model == "finetuned" else self.model
        rounds = f"mean_last({self.last_r})" if self.rounds == "mean_last" else self.rounds
        other = next(w for w in WEIGHTINGS if w != self.weighting)
        parts = [f"eval: model={model}", f"clients={self.effective_clients}", f"split={SPLIT_RULE}",
                 f"rounds={rounds}", f"weighting={self.weighting} ({other} also logged)"]
        if self.model == "personal" and self.on_missing_personal == "finetune":
            parts.append(f"on_missing_personal=finetune({self._finetune_budget()})")
        if self.unseen_fraction > 0:
            parts.append(f"unseen_fraction={self.unseen_fraction:g} (reported under unseen/*)")
        if self.paper_compat == "max_test":
            parts.append("paper_compat=max_test (best test round under test_optimistic/*)")
        if self.client_subset is not None:
            parts.append(f"client_subset={self.client_subset} (drawn anew each evaluation, keyed by seed and round)")
        return " ".join(parts)

    def hparams(self) -> dict[str, str | float]:
        """The declaration as flat ``eval/<field>`` hparams; every run declares the same keys.

        Example:
            >>> EvalProtocol().hparams()["eval/clients"], EvalProtocol().hparams()["eval/paper_compat"]
            ('all', 'none')
        """
        return {
            "eval/model": self.model,
            "eval/finetune_steps": self.finetune_steps,
            "eval/finetune_epochs": self.finetune_epochs,
            "eval/clients": self.effective_clients,
            "eval/unseen_fraction": float(self.unseen_fraction),
            "eval/split": SPLIT_RULE,
            "eval/rounds": self.rounds,
            "eval/last_r": self.last_r,
            "eval/weighting": self.weighting,
            "eval/on_missing_personal": self.on_missing_personal,
            "eval/paper_compat": self.paper_compat or "none",
            "eval/finetune_prox": float(self.finetune_prox),
            "eval/finetune_params": self.finetune_params,
            "eval/client_subset": self.client_subset or 0,  # 0: every client (hparams hold no None)
        }

    @classmethod
    def from_hparams(cls, values: Mapping[str, Any]) -> EvalProtocol:
        """The protocol a run logged with :meth:`hparams` (its ``hparams.yaml``), to report finished runs by it.

        ``clients`` comes back resolved (``participated`` for ``model: personal``), so :meth:`describe`
        prints the same line. Numbers may come back as floats (TensorBoard's HParams session).

        Raises:
            KeyError: If an ``eval/<field>`` is missing (a run older than ``model.eval``).
            ConfigError: If the values are no valid protocol.

        Example:
            >>> p = EvalProtocol(model="personal", rounds="mean_last", last_r=3)
            >>> EvalProtocol.from_hparams(p.hparams()).describe() == p.describe()
            True
        """
        names = {name: values[f"eval/{name}"] for name in ("model", "clients", "rounds", "weighting",
                                                            "on_missing_personal")}
        counts = {name: int(values[f"eval/{name}"]) for name in ("finetune_steps", "finetune_epochs", "last_r")}
        compat = values["eval/paper_compat"]
        return cls(**names, **counts, unseen_fraction=float(values["eval/unseen_fraction"]),
                   paper_compat=None if compat == "none" else compat,
                   finetune_prox=float(values.get("eval/finetune_prox", 0.0)),  # runs before these options: off
                   finetune_params=str(values.get("eval/finetune_params", "all")),
                   client_subset=int(values.get("eval/client_subset", 0)) or None)
