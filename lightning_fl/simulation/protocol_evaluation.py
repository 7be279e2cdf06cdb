"""What an evaluation round scores, as ``model.eval`` declares it (docs/personalization.md).

:class:`ProtocolEvaluation` turns the declared protocol into per-client ``(correct, total, loss_sum)``
of a split: the global model ``w^t``, each client's personal model (the aggregation callback's
``evaluated_rows``) or ``w^t`` fine-tuned for ``k`` steps and discarded (FedAvg-FT), over the declared
client set. Clients outside the set get ``total = 0``, which every fairness statistic leaves out. The
held-out unseen clients are scored separately (``<stage>/unseen/*``) and give the participation gap.
With ``client_subset: m`` each evaluation round scores only ``m`` clients drawn by ``(seed, round)``
(:meth:`ProtocolEvaluation.subset`); the global model then runs on their samples alone.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fl.engines.base import ClientEngine
from lightning_fl.engines.evaluation import ChunkSharding, ClientEvaluation
from lightning_fl.engines.hooks import ClientHookSet
from lightning_fl.engines.user_metrics import evaluate_row_splits, evaluate_split
from lightning_fl.faults.validation import ConfigError
from lightning_fl.functional.personal_metrics import gap_metrics
from lightning_fl.models.base import ClientModule
from lightning_fl.personalization.personal_part import part_names
from lightning_fl.personalization.protocol import EvalProtocol
from lightning_fl.personalization.pull_towards_global import PullTowardsGlobal
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.sampling import ClientSampler, sample_without_replacement
from lightning_fl.state.client_state import ClientStateStore
from lightning_fl.state.data import FederatedData
from lightning_fl.state.flat_state import FlatStateLayout
from lightning_fl.state.seeding import generator_for

#: Clients whose personal or fine-tuned rows are built at once (bounds memory to a few models).
_ROWS_AT_ONCE = 32


class ProtocolEvaluation:
    """Scores the declared model on the declared clients of one split.

    Args:
        protocol: ``model.eval``.
        model: The global model (``w^t``).
        data: The federation's data.
        layout: The flat layout of the model state.
        engine: The run's client engine (fine-tuning runs on it, stream ``eval_ft``).
        store: Participation counts (who ``participated``).
        aggregator: The run's aggregation callback (personal models).
        unseen: Sorted ids of the held-out clients (empty: none).
        batch_size: Samples per forward pass.
        sharding: The run's processes (the global model's chunks are split over them).
        seed: The run seed (the evaluated subset of ``client_subset`` is keyed by it and the round).
    """

    def __init__(self, protocol: EvalProtocol, *, model: ClientModule, data: FederatedData, layout: FlatStateLayout,
                 engine: ClientEngine, store: ClientStateStore, aggregator: AggregationCallback, unseen: Tensor,
                 batch_size: int, sharding: ChunkSharding | None = None, seed: int = 0) -> None:
        self.protocol, self.model, self.data, self.layout, self.seed = protocol, model, data, layout, seed
        self.engine, self.store, self.aggregator = engine, store, aggregator
        self.unseen, self.batch_size, self.sharding = unseen, batch_size, sharding

    @classmethod
    def for_run(cls, protocol: EvalProtocol | None, seed: int, sampler: ClientSampler, **parts) -> ProtocolEvaluation:
        """Check ``protocol`` against the run (one-line errors before training) and hold the unseen clients out.

        ``None`` (no ``model.eval``): the global model on every client, or each client's personal model
        (the clients that took part) for a method whose ``w^t`` is not a whole model (FedRep, FedPer, FedBN, Local).
        """
        aggregator, n = parts["aggregator"], parts["data"].num_clients
        if protocol is None:
            protocol = EvalProtocol(model="global" if aggregator.has_global_model else "personal")
        if protocol.rounds == "best_val" and not parts["data"].has_validation:
            # t* is chosen on val/*; choosing it on test/* instead would be the refused best-on-test rule.
            raise ConfigError("model.eval.rounds: best_val chooses t* on the validation splits, but data.val_fraction"
                              " is 0; set data.val_fraction > 0 (e.g. 0.1) or rounds: last or mean_last")
        protocol.check(n, method_name=type(aggregator).__name__, method_has_personal_model=aggregator.personal_model,
                       method_has_global=aggregator.has_global_model)
        if protocol.finetune_params == "head":  # a head prefix that names nothing: before training, not at evaluation
            part_names(parts["layout"], "head", parts["model"].head_prefixes, field="model.client head_prefixes")
        unseen = protocol.unseen_clients(seed, n)
        if len(unseen):
            sampler.hold_out(unseen)
        return cls(protocol, unseen=unseen, seed=seed, **parts)

    @property
    def evaluated(self) -> str:
        """What ``val/*`` and ``test/*`` score, in words (table titles)."""
        return {"global": "global model", "personal": "personal models",
                "finetuned": "fine-tuned global model"}[self.protocol.model]

    @property
    def is_default(self) -> bool:
        """The global model on every client, nobody held out: what every run without ``model.eval`` reports."""
        return (self.protocol.model == "global" and self.protocol.effective_clients == "all" and not len(self.unseen)
                and self.protocol.client_subset is None)

    def subset(self, round_number: int) -> Tensor:
        """``(N,)`` bool: the clients evaluated at ``round_number`` (all of them without ``client_subset``).

        ``m`` ids drawn uniformly without replacement in ``O(m)`` (Floyd's algorithm) from the stream
        ``(seed, "eval_subset", round_number)``: the same on every rank, in every engine, and for the
        ``val`` and ``test`` splits of one evaluation.
        """
        n, m = self.data.num_clients, self.protocol.client_subset
        if m is None:
            return torch.ones(n, dtype=torch.bool)
        mask = torch.zeros(n, dtype=torch.bool)
        mask[sample_without_replacement(n, m, generator_for(self.seed, "eval_subset", round_number))] = True
        return mask

    def evaluate(self, stage: str, round_number: int, counted: Tensor | None) -> tuple[list[ClientEvaluation],
                                                                                      dict[str, float]]:
        """The evaluations of ``stage`` (``val``/``test``; ``<stage>/unseen`` beside it) and the gap scalars."""
        n = self.data.num_clients
        unseen = torch.zeros(n, dtype=torch.bool)
        unseen[self.unseen] = True
        clients = self.protocol.effective_clients
        members = {"all": ~unseen, "participated": (self.store.participation > 0) & ~unseen, "unseen": unseen}[clients]
        subset = self.subset(round_number)
        members, unseen = members & subset, unseen & subset
        main = self._score(stage, round_number, self.protocol.model, members, counted)
        evaluations, scalars = [main], {}
        if len(self.unseen) and clients != "unseen":
            kind = "global" if self.protocol.model == "global" else "finetuned"
            held_out = self._score(f"{stage}/unseen", round_number, kind, unseen, counted)
            evaluations.append(held_out)
            gap = gap_metrics(main.correct + held_out.correct, main.total + held_out.total, main.total > 0,
                              held_out.total > 0)
            scalars = {f"{stage}/{name}": value for name, value in gap.items()}
        return evaluations, scalars

    def _score(self, stage: str, round_number: int, kind: str, members: Tensor, counted: Tensor | None
               ) -> ClientEvaluation:
        values: dict[str, Tensor] = {}
        if kind == "global" and self.protocol.client_subset is not None:  # a lazy federation always comes here
            correct, total, loss_sum, values = self._global_on(members.nonzero().flatten(), stage)
        elif kind == "global":
            x, y, offsets = self.data.split(stage.split("/")[0])
            correct, total, loss_sum, values = evaluate_split(self.model, stage, x, y, offsets, self.batch_size,
                                                              self.sharding)
        else:
            x, y, offsets = self.data.split(stage.split("/")[0])
            correct = torch.zeros(self.data.num_clients, dtype=torch.float64)
            total, loss_sum = torch.zeros_like(correct), torch.zeros_like(correct)
            ids = members.nonzero().flatten()
            global_w = self.layout.flatten(self.model.state_dict())
            for chunk in ids.split(_ROWS_AT_ONCE):
                rows = self._rows(kind, chunk, global_w, round_number)
                splits = [(x[offsets[k] : offsets[k + 1]], y[offsets[k] : offsets[k + 1]]) for k in chunk.tolist()]
                correct[chunk], total[chunk], loss_sum[chunk], chunk_values = evaluate_row_splits(
                    self.model, self.layout, rows, stage, splits, self.batch_size)
                for key, value in chunk_values.items():
                    values.setdefault(key, torch.full_like(correct, float("nan")))[chunk] = value
        keep = members if counted is None else members & counted.cpu()
        # Clients outside the set: no samples, so every statistic and the client table leave them out.
        zero = torch.zeros_like(correct)
        correct, total, loss_sum = (torch.where(members, v, zero) for v in (correct, total, loss_sum))
        values = {key: torch.where(members, v, torch.full_like(v, float("nan"))) for key, v in values.items()}
        return ClientEvaluation(stage, round_number, correct, total, loss_sum,
                                None if counted is None else keep | ~members, values)

    def _global_on(self, ids: Tensor, stage: str) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """The global model on clients ``ids`` only (their samples staged), as ``(N,)`` per-client results.

        Each client's numbers come from its own samples alone, so they equal what scoring every client
        would give it; the other clients get zeros (``NaN`` for the module's own metrics). Only these
        clients' samples are produced (sliced from memory, or generated by a lazy source).
        """
        n, split = self.data.num_clients, stage.split("/")[0]
        staged = self.data.stage(ids, split, self.model.device)
        x, y, sub_offsets = staged.split(split)
        sub = evaluate_split(self.model, stage, x, y, sub_offsets, self.batch_size, self.sharding)
        full = []
        for part in sub[:3]:
            out = torch.zeros(n, dtype=torch.float64)
            out[ids] = part.double().cpu()
            full.append(out)
        values = {}
        for key, part in sub[3].items():
            values[key] = torch.full((n,), float("nan"), dtype=torch.float64)
            values[key][ids] = part.double().cpu()
        return full[0], full[1], full[2], values

    def _rows(self, kind: str, client_ids: Tensor, global_w: Tensor, round_number: int) -> Tensor:
        if kind == "finetuned":
            return self.finetuned_rows(client_ids, round_number)
        has = torch.tensor(self.aggregator.has_personal(client_ids), dtype=torch.bool)
        if bool(has.all()) or self.protocol.on_missing_personal == "error":
            return self.aggregator.evaluated_rows(client_ids, global_w)
        rows = torch.empty(len(client_ids), self.layout.numel, device=global_w.device)
        rows[has] = self.aggregator.evaluated_rows(client_ids[has], global_w)
        rows[~has] = self.finetuned_rows(client_ids[~has], round_number)
        return rows

    def finetuned_rows(self, client_ids: Tensor, round_number: int) -> Tensor:
        """FedAvg-FT(k): ``w^t`` after ``k`` fresh client-optimizer steps (or epochs) on each client's train split.

        Batches come from the ``eval_ft`` stream keyed by ``(seed, round, client)``, so evaluating more or
        less often never changes training; the fine-tuned rows are discarded after scoring. With
        ``finetune_prox: lambda`` the gradient gets ``lambda (v - w^t)`` and client ``k`` takes
        ``max(floor(k n_k / B), k)`` steps (the Ditto repository's ``finetuning.py``); with
        ``finetune_params: head`` only the head trains.
        """
        protocol, plan = self.protocol, self.engine.plan
        sizes = self.data.train_sizes().cpu()[client_ids]
        if protocol.finetune_epochs:
            epochs, steps = protocol.finetune_epochs, None
        else:  # enough epochs to hold each client's steps, then exactly its steps
            k = protocol.finetune_steps
            steps = torch.full((len(client_ids),), k, dtype=torch.long)
            if protocol.finetune_prox:
                steps = torch.maximum(torch.div(k * sizes, plan.batch_size, rounding_mode="floor"), steps)
            per_epoch = torch.div(sizes + plan.batch_size - 1, plan.batch_size, rounding_mode="floor").clamp_min(1)
            epochs = int(torch.div(steps + per_epoch - 1, per_epoch, rounding_mode="floor").max())
        hooks = ClientHookSet([PullTowardsGlobal(protocol.finetune_prox)] if protocol.finetune_prox else [])
        frozen = frozenset()
        if protocol.finetune_params == "head":
            head = part_names(self.layout, "head", self.model.head_prefixes, field="model.client head_prefixes")
            frozen = frozenset(n for n, p in self.model.named_parameters() if n not in head)
        keep, self.store.keep_optimizer_state = self.store.keep_optimizer_state, False  # fresh optimizer state
        try:  # Lightning evaluates under inference mode; fine-tuning needs gradients
            with torch.inference_mode(False), torch.enable_grad():
                update = self.engine.train_cohort(round_number, client_ids, torch.zeros_like(client_ids), hooks,
                                                  local_epochs=epochs, num_steps=steps, stream="eval_ft", frozen=frozen)
        finally:
            self.store.keep_optimizer_state = keep
        return update.weights
