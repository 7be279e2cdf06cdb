"""What the CUDA code paths decide, checked without a GPU (the GPU itself: bench/gpu_check.sh)."""

from __future__ import annotations

import torch

from lightning_fl.engines import LocalTrainingPlan
from lightning_fl.engines.formulation import exact_fp32
from lightning_fl.engines.selection import choose_engine
from lightning_fl.models import CNN28, LogisticRegression, PflCNN


def test_the_set_up_check_turns_tf32_off_on_cuda_only_and_restores_it() -> None:
    backends = torch.backends
    saved = backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32
    try:
        backends.cuda.matmul.allow_tf32 = backends.cudnn.allow_tf32 = True
        with exact_fp32(torch.device("cuda", 0)):
            assert not backends.cuda.matmul.allow_tf32 and not backends.cudnn.allow_tf32
        assert backends.cuda.matmul.allow_tf32 and backends.cudnn.allow_tf32
        with exact_fp32(torch.device("cpu")):
            assert backends.cudnn.allow_tf32
    finally:
        backends.cuda.matmul.allow_tf32, backends.cudnn.allow_tf32 = saved


def test_auto_trains_convolutions_vectorized_on_cuda_and_sequentially_on_cpu() -> None:
    plan = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.1), 1, 10, 0, 0.1)
    for model in (PflCNN(), CNN28()):
        assert choose_engine(plan, model, torch.device("cuda"))[0] == "vectorized"
        assert choose_engine(plan, model, torch.device("cpu"))[0] == "sequential"
    for precision in ("16-mixed", "bf16-mixed"):
        mixed = LocalTrainingPlan(lambda p: torch.optim.SGD(p, lr=0.1), 1, 10, 0, 0.1, precision)
        assert choose_engine(mixed, PflCNN(), torch.device("cuda"))[0] == "vectorized"
    assert choose_engine(plan, LogisticRegression(60, 10), torch.device("cuda"))[0] == "vectorized"
