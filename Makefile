# Two entry points for a fresh machine that has only Python (and make):
#   make demo   set up .venv if needed, start the console on the simulated cloud
#   make test   set up .venv if needed, lint and run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint format clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/vastui --demo

# The stand-ins are Python scripts without a .py suffix: ruff needs them named.
STANDINS := $(addprefix vastui/sim/standins/,cuzk-daemon cuzk-bench curio nvidia-smi)

lint: $(STAMP)
	$(BIN)/ruff check vastui tests $(STANDINS)
	$(BIN)/ruff format --check vastui tests $(STANDINS)
	$(BIN)/shellcheck worker-image/*.sh worker-image/workerctl
	$(BIN)/hadolint worker-image/Dockerfile

test: lint
	$(BIN)/pytest

format: $(STAMP)
	$(BIN)/ruff check --fix vastui tests $(STANDINS)
	$(BIN)/ruff format vastui tests $(STANDINS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
