"""Personalization: each client's own model part, and the declared evaluation protocol (docs/personalization.md).

``model.eval`` configures an :class:`~lightning_fl.personalization.protocol.EvalProtocol`: which model
is evaluated (global, personal, fine-tuned), on which clients, at which rounds and with which
weighting. Its metrics are the pure functions of :mod:`lightning_fl.functional.personal_metrics`; the
personal parts of a model are :mod:`lightning_fl.personalization.personal_part`.
"""

from lightning_fl.personalization.protocol import EvalProtocol

__all__ = ["EvalProtocol"]
