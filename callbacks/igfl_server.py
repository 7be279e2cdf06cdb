"""IGFL-S: attention-based aggregation (docs/algorithms.md, IGFL-S, Algorithm 3)."""

from __future__ import annotations

import math

from lightning_fl.callbacks.igfl_client import IGFLState
from torch import Tensor
from typing_extensions import override

from lightning_fl.aggregation.pipeline import Combination
from lightning_fl.engines.cohort import CohortUpdate
from lightning_fl.faults.validation import ConfigError, check_choice
from lightning_fl.functional.igfl import (
    ATTENTION_MODES,
    SIMILARITIES,
    TIME_READINGS,
    igfl_attention_aggregate,
)
from lightning_fl.reporting.figures import attention_figure
from lightning_fl.reporting.round_logger import RoundLogger
from lightning_fl.simulation.callback import AggregationCallback
from lightning_fl.simulation.federation import Federation


class IGFLServer(IGFLState, AggregationCallback):
    """IGFL-S (IJCAI 2021, Algorithm 3): attention-based federated learning on the server.

    docs/algorithms.md, IGFL-S. Values and keys are the cohort deltas ``D_j = y_j - w^t``; scores
    ``s = psi(q, D_j) / temperature`` with a softmax over ``j`` in the cohort:

    - ``self``: ``q_i = D_i``; ``w^{t+1} = w^t + (1/K) sum_i sum_j alpha_ij D_j`` (``K x K`` matrix);
    - ``global``: ``q = mean_j D_j``; ``w^{t+1} = w^t + sum_j alpha_j D_j``;
    - ``time``: ``s_j = psi(dW_j_prev, D_j)`` (each client's previous delta against its current one),
      ``alpha = softmax_j(s)``; ``w^{t+1} = w^t + sum_j alpha_j D_j`` (``time_reading: cohort``, default).
      ``time_reading: matrix`` reads Algorithm 3 literally, ``q_i = dW_i_prev``:
      ``A_ij = softmax_j(psi(dW_i_prev, D_j))`` per row ``i``, ``w^{t+1} = w^t + (1/K) sum_i sum_j A_ij D_j``
      (``K x K`` matrix).

    ``psi`` is the dot product of the flattened deltas (``dot``, paper), ``scaled_dot``
    (``dot / sqrt(d)``) or ``cosine``.

    Readings:

    - ``time`` uses our reading by default (docs/algorithms.md, IGFL-S): client ``j``'s previous delta is scored against
      its *own* current delta (the paper's printed denominator mixes indices); ``time_reading: matrix`` is the
      literal Algorithm 3 (a first-timer's row is uniform there). ``dW_j_prev = y_j - w`` of the
      client's last participation, which may be many rounds ago under sampling; a client seen for
      the first time has ``dW_j_prev = 0`` and score 0.
    - The softmax subtracts the row maximum, so large dot products give a sharp but finite attention.
    - Used alone, IGFL-S keeps its own store of previous deltas (only in ``time`` mode, which needs
      it); :class:`~lightning_fl.callbacks.IGFL` shares one store between client and server.

    TensorBoard (step = round number ``t + 1``): ``server/attention_figure``, the attention matrix
    (``self``, ``time`` with ``time_reading: matrix``) or vector as a heat map with client ids on the axes (the paper's Fig. 2), every
    ``figure_every_n_rounds`` rounds; ``server/weights``, a histogram of each client's effective
    weight (``mean_i alpha_ij`` for a matrix, ``alpha_j`` otherwise).

    Args:
        attention: ``self`` (default), ``global`` or ``time``.
        similarity: ``dot`` (default), ``scaled_dot`` or ``cosine``.
        temperature: Score divisor ``> 0``. Default 1.0.
        figure_every_n_rounds: Log the attention image every this many rounds (0: never). Default 1.
        time_reading: With ``attention: time``: ``cohort`` (default) or ``matrix`` (Algorithm 3 literally).

    Raises:
        ConfigError: If ``attention``, ``similarity`` or ``time_reading`` is not an allowed value,
            ``time_reading`` is ``matrix`` without ``attention: time``, ``temperature`` is not a finite
            number ``> 0``, or ``figure_every_n_rounds`` is not an integer ``>= 0``.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.IGFLServer
          init_args: {attention: time, time_reading: cohort, similarity: dot, temperature: 1.0}
    """

    def __init__(self, attention: str = "self", similarity: str = "dot", temperature: float = 1.0,
                 figure_every_n_rounds: int = 1, time_reading: str = "cohort") -> None:
        super().__init__()
        check_choice("attention", attention, ATTENTION_MODES)
        check_choice("similarity", similarity, SIMILARITIES)
        check_choice("time_reading", time_reading, TIME_READINGS)
        if time_reading != "cohort" and attention != "time":
            raise ConfigError(f"time_reading: {time_reading} needs attention: time; got attention: {attention}")
        if isinstance(temperature, bool) or not (isinstance(temperature, (int, float)) and math.isfinite(temperature)
                                                 and temperature > 0):
            raise ConfigError(f"temperature must be a finite number > 0; got {temperature!r}")
        if isinstance(figure_every_n_rounds, bool) or not isinstance(figure_every_n_rounds, int) \
                or figure_every_n_rounds < 0:
            raise ConfigError(f"figure_every_n_rounds must be an integer >= 0; got {figure_every_n_rounds!r}")
        self.attention = attention
        self.similarity = similarity
        self.temperature = float(temperature)
        self.figure_every_n_rounds = figure_every_n_rounds
        self.time_reading = time_reading
        self.keeps_client_deltas = self._keeps_client_deltas()
        self.declare_igfl_state()
        self.last_attention: Tensor | None = None

    def _keeps_client_deltas(self) -> bool:
        return self.attention == "time"

    @override
    def aggregate(self, round_idx: int, global_w: Tensor, update: CohortUpdate, federation: Federation,
                  log: RoundLogger) -> Tensor:
        prev = (self.prev_delta.gather(update.client_ids, global_w.device).to(global_w.dtype)
                if self.attention == "time" else None)
        own_w, attention = igfl_attention_aggregate(global_w, update.weights, prev, self.attention, self.similarity,
                                                    self.temperature, self.time_reading)
        # p_j: the column means of a (K, K) attention, or the (K,) attention itself (docs/algorithms.md).
        p = attention.mean(dim=0) if attention.dim() == 2 else attention
        w_agg = self.combine(round_idx, global_w, update, Combination(p, exact=lambda: own_w), federation, log)
        new_w = self.server_optimizer.step(global_w, w_agg, log)
        self.record(global_w, new_w, update.client_ids, update.weights)
        self.last_attention = attention
        self._log(log, round_idx, attention, update.client_ids)
        return new_w

    def _log(self, log: RoundLogger, round_idx: int, attention: Tensor, client_ids: Tensor) -> None:
        effective = attention.mean(dim=0) if attention.dim() == 2 else attention
        log.log_histogram("server/weights", effective.detach().float())
        if self.figure_every_n_rounds > 0 and round_idx % self.figure_every_n_rounds == 0:
            log.log_figure("server/attention_figure", attention_figure(attention, client_ids.tolist(), log.step))
