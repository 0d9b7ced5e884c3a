# Two commands for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ORCH   := $(BIN)/orch
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup system-deps images demo test clean

$(ORCH): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

# debootstrap builds the base image on hosts that cannot pull one.
system-deps:
	@command -v debootstrap >/dev/null || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq debootstrap; }

# A venv with orch, Compose v2 linked as the docker CLI plugin, and MNIST cached.
setup: $(ORCH) system-deps
	@$(ORCH) doctor --fix || true

images: setup
	$(SUDO) env "PATH=$$PATH" $(ORCH) build --bootstrap-base

# The container-count comparison on full MNIST, 1 worker vs 3 at the same global batch, collected side
# by side; then the container-count experiment in its --quick form.
demo: images
	@stamp=$$(date +%Y%m%d-%H%M%S); \
	$(ORCH) up --workers 1 --run-id demo-$$stamp-w1 && \
	$(ORCH) up --workers 3 --run-id demo-$$stamp-w3 && \
	$(ORCH) collect demo-$$stamp-w1 demo-$$stamp-w3 && \
	$(ORCH) experiment run experiments/container-count.yaml --quick

test: setup
	$(BIN)/pytest

clean:
	rm -rf $(VENV) *.egg-info
