import pytest
import torch

from lightning_fl.faults.validation import ConfigError
from lightning_fl.simulation.sampling import ClientSampler
from lightning_fl.state.client_state import ClientStateStore


def test_uniform_sampling_is_without_replacement_and_reproducible():
    sampler = ClientSampler(20, 5, "uniform", seed=3)
    cohorts = [sampler.sample(t) for t in range(50)]
    for cohort in cohorts:
        assert len(cohort) == 5 and len(set(cohort.tolist())) == 5
        assert cohort.tolist() == sorted(cohort.tolist())
    assert torch.equal(ClientSampler(20, 5, "uniform", seed=3).sample(7), cohorts[7])
    assert len({tuple(c.tolist()) for c in cohorts}) > 40  # rounds draw different cohorts


def test_uniform_sampling_frequency_is_flat():
    sampler = ClientSampler(10, 3, "uniform", seed=0)
    counts = torch.zeros(10)
    for t in range(3000):
        counts[sampler.sample(t)] += 1
    # Each client is picked with probability 3/10 per round: 900 expected, sd ~ 25.
    assert (counts - 900).abs().max() < 120


def test_by_samples_prefers_large_clients():
    sizes = torch.tensor([1, 1, 1, 1, 1000])
    sampler = ClientSampler(5, 1, "by_samples", seed=0, num_samples=sizes)
    picks = torch.stack([sampler.sample(t) for t in range(200)]).flatten()
    # P(client 4) = 1000 / 1004.
    assert (picks == 4).float().mean() > 0.95


def test_all_and_full_cohort_return_everyone():
    assert ClientSampler(4, 2, "all", seed=0).sample(5).tolist() == [0, 1, 2, 3]
    assert ClientSampler(4, 4, "uniform", seed=0).sample(5).tolist() == [0, 1, 2, 3]
    # `all` ignores clients_per_round, so its default (10) does not have to fit a smaller federation.
    assert ClientSampler(4, 10, "all", seed=0).sample(0).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(("k", "mode", "message"), [
    (40, "uniform", "clients_per_round must be between 1 and 30"),
    (0, "uniform", "clients_per_round must be an integer >= 1"),
    (5, "random", "sampling must be one of uniform, by_samples, all"),
])
def test_bad_sampling_config(k, mode, message):
    with pytest.raises(ConfigError, match=message):
        ClientSampler(30, k, mode, seed=0)


def test_checkpoint_with_other_sampling_config_is_rejected():
    state = ClientSampler(30, 10, "uniform", seed=0).state_dict()
    with pytest.raises(ConfigError, match="seed: checkpoint 0 vs config 1"):
        ClientSampler(30, 10, "uniform", seed=1).load_state_dict(state)


def test_participation_counts_include_current_round():
    store = ClientStateStore(4)
    assert store.record_participation(torch.tensor([0, 2]), 0).tolist() == [1, 1]
    assert store.record_participation(torch.tensor([2, 3]), 1).tolist() == [2, 1]
    restored = ClientStateStore(4)
    restored.load_state_dict(store.state_dict())
    assert restored.participation.tolist() == [1, 0, 2, 1]
    assert restored.last_round.tolist() == [0, -1, 1, 1]
