# Two entry points for a fresh machine that has only Python (and make):
#   make demo   set up .venv if needed, start the console on the simulated cloud
#   make test   set up .venv if needed, lint and run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: typecheck demo test lint format clean image

LOCK := $(VENV)/.setup.lock
FLOCK ?= flock
# Quiet: -qq hides pip's warnings too (a machine's pip config naming index folders that do not
# exist prints one per package); errors still show. PIP_FLAGS=-q to see warnings.
PIP_FLAGS ?= -qq

# `make demo & make test` on a fresh clone both need .venv: set-up runs under an exclusive lock
# ($(FLOCK), from util-linux; without it an atomic mkdir) and re-checks the stamp once it holds
# the lock, so the second make waits for the first and then uses its .venv. The stamp holds the
# checksum of pyproject.toml (dash's `test -nt` sees whole seconds only). A venv left without
# pip by an interrupted set-up is completed, not trusted. PYTHONWARNINGS drops setuptools'
# informational "Editable installation" notice, which pip >= 25 shows for any editable install.
$(STAMP): pyproject.toml
	@set -e; mkdir -p $(VENV); \
	if command -v $(FLOCK) >/dev/null 2>&1; then \
		exec 9>$(LOCK); \
		$(FLOCK) -n 9 || { echo "waiting for another make to finish setting up $(VENV)"; $(FLOCK) 9; }; \
	else \
		until mkdir $(LOCK).d 2>/dev/null; do \
			echo "waiting for another make to finish setting up $(VENV) (none running? rmdir $(LOCK).d)"; \
			sleep 2; \
		done; \
		trap 'rmdir $(LOCK).d' EXIT; trap 'exit 130' INT TERM; \
	fi; \
	if [ -f $(STAMP) ] && [ "$$(cksum < pyproject.toml)" = "$$(cat $(STAMP))" ]; then \
		touch $(STAMP); exit 0; \
	fi; \
	echo "setting up $(VENV) (once)"; \
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(PY) -m venv $(VENV); \
	export PYTHONWARNINGS='ignore:Editable installation'; \
	$(BIN)/python -m pip install $(PIP_FLAGS) --upgrade pip; \
	$(BIN)/python -m pip install $(PIP_FLAGS) -e '.[test]'; \
	cksum < pyproject.toml > $(STAMP)

demo: $(STAMP)
	$(BIN)/vastui --demo

# The stand-ins are Python scripts without a .py suffix: ruff needs them named.
STANDINS := $(addprefix vastsim/standins/,cuzk-daemon cuzk-bench curio nvidia-smi)

lint: $(STAMP)
	$(BIN)/ruff check vastui vastsim tests reliability bench $(STANDINS)
	$(BIN)/ruff format --check vastui vastsim tests reliability bench $(STANDINS)
	$(BIN)/shellcheck worker-image/*.sh worker-image/workerctl
	$(BIN)/hadolint worker-image/Dockerfile

# mypy over vastui/ and vastsim/ (pyproject.toml [tool.mypy]; strict flags on the
# domain, engine, store, vast, config and the simulator)
typecheck: $(STAMP)
	$(BIN)/mypy

# Test files run side by side in PYTEST_WORKERS processes (pytest-xdist; a file stays in one
# process, its fixtures with it). The suite mostly waits, so one more process than cores pays;
# PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= $(shell $(PY) -c 'import os; print(min(8, len(os.sched_getaffinity(0)) + 1))' 2>/dev/null || echo 2)

test: lint typecheck
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

format: $(STAMP)
	$(BIN)/ruff check --fix vastui vastsim tests reliability bench $(STANDINS)
	$(BIN)/ruff format vastui vastsim tests reliability bench $(STANDINS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# The worker image (worker-image/Dockerfile): needs a Docker engine and the network. The C1
# input is required: C1_URL and C1_SHA256 (see worker-image/README.md).
IMAGE ?= ghcr.io/vastui/curio-cuzk-worker
CURIO_COMMIT ?= e0294b0f948132d41e8f42f59fa949495d5fd3af
CUDA_VERSION ?= 13.0.2
CUDA_ARCHS ?= 80 86 89 90 120
IMAGE_TAG ?= $(shell printf %.8s $(CURIO_COMMIT))-cuda$(CUDA_VERSION)

image:
	@test -n "$(C1_URL)" -a -n "$(C1_SHA256)" || { echo "make image: set C1_URL and C1_SHA256 (the benchmark's C1 input; worker-image/README.md)" >&2; exit 2; }
	docker build -f worker-image/Dockerfile \
		--build-arg CURIO_COMMIT=$(CURIO_COMMIT) --build-arg CUDA_VERSION=$(CUDA_VERSION) \
		--build-arg CUDA_ARCHS="$(CUDA_ARCHS)" --build-arg C1_URL=$(C1_URL) \
		--build-arg C1_SHA256=$(C1_SHA256) \
		--build-arg VASTUI_IMAGE_DIGEST=$$(git rev-parse --short HEAD 2>/dev/null || echo unknown) \
		-t $(IMAGE):$(IMAGE_TAG) worker-image
	@echo "built $(IMAGE):$(IMAGE_TAG); docker push it and set [fleet] image = \"$(IMAGE):$(IMAGE_TAG)\""
