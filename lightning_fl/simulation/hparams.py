"""TensorBoard's HParams tab: every run's settings beside its final fairness metrics.

At the start of fit the loop writes one HParams session per TensorBoard logger, from the same record a
checkpoint keeps (:func:`lightning_fl.simulation.resume_check.run_config`), and declares the fairness
scalars as the session's metrics; TensorBoard reads each metric's latest value from the run's scalars,
so the table fills in as the run evaluates.

Runs of different algorithms have different settings (FedProx's ``mu``, FedFa's ``alpha``), and
TensorBoard shows the columns of the *first* run's declaration it finds. So every run declares the
same columns, :data:`COLUMNS`, a comparison schema in which one column holds any algorithm's
arguments (``algorithm.args``: ``mu=0.1``). TensorBoard ticks the first five columns by name and
the first five metrics, so the names are chosen to put the algorithm, its arguments, the client
optimizer, the partition and the data set first, and the headline test metrics lead
:data:`METRIC_TAGS`. The session also carries every setting under its full name
(``callbacks.FedFa.alpha``, ``model.local_epochs``), and ``hparams.yaml`` holds them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytorch_lightning.loggers import CSVLogger, Logger, TensorBoardLogger
from torch.utils.tensorboard.summary import hparams

#: The fairness scalars shown as HParams metrics, the final test evaluation first (TensorBoard shows
#: the first five by default); see docs/algorithms.md, Fairness metrics.
METRIC_TAGS = tuple(f"{split}/{name}" for split in ("test", "val")
                    for name in ("acc_mean", "acc_worst20", "acc_best20", "acc_var", "jain", "acc_pooled", "loss")
                    ) + ("test/acc_mean_last10pct",  # IGFL's metric, logged once at the end of fit
                         "test/all/acc_mean", "test/all/acc_worst20",  # every client, under model.attack
                         "dp/epsilon")  # the privacy spent so far, under model.dp
#: The columns every run declares, in name order (TensorBoard sorts them so, and ticks the first five).
COLUMNS = ("algorithm", "algorithm.args", "client.optimizer", "data.partition", "data.set", "federation.clients",
           "federation.cohort", "local.batch_size", "local.epochs", "model.aggregation", "model.attack", "model.dp",
           "model.eval", "model.lr_scheduler", "rounds", "seed", "seed.data")
_SKIPPED = ("data contents", "model.client shapes")  # a digest and tensor shapes: nothing to sort runs by


def flat_hparams(config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """``config`` as HParams values: nested dicts become ``a.b`` keys, lists and ``None`` become text.

    Example:
        >>> flat_hparams({"model.optimizer": {"class": "SGD", "lr": 0.1}, "data.partition": None, "s": [1, 2]})
        {'model.optimizer.class': 'SGD', 'model.optimizer.lr': 0.1, 'data.partition': 'None', 's': '[1, 2]'}
    """
    flat: dict[str, bool | int | float | str] = {}
    for key, value in config.items():
        if key in _SKIPPED:
            continue
        if isinstance(value, dict):
            flat.update(flat_hparams({f"{key}.{k}": v for k, v in value.items()}))
        elif isinstance(value, (bool, int, float, str)):
            flat[key] = value
        else:
            flat[key] = str(value)
    return flat


def _arguments(values: Any) -> str:
    """``{"mu": 0.1, "b": None}`` -> ``"b=None, mu=0.1"``; ``"none"`` when there are none."""
    if not isinstance(values, Mapping) or not values:
        return "none" if not values else str(values)
    return ", ".join(f"{k}={_arguments(v) if isinstance(v, Mapping) else v}" for k, v in sorted(values.items()))


def _described(value: Any) -> str:
    """A described object (``"Dirichlet: Dirichlet(alpha=0.3)"`` or ``{"class": ..., ...}``) as one short text."""
    if value is None:
        return "none"
    if isinstance(value, Mapping) and "class" in value:
        rest = {k: v for k, v in value.items() if k != "class"}
        return f"{value['class']}({_arguments(rest)})" if rest else str(value["class"])
    text = str(value)
    return text.split(": ", 1)[1] if ": " in text else text


def comparison_columns(method: str, config: Mapping[str, Any]) -> dict[str, bool | int | float | str]:
    """The :data:`COLUMNS` of one run, from its ``run_config`` record (plus ``rounds``).

    Example:
        >>> columns = comparison_columns("FedProx", {"callbacks.FedProx": {"mu": 0.1}, "data": "SyntheticDataModule",
        ...     "data.variant": "1_1", "model.optimizer": {"class": "SGD", "lr": 0.01, "momentum": 0.0}})
        >>> columns["algorithm.args"], columns["client.optimizer"], columns["data.partition"], columns["data.set"]
        ('mu=0.1', 'SGD(lr=0.01)', 'synthetic 1_1', 'Synthetic')
    """
    optimizer = dict(config.get("model.optimizer") or {})
    shown = {k: optimizer[k] for k in ("lr", "momentum", "weight_decay") if optimizer.get(k) not in (None, 0, 0.0)}
    partition = config.get("data.partition")
    if partition is None and "data.variant" in config:
        partition = f"synthetic {config['data.variant']}"
    data = str(config.get("data", "none"))
    columns = {
        "algorithm": method,
        "algorithm.args": _arguments(config.get(f"callbacks.{method}")),
        "client.optimizer": f"{optimizer.get('class', 'none')}({_arguments(shown)})" if shown else
                            str(optimizer.get("class", "none")),
        "data.partition": _described(partition),
        "data.set": data[: -len("DataModule")] if data.endswith("DataModule") else data,
        "federation.clients": config.get("data.num_clients", "none"),
        "federation.cohort": config.get("model.clients_per_round", "none"),
        "local.batch_size": config.get("model.batch_size", "none"),
        "local.epochs": config.get("model.local_epochs", "none"),
        "model.aggregation": _described(config.get("model.aggregation", "default")),
        "model.attack": _described(config.get("model.attack")),
        "model.dp": _described(config.get("model.dp")),
        # model.eval (docs/personalization.md): which model, clients, rounds and headline weighting
        "model.eval": "/".join(str(config.get(f"eval/{k}", d)) for k, d in
                               (("model", "global"), ("clients", "all"), ("rounds", "last"), ("weighting", "client_mean"))),
        "model.lr_scheduler": _described(config.get("model.lr_scheduler")),
        "rounds": config.get("rounds", "none"),
        "seed": config.get("model.seed", "none"),
        "seed.data": config.get("data.seed", "none"),
    }
    return {k: v if isinstance(v, (bool, int, float, str)) else str(v) for k, v in columns.items()}


def write_hparams(loggers: Iterable[Logger], method: str, config: Mapping[str, Any],
                  metric_tags: Iterable[str] = METRIC_TAGS) -> None:
    """Write one HParams session to every TensorBoard logger, and the settings to every logger's ``hparams.yaml``.

    The declaration holds :data:`COLUMNS`; the session holds those and every flattened setting of
    ``config``. Only the session is written: the metrics are the run's own scalars, so no placeholder
    value is logged under their tags.
    """
    columns = comparison_columns(method, config)
    params = {**flat_hparams(config), **columns}
    metrics = {tag: 0.0 for tag in metric_tags}
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            experiment, _, _ = hparams(columns, metrics)
            _, start, end = hparams(params, metrics)
            writer = logger.experiment._get_file_writer()
            for summary in (experiment, start, end):
                writer.add_summary(summary)
            writer.flush()
            logger.hparams.update(params)  # saved to hparams.yaml (without a second HParams declaration)
        elif isinstance(logger, CSVLogger):
            logger.experiment.log_hparams(params)
