"""Seeded partitions of a pooled labelled dataset into clients, as configuration objects (docs/algorithms.md, Data).

Every partition is a :class:`Partition`: options validated in ``__init__``, data-dependent checks in
:meth:`Partition.validate`, and a call ``partition(labels, num_clients, generator)`` that returns one
sorted ``LongTensor`` of sample indices per client. The same generator state gives the same split.

* :class:`IID`: equal-ish random split.
* :class:`Dirichlet`: Dirichlet label skew (per class, proportions ``~ Dir(alpha)`` over clients),
  redrawn until every client has ``min_size`` samples.
* :class:`Shards`: ``#C = k`` sort-and-partition shards (McMahan et al. 2017).
* :class:`Quantity`: quantity skew (lognormal or power-law client sizes, IID labels).
* :class:`PerClientDirichlet`: every client draws its class mix ``q_k ~ Dir(rho p)`` and holds a fixed
  number of samples (Hsu et al. 2019; IGFL, Tempo).
* :class:`PowerLawClasses`: ``#C = k`` consecutive classes per client with power-law sizes (FedProx's
  MNIST, as in FedFa and q-FFL).

From YAML, a datamodule's ``partition`` is ``{class_path: lightning_fl.datamodules.partitions.Dirichlet,
init_args: {alpha: 0.1}}``; on the command line ``--data.init_args.partition Dirichlet
--data.init_args.partition.alpha 0.1``.
"""

from __future__ import annotations

from lightning_fl.datamodules.partitions.base import Partition
from lightning_fl.datamodules.partitions.dirichlet import Dirichlet
from lightning_fl.datamodules.partitions.iid import IID
from lightning_fl.datamodules.partitions.per_client_dirichlet import PerClientDirichlet
from lightning_fl.datamodules.partitions.power_law_classes import PowerLawClasses
from lightning_fl.datamodules.partitions.quantity import QUANTITY_DISTRIBUTIONS, Quantity
from lightning_fl.datamodules.partitions.shards import Shards

__all__ = ["IID", "QUANTITY_DISTRIBUTIONS", "Dirichlet", "Partition", "PerClientDirichlet", "PowerLawClasses",
           "Quantity", "Shards"]
