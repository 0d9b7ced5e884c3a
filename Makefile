# Two commands for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ORCH   := $(BIN)/orch
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Test processes: the live tests share the engine two at a time, or run alone where they need it whole.
TEST_PROCESSES ?= 2

.PHONY: setup system-deps test-deps images lock demo figures docs bench test test-fast clean

# The venv with orch and its tracking extra: all `make demo` needs.
$(ORCH): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[mlflow]'
	@touch $@

# The test and docs tool chains on top (pytest, mypy, mkdocs, ...), for the targets that use them.
TOOLS := $(VENV)/.tools
$(TOOLS): $(ORCH) pyproject.toml
	$(BIN)/pip install -q -e '.[test,docs,mlflow]'
	@touch $@

# debootstrap builds the base image on hosts that cannot pull one, checking the archive's signatures
# with Debian's keyring (gpgv reads it).
KEYRING := /usr/share/keyrings/debian-archive-keyring.gpg
system-deps:
	@{ command -v debootstrap || [ -x /usr/sbin/debootstrap ]; } >/dev/null && [ -f $(KEYRING) ] \
	  && command -v gpgv >/dev/null || { $(SUDO) apt-get update -qq \
	  && $(SUDO) apt-get install -y -qq debootstrap debian-archive-keyring gpgv; }

# A venv with orch, Compose v2 linked as the docker CLI plugin, and MNIST cached.
setup: $(ORCH) system-deps
	@$(ORCH) doctor --fix || true

# As the invoking user: orch runs only debootstrap (and the tar and removal of its tree) through sudo.
images: setup
	$(ORCH) build --bootstrap-base

# Regenerate the image recipes' requirements.lock (every wheel's version and sha256) after editing their
# requirements*.txt, or to take new releases of the dependencies; review the diff and commit it.
lock: $(ORCH)
	$(BIN)/python -m orchestrator.images.lock

# The container-count comparison on full MNIST, 1 worker vs 3 at the same global batch, collected side
# by side: with TensorFlow's MultiWorkerMirroredStrategy, then with MPI over shared memory; then the
# container-count experiment in its --quick form.
# Every run is tracked in MLflow's embedded store (results/mlflow/) and as TensorBoard event files.
demo: images
	@$(ORCH) doctor --fix >/dev/null || { $(ORCH) doctor; exit 2; }
	@stamp=$$(date +%Y%m%d-%H%M%S); export ORCH_TRACK=mlflow,tensorboard; \
	$(ORCH) up --workers 1 --run-id demo-$$stamp-w1 && \
	$(ORCH) up --workers 3 --run-id demo-$$stamp-w3 && \
	$(ORCH) collect demo-$$stamp-w1 demo-$$stamp-w3 && \
	$(ORCH) up --framework mpi --workers 1 --run-id demo-$$stamp-mpi-w1 && \
	$(ORCH) up --framework mpi --workers 3 --run-id demo-$$stamp-mpi-w3 && \
	$(ORCH) collect demo-$$stamp-mpi-w1 demo-$$stamp-mpi-w3 && \
	$(ORCH) experiment run experiments/container-count.yaml --quick && \
	echo "Interactive reports (open in a browser): results/compare-demo-$$stamp-w1-demo-$$stamp-w3.html," \
	     "results/compare-demo-$$stamp-mpi-w1-demo-$$stamp-mpi-w3.html, results/container-count-quick/report.html" && \
	echo "MLflow:      pip install mlflow && mlflow ui --backend-store-uri sqlite:///$$PWD/results/mlflow/mlflow.db" && \
	echo "TensorBoard: pip install tensorboard && tensorboard --logdir results/"

# Every figure of README.md and docs/ from the committed result files (tools/figures/, through cog blocks in
# the pages), and the plots the pages show. Run it after `make bench` or after changing a figure's code.
figures: $(TOOLS)
	$(BIN)/python tools/docs_check.py --write

# The manual: first every generated figure is checked against its data (one line per figure that is not what its
# result file gives, naming the page), then the site is built strictly (a broken link, anchor or page fails it).
# Output: site/.
docs: $(TOOLS)
	$(BIN)/python tools/docs_check.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The benchmark suite (benchmarks/suite.py, indexed in benchmarks/README.md): every benchmark the docs draw a figure
# from, rewriting its result files. Hours on 2 cores; `python benchmarks/suite.py NAME...` runs some. Then
# `make figures`.
bench: $(TOOLS) images
	$(BIN)/python benchmarks/suite.py

# Debian's headless Chromium, which the tests use to open the interactive HTML reports, a Slurm cluster's
# parts (munge, slurmctld, slurmd, the clients and Charliecloud), which the Slurm tests start on this machine
# from a folder of their own (benchmarks/slurm_cluster.py), and Podman with its network stack, whose API service
# the Podman tests start and stop (`orch doctor --engine podman --fix`): installing them starts no daemon.
TEST_PACKAGES := chromium slurm-wlm munge charliecloud podman catatonit netavark aardvark-dns uidmap
test-deps:
	@command -v chromium >/dev/null && command -v slurmctld >/dev/null && command -v ch-run >/dev/null \
	  && command -v podman >/dev/null && [ -x /usr/lib/podman/netavark ] \
	  || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(TEST_PACKAGES); }

# The fast tier, before each commit: every test that needs no engine, no image and no network (marked neither
# `docker` nor `network`) (the spec, the plan,
# rendering, the rendezvous, the analysis, the CLI's refusals, the docs' figures, mypy --strict), with DOCKER_HOST
# pointing nowhere. docs/contributing.md has the tiers.
test-fast: $(TOOLS)
	DOCKER_HOST=unix:///nonexistent $(BIN)/pytest -m "not docker and not network" -n $(TEST_PROCESSES)

# Every tier: the images build in the background while the fast tier and the manual's strict build run, then the
# live tier (tests marked `docker`) runs on them (tools/test.sh).
test: $(TOOLS) setup test-deps
	BIN=$(BIN) TEST_PROCESSES=$(TEST_PROCESSES) bash tools/test.sh

clean:
	rm -rf $(VENV) *.egg-info site
