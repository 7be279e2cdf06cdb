"""FedBN: FedAvg outside the BatchNorm layers, which stay local (docs/algorithms.md, Personalization, FedBN)."""

from __future__ import annotations

from lightning_fl.callbacks.personalized import PersonalizedAggregation
from lightning_fl.faults.validation import check_choice


class FedBN(PersonalizedAggregation):
    """FedBN (Li et al. ICLR 2021, Alg. 1): BatchNorm weight, bias and running statistics are never sent.

    Client ``k``'s BN entries ``p_k`` replace the global ones in its start model and in its evaluated
    model ``w^{t+1}`` with ``p_k``. Defaults follow the authors' code: uniform server weights.

    Args:
        weighting: ``uniform`` (default, ``1/K``) or ``samples``.
        bn_match: ``module`` (entries of ``_BatchNorm`` modules) or ``name`` (entries whose name contains
            ``bn``, as the FedBN and PFLlib code select them).
        personal_init: ``received`` or ``w0``.

    Example (YAML)::

        trainer:
          callbacks:
            - class_path: lightning_fl.callbacks.FedBN
        model:
          client: {class_path: lightning_fl.models.MLP, init_args: {batch_norm: true}}
          eval: {model: personal}
    """

    personal_part = "bn"
    has_global_model = False

    def __init__(self, weighting: str = "uniform", bn_match: str = "module", personal_init: str = "received") -> None:
        super().__init__(weighting=weighting, personal_init=personal_init)
        check_choice("bn_match", bn_match, ("module", "name"))
        self.bn_match = bn_match
