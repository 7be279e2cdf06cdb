"""FedPer: a shared body and a personal head per client (docs/algorithms.md, Personalization, FedPer)."""

from __future__ import annotations

from lightning_fl.callbacks.personalized import PersonalizedAggregation


class FedPer(PersonalizedAggregation):
    """FedPer (Arivazhagan et al. 2019): all parameters train jointly for ``E`` epochs from ``(body^t, h_k)``.

    The body is sent and averaged (``n_k`` weights); the head ``h_k`` stays with the client. Evaluated:
    ``(body^{t+1}, h_k)``. The head is the model's ``head_prefixes`` (its last linear layer by default).

    Args:
        weighting: ``samples`` (default) or ``uniform`` server weights.
        personal_init: ``received`` (``h_k`` from the first global model the client receives) or ``w0``.
        head_prefixes: Name prefixes of the head; ``None``: the model's own.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedPer
              init_args: {head_prefixes: [net.4.]}
        model:
          eval: {model: personal}
    """

    personal_part = "head"
    has_global_model = False
