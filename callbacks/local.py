"""Local: every client trains its own model and nothing is shared (docs/algorithms.md, Personalization, Local)."""

from __future__ import annotations

from lightning_fl.callbacks.personalized import PersonalizedAggregation


class Local(PersonalizedAggregation):
    """The Local baseline: client ``k``'s model ``p_k`` starts at ``w^0`` and trains ``E`` epochs when sampled.

    Nothing is sent or aggregated (``w^t = w^0`` for every ``t``); each client is evaluated on its own
    ``p_k``. It is the reference that personalized methods must beat (``model.eval`` gain over Local).

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.Local
        model:
          eval: {model: personal}
    """

    personal_part = "full"
    shares = False
    has_global_model = False
    vectors_down = 0
    vectors_up = 0

    def __init__(self) -> None:
        super().__init__(personal_init="w0")
