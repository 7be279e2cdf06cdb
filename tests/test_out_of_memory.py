"""Out of memory ends in one explained line (plus one of numbers), and the last checkpoint survives."""

from __future__ import annotations

import pytest
import torch

from lightning_fl.faults.checkpoint_io import AtomicCheckpointIO
from lightning_fl.simulation.out_of_memory import KNOBS, explain_out_of_memory, memory_failure
from tests.conftest import ROUND_CHECKPOINT, run_cli

CPU_MESSAGE = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried"
               " to allocate 5368709120 bytes. Error code 12 (Cannot allocate memory)")
CUDA_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which"
                " 1.06 GiB is free.")


def _wrapped(error: BaseException) -> BaseException:
    try:
        try:
            raise error
        except BaseException as inner:
            raise ValueError("jsonargparse-style wrapper") from inner
    except ValueError as outer:
        return outer


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError(CUDA_MESSAGE), RuntimeError(CPU_MESSAGE),
                                   MemoryError()], ids=["cuda", "cpu-allocator", "python"])
def test_allocation_failures_are_found_in_the_exception_chain(error) -> None:
    assert memory_failure(error) is error
    assert memory_failure(_wrapped(error)) is error


def test_other_errors_are_not_memory_failures() -> None:
    assert memory_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied (10x60 and 784x10)")) is None
    assert memory_failure(ValueError("no")) is None


@pytest.mark.parametrize(("error", "what"), [
    (torch.cuda.OutOfMemoryError(CUDA_MESSAGE), "GPU allocation failed for 2.00 GiB"),
    (RuntimeError(CPU_MESSAGE), "CPU allocation failed for 5.0 GiB"),  # 5368709120 bytes = 5 x 2**30
    (MemoryError(), "Python MemoryError"),
])
def test_without_a_run_the_message_is_one_line_with_the_knobs(error, what) -> None:
    message = str(explain_out_of_memory(error))
    assert message == (f"out of memory while setting up the run ({what}): the cohort (clients per round x model size)"
                       f" or the per-client state did not fit; {KNOBS}; no checkpoint was written in this run")


@pytest.mark.parametrize(("kind", "what"), [("torch", "CPU allocation failed for 1,024.0 PiB"),  # 2**60 bytes
                                            ("python", "Python MemoryError")])
def test_out_of_memory_in_round_2_is_explained_and_round_1_stays_saved(tiny, tmp_path, capfd, kind, what) -> None:
    allocate = {"class_path": "tests.checkpoint_faults.AllocateAtRound", "init_args": {"round_idx": 1, "kind": kind}}
    config = tiny(**{"trainer.callbacks": [{"class_path": "lightning_fl.callbacks.Scaffold"}, allocate,
                                           ROUND_CHECKPOINT]})
    assert run_cli("fit", "--config", str(config)) == 1
    last = tmp_path / "logs" / "run" / "version_0" / "checkpoints" / "last.ckpt"
    err = capfd.readouterr().err
    assert "Traceback" not in err
    first, numbers = err.strip().splitlines()[-2:]
    assert first.startswith(f"error: out of memory in round 2 ({what}): ")  # round index 1
    for knob in ("model.max_parallel_clients", "model.clients_per_round", "model.client_state: disk",
                 "model.engine: sequential", "trainer.precision"):
        assert knob in first
    assert first.endswith(f"the last checkpoint, {last} (1 round done), is intact (resume with --ckpt_path)")
    # d = 60 x 10 weights + 10 biases = 610 floats = 2,440 bytes; 3 clients per round; after round 1,
    # SCAFFOLD holds one control row for each of the 3 clients that trained.
    assert numbers == ("model: 610 parameters (2.4 KiB in fp32); cohort: 3 of 6 clients (7.1 KiB of trained weights"
                       " per round); engine: vectorized, max_parallel_clients: all; per-client state in memory:"
                       " 7.1 KiB (3 rows; model.client_state: memory)")
    checkpoint = AtomicCheckpointIO().load_checkpoint(last)
    assert checkpoint["federated"]["rounds_completed"] == 1
    assert len(checkpoint["callbacks"]["Scaffold"]["clients"]["client_control"]["ids"]) == 3
