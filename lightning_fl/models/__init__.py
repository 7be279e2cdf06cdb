"""Client models (LightningModules)."""

from lightning_fl.models.base import ClientModule
from lightning_fl.models.cnn import CNN28
from lightning_fl.models.logistic import LogisticRegression
from lightning_fl.models.mlp import MLP

__all__ = ["CNN28", "MLP", "ClientModule", "LogisticRegression"]

from lightning_fl.models.char_lstm import CharLSTM  # noqa: E402
from lightning_fl.models.cifar_cnn import CifarCNN  # noqa: E402
from lightning_fl.models.lenet import LeNet5  # noqa: E402
from lightning_fl.models.pfl_cnn import PflCNN  # noqa: E402
from lightning_fl.models.resnet_gn import ResNet18GN  # noqa: E402

__all__ += ["CharLSTM", "CifarCNN", "LeNet5", "PflCNN", "ResNet18GN"]
