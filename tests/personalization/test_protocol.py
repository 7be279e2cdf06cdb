"""Tests for lightning_fl.personalization.protocol (SPEC section 13.3): the declared ``model.eval`` block.

Every expected value is worked out by hand in a comment or by a naive reference in this file.
"""

from __future__ import annotations

import doctest

import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.personalization import EvalProtocol
from lightning_fl.personalization import protocol as protocol_module
from lightning_fl.state.seeding import derive_seed


def _one_line_error(field: str, make) -> str:
    with pytest.raises(ConfigError, match=rf"model\.eval\.{field}") as err:
        make()
    message = str(err.value)
    assert "\n" not in message, message
    return message


# ----------------------------------------------------------------------------------------- defaults
def test_defaults_are_global_all_last_client_mean():
    p = EvalProtocol()
    assert (p.model, p.clients, p.rounds, p.weighting, p.on_missing_personal) == (
        "global", None, "last", "client_mean", "error")
    assert (p.finetune_steps, p.finetune_epochs, p.unseen_fraction, p.last_r, p.paper_compat) == (0, 0, 0.0, 10, None)
    assert p.effective_clients == "all"


@pytest.mark.parametrize(("kwargs", "clients"), [
    ({"model": "personal"}, "participated"),  # the default for personal models
    ({"model": "global"}, "all"),
    ({"model": "finetuned", "finetune_steps": 3}, "all"),
    ({"model": "personal", "clients": "all"}, "all"),  # an explicit choice is kept
    ({"model": "global", "clients": "participated"}, "participated"),
])
def test_effective_clients(kwargs, clients):
    assert EvalProtocol(**kwargs).effective_clients == clients


# ----------------------------------------------------------------------------------------- field errors
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"model": "ensemble"}, "model"),
    ({"model": "finetuned(5)"}, "model"),
    ({"clients": "some"}, "clients"),
    ({"rounds": "first"}, "rounds"),
    ({"weighting": "weighted"}, "weighting"),
    ({"on_missing_personal": "skip"}, "on_missing_personal"),
    ({"paper_compat": "min_test"}, "paper_compat"),
    ({"paper_compat": "pfedme"}, "paper_compat"),
    ({"model": "finetuned", "finetune_steps": -1}, "finetune_steps"),
    ({"model": "finetuned", "finetune_steps": 1.5}, "finetune_steps"),
    ({"model": "finetuned", "finetune_steps": True}, "finetune_steps"),
    ({"model": "finetuned", "finetune_epochs": -2}, "finetune_epochs"),
    ({"model": "finetuned"}, "finetune_steps"),  # finetuned(k) needs k >= 1 or epochs
    ({"model": "personal", "on_missing_personal": "finetune"}, "finetune_steps"),  # so does its fallback
    ({"model": "finetuned", "finetune_steps": 2, "finetune_epochs": 1}, "finetune_epochs"),  # ambiguous budget
    ({"model": "global", "finetune_steps": 5}, "finetune_steps"),  # a budget nothing reads
    ({"model": "personal", "finetune_epochs": 1}, "finetune_epochs"),  # on_missing_personal: error reads none
    ({"unseen_fraction": 1.0}, "unseen_fraction"),
    ({"unseen_fraction": -0.1}, "unseen_fraction"),
    ({"unseen_fraction": True}, "unseen_fraction"),
    ({"unseen_fraction": "0.1"}, "unseen_fraction"),
    ({"rounds": "mean_last", "last_r": 0}, "last_r"),
    ({"rounds": "mean_last", "last_r": 2.5}, "last_r"),
    ({"clients": "unseen"}, "clients"),  # unseen needs unseen_fraction > 0
    ({"clients": "unseen", "unseen_fraction": 0.1, "model": "personal",
      "on_missing_personal": "finetune", "finetune_steps": 1}, "clients"),  # unseen clients have no p_k
    ({"model": "personal", "unseen_fraction": 0.1}, "on_missing_personal"),  # unseen/* cannot be evaluated
])
def test_bad_fields_name_the_field_in_one_line(kwargs, field):
    _one_line_error(field, lambda: EvalProtocol(**kwargs))


@pytest.mark.parametrize("rounds", ["best_test", "max_test", "BestTest", "test"])
def test_best_on_test_is_refused_with_the_reason(rounds):
    message = _one_line_error("rounds", lambda: EvalProtocol(rounds=rounds))
    assert "last, mean_last, best_val" in message  # the allowed values
    assert "optimistic" in message and "best_val" in message and "paper_compat: max_test" in message


def test_choice_errors_list_the_allowed_values():
    message = _one_line_error("model", lambda: EvalProtocol(model="ensemble"))
    assert "global, personal, finetuned" in message and "'ensemble'" in message
    message = _one_line_error("weighting", lambda: EvalProtocol(weighting="weighted"))
    assert "client_mean, pooled" in message


@pytest.mark.parametrize("kwargs", [
    {"model": "finetuned", "finetune_steps": 1},
    {"model": "finetuned", "finetune_epochs": 2},
    {"model": "personal", "on_missing_personal": "finetune", "finetune_steps": 5, "unseen_fraction": 0.2},
    {"model": "global", "clients": "unseen", "unseen_fraction": 0.1},
    {"model": "finetuned", "finetune_steps": 5, "clients": "unseen", "unseen_fraction": 0.1},
    {"rounds": "mean_last", "last_r": 1},
    {"rounds": "best_val", "paper_compat": "max_test", "weighting": "pooled"},
])
def test_valid_declarations_are_accepted(kwargs):
    EvalProtocol(**kwargs)


# ----------------------------------------------------------------------------------------- run checks
@pytest.mark.parametrize("method", ["FedRep", "FedPer", "FedBN"])
def test_global_model_is_refused_for_methods_without_one(method):
    message = _one_line_error("model", lambda: EvalProtocol(model="global").check(
        10, method_name=method, method_has_personal_model=True, method_has_global=False))
    assert method in message and "personal, finetuned" in message


def test_personal_model_is_refused_for_methods_without_one():
    message = _one_line_error("model", lambda: EvalProtocol(model="personal").check(
        10, method_name="FedAvg", method_has_personal_model=False))
    assert "FedAvg" in message and "global, finetuned" in message


def test_allowed_model_method_pairs_pass_the_check():
    EvalProtocol(model="personal").check(10, method_name="FedRep", method_has_personal_model=True,
                                         method_has_global=False)
    EvalProtocol(model="finetuned", finetune_steps=5).check(10, method_name="FedRep", method_has_personal_model=True,
                                                            method_has_global=False)
    EvalProtocol(model="global").check(10, method_name="FedAvg", method_has_personal_model=False)
    EvalProtocol(model="global").check(10, method_name="Ditto", method_has_personal_model=True)


def test_a_holdout_leaving_no_training_client_is_refused():
    # N = 1, u = 0.5: floor(0.5) = 0, max(1, 0) = 1 held out of 1 -> nobody trains.
    p = EvalProtocol(unseen_fraction=0.5)
    message = _one_line_error("unseen_fraction", lambda: p.check(1, method_name="FedAvg",
                                                                 method_has_personal_model=False))
    assert "no training client" in message
    _one_line_error("unseen_fraction", lambda: p.unseen_clients(0, 1))
    p.check(2, method_name="FedAvg", method_has_personal_model=False)  # N = 2: 1 held out, 1 trains


# ----------------------------------------------------------------------------------------- unseen clients
@pytest.mark.parametrize(("u", "n", "expected"), [
    (0.0, 100, 0),      # no holdout
    (0.01, 50, 1),      # floor(0.5) = 0 -> at least one
    (0.25, 10, 2),      # floor(2.5) = 2
    (0.1, 100, 10),
    (0.57, 100, 57),    # floor(57); the float product 0.57 * 100 = 56.99999999999999 would give 56
    (0.999, 1000, 999),
])
def test_num_unseen(u, n, expected):
    assert EvalProtocol(unseen_fraction=u).num_unseen(n) == expected


def _naive_unseen(seed: int, n: int, m: int) -> list[int]:
    # The first m entries of randperm(N) under the generator keyed by (seed, "unseen"), sorted.
    generator = torch.Generator().manual_seed(derive_seed(seed, "unseen"))
    return sorted(torch.randperm(n, generator=generator)[:m].tolist())


@pytest.mark.parametrize(("seed", "u", "n"), [(0, 0.1, 100), (7, 0.25, 10), (123, 0.5, 9)])
def test_unseen_clients_match_the_seeded_permutation(seed, u, n):
    p = EvalProtocol(unseen_fraction=u)
    ids = p.unseen_clients(seed, n)
    assert ids.dtype == torch.int64
    assert ids.tolist() == _naive_unseen(seed, n, p.num_unseen(n))
    assert ids.tolist() == sorted(set(ids.tolist())) and all(0 <= i < n for i in ids.tolist())
    assert torch.equal(ids, p.unseen_clients(seed, n))  # a pure function of (seed, N)


def test_unseen_set_depends_only_on_seed_and_count():
    # The same seed, N and u give the same set for any model kind (a Local run and a method share it) ...
    a = EvalProtocol(model="global", unseen_fraction=0.2).unseen_clients(3, 50)
    b = EvalProtocol(model="finetuned", finetune_steps=2, unseen_fraction=0.2).unseen_clients(3, 50)
    assert torch.equal(a, b)
    # ... a larger fraction extends the set (first entries of one permutation), and another seed differs.
    larger = EvalProtocol(unseen_fraction=0.4).unseen_clients(3, 50)
    assert set(a.tolist()) < set(larger.tolist())
    assert not torch.equal(a, EvalProtocol(unseen_fraction=0.2).unseen_clients(4, 50))
    assert EvalProtocol().unseen_clients(3, 50).numel() == 0


# ----------------------------------------------------------------------------------------- description, hparams
def test_describe_personal_is_the_documented_line():
    assert EvalProtocol(model="personal").describe() == (
        "eval: model=personal clients=participated split=val for selection, test for report rounds=last"
        " weighting=client_mean (pooled also logged)")


def test_describe_names_every_non_default_choice():
    line = EvalProtocol(model="finetuned", finetune_steps=5, rounds="mean_last", last_r=7, weighting="pooled",
                        unseen_fraction=0.1, paper_compat="max_test").describe()
    assert "\n" not in line and line.startswith("eval: ")
    for part in ("model=finetuned(k=5)", "clients=all", "rounds=mean_last(7)", "weighting=pooled (client_mean also"
                 " logged)", "unseen_fraction=0.1", "test_optimistic/*"):
        assert part in line, part
    assert "model=finetuned(2 epochs)" in EvalProtocol(model="finetuned", finetune_epochs=2).describe()
    fallback = EvalProtocol(model="personal", on_missing_personal="finetune", finetune_steps=3).describe()
    assert "on_missing_personal=finetune(k=3)" in fallback


def test_hparams_are_flat_and_have_the_same_keys_for_every_run():
    default = EvalProtocol().hparams()
    other = EvalProtocol(model="personal", rounds="best_val", paper_compat="max_test").hparams()
    assert list(default) == list(other)
    assert all(k.startswith("eval/") for k in default)
    assert all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in default.values())
    assert default["eval/model"] == "global" and default["eval/clients"] == "all"
    assert default["eval/paper_compat"] == "none" and default["eval/unseen_fraction"] == 0.0
    assert other["eval/clients"] == "participated" and other["eval/rounds"] == "best_val"
    assert other["eval/paper_compat"] == "max_test"


def test_jsonargparse_builds_it_from_yaml_values():
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--eval", type=EvalProtocol)
    cfg = parser.parse_object({"eval": {"model": "finetuned", "finetune_steps": 5, "rounds": "mean_last"}})
    built = parser.instantiate_classes(cfg).eval
    assert built == EvalProtocol(model="finetuned", finetune_steps=5, rounds="mean_last")


def test_docstring_examples():
    result = doctest.testmod(protocol_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
