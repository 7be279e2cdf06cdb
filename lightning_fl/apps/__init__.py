"""Apps: the commands people type, the top layer that assembles core, algorithms and data sets.

``python -m lightning_fl`` (the ``lightning-fl`` script) is :mod:`lightning_fl.apps.cli`;
``python -m lightning_fl.apps.compare`` runs several configs over seeds and
``python -m lightning_fl.apps.stragglers`` reproduces FedProx Fig. 1. Nothing of the project imports
this package except ``lightning_fl/__main__.py``.
"""
