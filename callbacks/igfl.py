"""IGFL: IGFL-C on the clients and IGFL-S on the server, sharing one state (docs/algorithms.md, IGFL)."""

from __future__ import annotations

from lightning_fl.callbacks.igfl_client import IGFLClientHooks
from lightning_fl.callbacks.igfl_server import IGFLServer


class IGFL(IGFLClientHooks, IGFLServer):
    """IGFL (IJCAI 2021): client correction (Algorithm 2) plus attention aggregation (Algorithm 3).

    docs/algorithms.md, IGFL. One callback, one state: ``dW_ps = w^t - w^{t-1}`` (zeros at ``t = 0``) and per
    client ``dW_k_prev = y_k - w`` of its last participation (zeros if none), used both by the
    client hooks and, in ``time`` mode, by the server's attention.

    - Clients (as :class:`~lightning_fl.callbacks.IGFLClient`): after each local optimizer step ``D_I``, add
      ``D_G = (1/K) (D_I - dW_k_prev / T) + dW_ps / T`` (``K`` cohort size, ``T = tau_k``).
    - Server (as :class:`~lightning_fl.callbacks.IGFLServer`): with ``D_j = y_j - w^t`` and
      ``alpha = softmax(psi(q, D_j) / temperature)``: ``self`` ``w^{t+1} = w^t + (1/K) sum_ij
      alpha_ij D_j``; ``global`` (``q = mean D``) and ``time`` (``s_j = psi(dW_j_prev, D_j)``)
      ``w^{t+1} = w^t + sum_j alpha_j D_j``; ``time`` with ``time_reading: matrix`` (Algorithm 3
      literally, ``q_i = dW_i_prev``) ``w^{t+1} = w^t + (1/K) sum_ij A_ij D_j``.
    - After aggregation: ``dW_k_prev <- y_k - w^t`` for the cohort, ``dW_ps <- w^{t+1} - w^t``.

    The readings of :class:`~lightning_fl.callbacks.IGFLClient` and :class:`~lightning_fl.callbacks.IGFLServer` apply. Note
    that ``dW_ps`` is the *attention* aggregate's step, not FedAvg's.

    TensorBoard: ``server/attention_figure`` (heat map, the paper's Fig. 2) and ``server/weights``.

    Args:
        attention: ``self`` (default), ``global`` or ``time``.
        similarity: ``dot`` (default), ``scaled_dot`` or ``cosine``.
        temperature: Score divisor ``> 0``. Default 1.0.
        figure_every_n_rounds: Log the attention image every this many rounds (0: never). Default 1.
        time_reading: With ``attention: time``: ``cohort`` (default) or ``matrix`` (Algorithm 3 literally).

    Raises:
        ConfigError: As :class:`~lightning_fl.callbacks.IGFLServer`.

    Example (YAML)::

        - class_path: lightning_fl.callbacks.IGFL
          init_args: {attention: self}
    """

    def _keeps_client_deltas(self) -> bool:
        return True  # the client correction needs dW_k_prev in every attention mode
