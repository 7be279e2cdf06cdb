"""Every shipped config trains to bitwise the recorded global weights after 3 rounds (a guard against refactors).

The digests were recorded on main at ec039e6 (before the composable-aggregation pipeline) and held through the
aggregation, DP, personalization and scale work; the 18 configs whose clients train a single Linear with plain SGD
on the vectorized engine were re-recorded when its one-loop path changed their float rounding (one ``baddbmm_``
weight update, ``torch.softmax`` on small steps: docs/performance.md, "The one-loop path"). All were taken with
``lightning_fl.faults.state_digest.state_digest`` of ``last.ckpt``'s ``state_dict`` after
``--trainer.max_epochs 3``; the experiment configs (real data) ran with the tiny recipe of
``tests/datamodules/test_real_configs.py`` (2 clients per round, 1 local epoch). A refactor of the
aggregation that changes any of them changes what users get from their configs.

Float kernels differ between CPU instruction sets, so the digests hold on the CPU capability they were
recorded on (torch's ``AVX512``, torch 2.13.0); elsewhere the test skips and says why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from lightning_fl.faults.state_digest import state_digest
from tests.conftest import run_cli, skip_without_data
from tests.datamodules.test_real_configs import TINY, data_present

REPO = Path(__file__).resolve().parents[1]
RECORDED_ON = ("AVX512", "2.13.0")
DIGESTS = {
    "dwfed_synthetic.yaml": "c3b9f1215515488242e9ea0a2741bb7cdbe0a7a9194b71483c6f38b96429560f",
    "experiments/dwfed_fmnist.yaml": "37011fee2964cbc93484bc13639f5ca950808e90a37deec5179f052262f950d8",
    "experiments/fedfa_digits.yaml": "7ea8fc6cc6b7e02eb40a83dccfbb2605440202925bf32ed9b51c49e75f9c413b",
    "experiments/fedfa_fmnist.yaml": "c59177d86aec3e18f9758a47458d190b5fff600794d3f7a2718e2897ecb5ba7b",
    "experiments/fedfa_shakespeare.yaml": "42b74fc9d80761b6d338ab6be4940373bd6469b58effb94ca68760e00efd731e",
    "experiments/igfl_fmnist_cross_device.yaml": "0c8b12111d6e9d013adf38e8f9afc78199a8a7f77b17291421a8b761dc8824ce",
    "experiments/igfl_fmnist_cross_silo.yaml": "611e11ace2e76ca98d4349a4a9b98c194f438f8883604d29a5b879c2187837d5",
    "experiments/tempo_fmnist.yaml": "bdae26088a40fe7a97a31bdfafa912b043b4bd785aa77c51f5ad0eed2cf43013",
    "fedadagrad_synthetic.yaml": "2a5107978c402b31d6dab48cffb0d7e85f6fe1771427fd0431d9f5bb53543755",
    "fedadam_synthetic.yaml": "1c60f3605ecebce9efc3afb6746c331bba19f95652e1b092b6011beb1950b090",
    "fedadp_e4_hierarchy_synthetic.yaml": "27112f40a8897a8ee0e517c728a337a121db6bc55f59785daf240a24744ea3c4",
    "fedadp_e6_hierarchy_synthetic.yaml": "38a6108443a8d867027dc89ef29b38d1c8891e3824da05faa5bd1cf40c6747d4",
    "fedadp_e8_hierarchy_synthetic.yaml": "66ddbd701c2854829e89345a1ce53cdebac2730817273d6a56d7d9f2971e8aa2",
    "fedadp_synthetic.yaml": "ee86bf802d9b3acf7eb8e641daee0e9dd94bdf23aa330bac7e4fc139485273c8",
    "fedavg_synthetic.yaml": "069d4329a54be6f0d965d29678416348ba2234ab68fa91b827f03362f1ed7d0f",
    "fedavg_synthetic_paper.yaml": "0f3f4b373faf2843277835d634e878b789507791b846a39ac02e4d4ab5255227",
    "fedavgm_synthetic.yaml": "31644858c25c932ba9518c928388e874309bb6ced983e2900351c34545be68cb",
    "feddyn_synthetic.yaml": "da7269e74b3ad3dca46db429ca815d8fbb94e42e3686ef8edfb36c90233247c1",
    "fedfa_mo_synthetic.yaml": "a0d709c93e76426e6cf2c8337c622d1a107abf6e41637557577d0ba7f1d27265",
    "fedfa_synthetic.yaml": "97085d4625b7af87cce44ca469fb48b368cccd0eb9d7f880e7db3bd12491b0a5",
    "fednova_synthetic.yaml": "5f9fc064a3fee90fe1c4d3317341478b6bfa593c71beacc359800aa235294a8a",
    "fedprox_synthetic.yaml": "a43aeaa4329303a2ebbff541efdbde01ac73eb353fc412db6f481c0c25e48b26",
    "fedyogi_synthetic.yaml": "3b3e591c88769dc8566549c73a518418c7de2c555cca2c1841cbb6be21c7d8c4",
    "igfl_c_synthetic.yaml": "1b4ef01bce874ee9c80438fdafacc9d5c43f3058d7211efb477880e791748beb",
    "igfl_s_synthetic.yaml": "523d2823b8731ebd2c6eda167fc106123f24e6d5e77236237e612e75f59fc171",
    "igfl_synthetic.yaml": "738770ffa0117a4712e4ee710c3a4662135a916397e3df15f8e5a21d982d2ce3",
    "qffl_synthetic.yaml": "c0de3320f9611c3b29f0786252641c96506f2b975479ccf6deaa5764588ff574",
    "scaffold_synthetic.yaml": "46d4d23475dc8179becaf8b4b4d5bb275f30e65b16122fc5e3268eac7159bdaf",
    "stragglers/fedavg_drop.yaml": "e72147a0fc195845cc2c869e632a858aa9fdf39b70ea4202ea0456012d91c9b0",
    "stragglers/fedprox_mu0_partial.yaml": "c819c48c17f5134c497bd63640739fc44ff16c961f8973fb53e8a38787f09e4f",
    "stragglers/fedprox_partial.yaml": "c26ac045e72fb52c254b6f4655eddfec187b9e00909911e90d64dd60729918cd",
    "tempo_synthetic.yaml": "51d9e8d47a3541bd228a5ceee41a0213104c7e1265fc2aff4a2dcf6e1ffe47d8",
}


#: Configs added with the pipeline or later (they have no pre-pipeline weights to keep).
ADDED_SINCE = {"robust/fedfa_alie_trimmed_mean.yaml", "privacy/fedavg_dp_synthetic.yaml",
               "personalization/ditto_synthetic.yaml", "personalization/local_synthetic.yaml",
               "personalization/pfedme_synthetic.yaml", "personalization/apfl_synthetic.yaml",
               "user_modules/regression.yaml", "user_modules/smoothed_classifier.yaml",
               "user_modules/shakespeare_perplexity.yaml", "datasets/any_dataset.yaml",
               "datasets/any_dataset_lazy.yaml", "datasets/memmap_lazy.yaml",
               "privacy/privacy_synthetic.yaml", "privacy/privacy_fmnist.yaml"}


def test_every_shipped_config_has_a_recorded_digest():
    shipped = sorted(str(p.relative_to(REPO / "configs")) for p in (REPO / "configs").glob("**/*.yaml"))
    assert shipped == sorted({*DIGESTS, *ADDED_SINCE}), "a config was added or removed: record its digest from main"


@pytest.mark.parametrize("config", sorted(DIGESTS))
def test_three_rounds_give_the_recorded_global_weights(config, tmp_path):
    here = (torch.backends.cpu.get_cpu_capability(), torch.__version__.split("+")[0])
    if here != RECORDED_ON:
        pytest.skip(f"digests recorded on {RECORDED_ON}; this machine is {here} (other float kernels)")
    path = REPO / "configs" / config
    args = ["fit", "--config", str(path), "--trainer.max_epochs", "3", "--trainer.enable_progress_bar", "false"]
    if config.startswith("experiments/"):
        data = yaml.safe_load(path.read_text())["data"]["class_path"].rsplit(".", 1)[-1]
        reason = data_present(data)
        skip_without_data(reason is None, reason or "")
        args += [a.format(data=REPO / "data") for a in TINY[data]] + ["--model.clients_per_round=2",
                                                                     "--model.local_epochs=1"]
    args += ["--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.logger.init_args.name", "run",
             "--trainer.logger.init_args.version", "0"]
    assert run_cli(*args) == 0
    checkpoint = torch.load(tmp_path / "run" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert state_digest(checkpoint["state_dict"]) == DIGESTS[config]
