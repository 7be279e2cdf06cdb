"""Plain LightningModules federated from YAML as ``model.client`` (README, "Federate your own LightningModule").

Each module is written as a Lightning user writes one, with no lightning_fl import: its
``training_step`` is the clients' objective and its ``validation_step``/``test_step`` logs the metric
that ``FairnessMetrics(fairness_metric=...)`` reads (configs/user_modules/).

* :class:`LinearRegression`: mean squared error, ``val/mse``.
* :class:`SmoothedClassifier`: label-smoothed cross-entropy, a torchmetrics ``Accuracy`` as ``val/acc``.
* :class:`CharPerplexity`: a character LSTM scored by ``val/perplexity``.
"""

from lightning_fl.models.examples.char_perplexity import CharPerplexity
from lightning_fl.models.examples.linear_regression import LinearRegression
from lightning_fl.models.examples.smoothed_classifier import SmoothedClassifier

__all__ = ["CharPerplexity", "LinearRegression", "SmoothedClassifier"]
