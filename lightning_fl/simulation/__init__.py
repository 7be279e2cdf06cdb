"""Simulation: the federated run itself, assembled from the layers below it.

The Lightning module whose training step is one communication round (``loop`` with its evaluation and
checkpoint hooks), the round (``rounds``, ``round_result``), what callbacks see and subclass
(``federation``, ``callback``, ``default_callbacks``), client sampling and simulated system
heterogeneity (``sampling``, ``system``, ``system_traces``), the hierarchy, several processes
(``distributed``), the datamodule base class, and the checks of a run's settings and of a resume. It
imports the engines, models, aggregation and reporting below it, and never the algorithms
(:mod:`lightning_fl.callbacks`) or data sets (:mod:`lightning_fl.datamodules`) plugged into it.
"""
