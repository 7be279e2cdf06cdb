"""Personalized federated learning: the declared evaluation protocol (docs/personalization.md).

``model.eval`` configures an :class:`~lightning_fl.personalization.protocol.EvalProtocol`: which model
is evaluated (global, personal, fine-tuned), on which clients, at which rounds and with which
weighting. Its metrics are the pure functions of :mod:`lightning_fl.functional.personal_metrics`.
"""
from lightning_fl.personalization.protocol import EvalProtocol
