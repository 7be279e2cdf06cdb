# Every target creates the virtual environment with the pinned packages on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= configs/fedavg_synthetic.yaml

.PHONY: train test tensorboard bench clean-venv

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

train: $(STAMP)
	$(PY) -m lightning_fl fit --config $(CONFIG)

test: $(STAMP)
	$(PY) -m pytest -q

tensorboard: $(STAMP)
	$(VENV)/bin/tensorboard --logdir lightning_logs

clean-venv:
	rm -rf $(VENV)
