# Every target creates the virtual environment with the pinned packages on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= configs/fedfa_synthetic.yaml
DATA ?= synthetic_1_1
ROUNDS ?=
LOGS ?= lightning_logs
SEEDS ?= 3
FRACTION ?= 0.9
JOBS ?=
TUNE ?=
# compare and tempo tune with TUNE=1; reproduce tunes every method at SCALE=small unless TUNE=0, and at SCALE=paper
# only with TUNE=1; TRIALS=... sets the trials per method (the same for every method)
TRIALS ?=
METRIC ?=
TUNE_ON := $(filter-out 0,$(TUNE))
TUNE_OFF := $(filter 0,$(TUNE))
PAPER ?= fedfa
SCALE ?= small
# reproduce's seeds: SEEDS where the user sets it (command line or environment), else 5 (SEEDS ?= 3 is compare's).
REPRODUCE_SEEDS = $(if $(filter command line environment,$(origin SEEDS)),$(SEEDS),5)

.PHONY: train test tensorboard compare tempo tune stragglers robust privacy bench data memmap-data clean-venv reproduce

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

## train: the main job (CONFIG=..., default FedFa on Synthetic(1,1), 60 rounds in about 20 s on a 2-core CPU)
train: $(STAMP)
	$(PY) -m lightning_fl fit --config $(CONFIG)

## test: the test suite, one worker per core (pytest-xdist; a module's tests share a worker, so its fixtures
## are built once); TEST_ARGS=... adds pytest arguments, e.g. TEST_ARGS="-n 0 tests/faults" for one process
TEST_ARGS ?=
test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadscope --no-loadscope-reorder $(TEST_ARGS)

## tensorboard: open the logs of every run; prints the address that opens Time Series on the fairness statistics
## (test/<metric>_mean, _worst20, _best20, _var pinned above the other cards)
tensorboard: $(STAMP)
	$(PY) -m lightning_fl.apps.tensorboard --logdir $(LOGS)

## compare: METHODS (name=config pairs; default FedAvg, FedProx, q-FFL, FedFa-mo and FedFa) on one dataset
## (DATA=synthetic_0_0|synthetic_0.5_0.5|synthetic_1_1|synthetic_iid|digits|fmnist; fmnist needs `make data`) over
## SEEDS seeds (a count, default 3, or a list 0,1,2): mean ± std and 95% t intervals per method, curves, client
## accuracies, wall times in $(LOGS)/compare_$(DATA); ROUNDS=... overrides the rounds, JOBS=... the runs at a time
## (default: one per core), TUNE=1 first tunes every method with the same budget on the validation splits (TRIALS
## per method, as for tune; docs/experiments.md; output in $(LOGS)/compare_$(DATA)_tuned). Finished runs are kept.
## Example: make compare DATA=fmnist METHODS="FedAvg=configs/fedavg_synthetic.yaml Scaffold=configs/scaffold_synthetic.yaml"
METHODS ?= FedAvg=configs/fedavg_synthetic.yaml FedProx=configs/fedprox_synthetic.yaml \
	q-FFL=configs/qffl_synthetic.yaml FedFa-mo=configs/fedfa_mo_synthetic.yaml FedFa=configs/fedfa_synthetic.yaml
compare: $(STAMP)
	$(PY) -m lightning_fl.apps.compare --save-dir $(LOGS)/compare_$(DATA)$(if $(TUNE_ON),_tuned) --data $(DATA) \
		--seeds $(SEEDS) $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(JOBS),--jobs $(JOBS)) $(if $(TUNE_ON),--tune) \
		$(if $(TRIALS),--tune-trials $(TRIALS)) $(METHODS)

## tune: tune CONFIGS (name=config pairs; default the METHODS of compare) under one budget: TRIALS trials per method
## (default 6) on the tuning seeds 1000 and 1001, selected on the validation splits (METRIC, default val/acc_mean;
## Optuna TPE, a median pruner over rounds, spaces widened at their edge); writes $(LOGS)/tune/tuning.md and
## tuned/<name>.yaml (docs/experiments.md, "Fair baselines"); ROUNDS and JOBS as for compare. Finished trials are kept.
## Example: make tune CONFIGS="FedAvg=configs/fedavg_synthetic.yaml q-FFL=configs/qffl_synthetic.yaml" TRIALS=12
CONFIGS ?= $(METHODS)
tune: $(STAMP)
	$(PY) -m lightning_fl tune $(foreach c,$(CONFIGS),--config $(c)) --save-dir $(LOGS)/tune \
		$(if $(TRIALS),--trials $(TRIALS)) $(if $(METRIC),--metric $(METRIC)) $(if $(JOBS),--jobs $(JOBS)) \
		$(if $(ROUNDS),-- --trainer.max_epochs $(ROUNDS))

## robust: FedAvg, FedFa, q-FFL and DWFed under label flipping and ALIE (Byzantine fractions 0, 0.1, 0.2), each with
## the weighted mean, a trimmed mean and the geometric median, over SEEDS seeds: honest clients' accuracy with 95%
## intervals and the weight the attackers receive, in $(LOGS)/robust (robust.md, robust.csv, robust.png); ROUNDS and
## JOBS as for compare. Finished runs are kept.
robust: $(STAMP)
	$(PY) -m lightning_fl.experiments.robust --save-dir $(LOGS)/robust --seeds $(SEEDS) \
		$(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(JOBS),--jobs $(JOBS))

## privacy: FedAvg, FedFa and q-FFL in their DP-safe forms at epsilon inf, 8, 2 and 1 (client-level DP, noise calibrated
## over the planned rounds, Poisson sampling) over SEEDS seeds on Fashion-MNIST with 100 Dirichlet(0.3) clients (fetched
## into data/ first, as `make data`): average and worst-20% accuracy with 95% intervals and the realised epsilon, and
## each client's accuracy lost under DP against its size and label rarity, in $(LOGS)/privacy (privacy.md,
## privacy.csv, privacy.png); ROUNDS and JOBS as for compare. Finished runs are kept.
privacy: $(STAMP)
	$(PY) scripts/fetch_data.py fashion-mnist
	$(PY) -m lightning_fl.experiments.privacy --save-dir $(LOGS)/privacy --seeds $(SEEDS) \
		$(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(JOBS),--jobs $(JOBS))

## tempo: Tempo against FedAdp with fixed 4, 6, 8 local epochs (three-layer; rounds and time to target) over SEEDS
## seeds, in $(LOGS)/tempo; ROUNDS, JOBS and TUNE=1 as for compare
tempo: $(STAMP)
	$(PY) -m lightning_fl.apps.compare --save-dir $(LOGS)/tempo$(if $(TUNE_ON),_tuned) --seeds $(SEEDS) \
		$(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(JOBS),--jobs $(JOBS)) $(if $(TUNE_ON),--tune) \
		$(if $(TRIALS),--tune-trials $(TRIALS)) Tempo=configs/tempo_synthetic.yaml FedAdp-E4=configs/fedadp_e4_hierarchy_synthetic.yaml \
		FedAdp-E6=configs/fedadp_e6_hierarchy_synthetic.yaml FedAdp-E8=configs/fedadp_e8_hierarchy_synthetic.yaml

## reproduce: a seed paper's headline experiment (PAPER=fedfa|igfl|dwfed|tempo|pfedme) over SEEDS seeds (default 5
## here, whatever the default of the other targets) at SCALE=small
## (minutes on a laptop CPU) or paper (the paper's setting): the paper's numbers beside ours and a verdict per claim
## in docs/reproduction/$(PAPER).md; runs in $(LOGS)/reproduce/$(PAPER)_$(SCALE) (finished runs are kept); JOBS as for
## compare; at SCALE=small every method is tuned with the same budget on the validation splits first (TRIALS per
## method), TUNE=0 runs every method at its config's values (in $(PAPER)_$(SCALE)_untuned); at SCALE=paper the
## paper's settings run as printed, TUNE=1 tunes (in $(PAPER)_paper_tuned; docs/experiments.md, "Reproducing the papers")
REPRODUCE_TUNED := $(if $(TUNE_OFF),_untuned,$(if $(and $(TUNE_ON),$(filter-out small,$(SCALE))),_tuned))
reproduce: $(STAMP)
	$(PY) -m lightning_fl.reproduce --paper $(PAPER) --seeds $(REPRODUCE_SEEDS) --scale $(SCALE) \
		--save-dir $(LOGS)/reproduce/$(PAPER)_$(SCALE)$(REPRODUCE_TUNED) $(if $(JOBS),--jobs $(JOBS)) \
		$(if $(TUNE_OFF),--no-tune) $(if $(TUNE_ON),--tune) $(if $(TRIALS),--trials $(TRIALS))

## stragglers: FedProx Fig. 1 on Synthetic(1,1): FedAvg dropping FRACTION (default 0.9) stragglers vs FedProx mu=1
## and mu=0 keeping their partial work, over SEEDS seeds (a count, default 3, or a list 0,1,2); mean and spread per
## round as a table and a figure in $(LOGS)/stragglers/FRACTION (finished runs are kept; about 5 minutes)
stragglers: $(STAMP)
	$(PY) -m lightning_fl.apps.stragglers --save-dir $(LOGS)/stragglers/$(FRACTION) --seeds $(SEEDS) \
		--fraction $(FRACTION) $(if $(ROUNDS),--rounds $(ROUNDS)) $(if $(JOBS),--jobs $(JOBS))

## bench: engine benchmark (naive Trainer-per-client, sequential, vectorized, centralized bound), scaling over
## processes (W = 1 vs 2, speed-up, exchange, peak memory per rank) and the robust aggregation rules' time beside
## FedAvg's weighted sum (K = 10, 100; d = 0.1M, 1.6M), Ditto's round time beside FedAvg's, and J1/J2 written as a
## plain LightningModule (vmapped training_step, sequential) beside the fused path, and central DP's round time on J1
## and J2 beside the same jobs without DP, and a million lazy clients beside ten thousand (round time, peak RSS);
## see docs/performance.md
bench: $(STAMP)
	$(PY) -m bench.run
	$(PY) -m bench.scaling
	$(PY) -m bench.robust
	$(PY) -m bench.personal speed
	$(PY) -m bench.user_module
	$(PY) -m bench.dp_overhead
	$(PY) -m bench.million
	$(PY) -m bench.one_loop

## data: fetch the real data sets obtainable without internet (Fashion-MNIST, Shakespeare) into data/
data: $(STAMP)
	$(PY) scripts/fetch_data.py

## memmap-data: write configs/fedavg_synthetic.yaml's federation as memory-mapped arrays into data/memmap/synthetic_1_1,
## the folder configs/datasets/memmap_lazy.yaml reads (once: a written folder is kept; docs/datasets.md)
MEMMAP_DIR := data/memmap/synthetic_1_1
memmap-data: $(MEMMAP_DIR)/federation.json
$(MEMMAP_DIR)/federation.json: | $(STAMP)
	$(PY) -m lightning_fl.datamodules.memmap_files --config configs/fedavg_synthetic.yaml --out $(MEMMAP_DIR)

clean-venv:
	rm -rf $(VENV)
