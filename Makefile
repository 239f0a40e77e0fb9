# Two entry points for a fresh machine that has only Python (and make):
#   make demo   set up .venv if needed, start the console on the simulated cloud
#   make test   set up .venv if needed, lint and run the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint format clean image

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
