"""Client-level differential privacy (docs/algorithms.md, Client-level differential privacy).

``model.dp`` configures a :class:`~lightning_fl.privacy.config.DifferentialPrivacy`: central DP-FedAvg
(McMahan et al. 2018) as aggregation-pipeline stages (the clip, the fixed-denominator sum, the
Gaussian noise), adaptive clipping (Andrew et al. 2021), local DP, and the accounting of
:mod:`lightning_fl.privacy.accounting` over Google's ``dp-accounting``.
"""
from lightning_fl.privacy.config import DifferentialPrivacy
from lightning_fl.privacy.stages import AdaptiveClipping

__all__ = ["AdaptiveClipping", "DifferentialPrivacy"]
