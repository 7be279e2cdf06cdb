"""Every shipped config trains to bitwise the same global weights after 3 rounds as before the aggregation work.

The digests were recorded on main at ec039e6 (before the composable-aggregation pipeline), with
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
    "dwfed_synthetic.yaml": "2afff049ad8cbcdfb23a224bb6b2f58b7c9ab255b099e61c039a96da9a737a75",
    "experiments/dwfed_fmnist.yaml": "37011fee2964cbc93484bc13639f5ca950808e90a37deec5179f052262f950d8",
    "experiments/fedfa_digits.yaml": "ed2f5622367b154e817eb5f05d238ff78da06020f698cccb7936712ae137ad60",
    "experiments/fedfa_fmnist.yaml": "4facf1bee9cf0c15f82e577c30074b7b724af44578da965d991f1c74bdeb9fd7",
    "experiments/fedfa_shakespeare.yaml": "42b74fc9d80761b6d338ab6be4940373bd6469b58effb94ca68760e00efd731e",
    "experiments/igfl_fmnist_cross_device.yaml": "0c8b12111d6e9d013adf38e8f9afc78199a8a7f77b17291421a8b761dc8824ce",
    "experiments/igfl_fmnist_cross_silo.yaml": "611e11ace2e76ca98d4349a4a9b98c194f438f8883604d29a5b879c2187837d5",
    "experiments/tempo_fmnist.yaml": "bdae26088a40fe7a97a31bdfafa912b043b4bd785aa77c51f5ad0eed2cf43013",
    "fedadagrad_synthetic.yaml": "9fabbcd5a111647d6aa473933650c353d4b09018c3cb3ed82218ee79e810d3ec",
    "fedadam_synthetic.yaml": "587349851356727fa33efaabe70b1c2a3e6ea490eaeaddb6df75c3070afdb125",
    "fedadp_e4_hierarchy_synthetic.yaml": "29ca008d3f923d4f4c840117bd1dbb91596278ae0a87f051d92866321612e813",
    "fedadp_e6_hierarchy_synthetic.yaml": "8c03047ad8c6d6376662f97f017060127a29131b41a5050f553fa18605b46eb5",
    "fedadp_e8_hierarchy_synthetic.yaml": "5658ea4b24c8f946898f14d37e86307d165c2ef84bae81b80d03416788d0fb1c",
    "fedadp_synthetic.yaml": "6ee3ccde6e5fb5007361da88d736d84a9384e8bed8538e3dc076003beafb55ce",
    "fedavg_synthetic.yaml": "0f13f31c4352542cf50c260e5ea4825937f5d681277cb952e9a6d64f116e2df4",
    "fedavg_synthetic_paper.yaml": "9047683cb80d425d8e11d0203496a94348bd46ecb6562eae3178198a0055398f",
    "fedavgm_synthetic.yaml": "e7fb439af577d630ae222b4e9e2a6f770ea7c8cffde106e40023e3f5cac0c5eb",
    "feddyn_synthetic.yaml": "da7269e74b3ad3dca46db429ca815d8fbb94e42e3686ef8edfb36c90233247c1",
    "fedfa_mo_synthetic.yaml": "a0d709c93e76426e6cf2c8337c622d1a107abf6e41637557577d0ba7f1d27265",
    "fedfa_synthetic.yaml": "97085d4625b7af87cce44ca469fb48b368cccd0eb9d7f880e7db3bd12491b0a5",
    "fednova_synthetic.yaml": "5f9fc064a3fee90fe1c4d3317341478b6bfa593c71beacc359800aa235294a8a",
    "fedprox_synthetic.yaml": "a43aeaa4329303a2ebbff541efdbde01ac73eb353fc412db6f481c0c25e48b26",
    "fedyogi_synthetic.yaml": "c592e5a1d17cf8ab6911e7e83dcef1a5f984edf346b8c47d77ec748d7a2abd8f",
    "igfl_c_synthetic.yaml": "1b4ef01bce874ee9c80438fdafacc9d5c43f3058d7211efb477880e791748beb",
    "igfl_s_synthetic.yaml": "6439f70bcf553c4ca0e673cb882bd02e3494de56f532ffa8bee8ddd56cac8d4e",
    "igfl_synthetic.yaml": "738770ffa0117a4712e4ee710c3a4662135a916397e3df15f8e5a21d982d2ce3",
    "qffl_synthetic.yaml": "5cd85d67aca7f1bb092045031b0fa56834753d43ea2838e980172f350afc63a6",
    "scaffold_synthetic.yaml": "46d4d23475dc8179becaf8b4b4d5bb275f30e65b16122fc5e3268eac7159bdaf",
    "stragglers/fedavg_drop.yaml": "ad41ce9bdb82eb3cf7b4928a1efb8f6eefc8531ed13146f15e036589fb9bbb3d",
    "stragglers/fedprox_mu0_partial.yaml": "503f20071f40e359a762b9cfbcec8282cf954b1f91cf6719b5e3d48c5dbdce4a",
    "stragglers/fedprox_partial.yaml": "c26ac045e72fb52c254b6f4655eddfec187b9e00909911e90d64dd60729918cd",
    "tempo_synthetic.yaml": "c979abcefa92ec7bd29e00ed0ab6aa7e2cddb3ecc32200369cc033403e12d80b",
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
