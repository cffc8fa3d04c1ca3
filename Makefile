# Stoker: `make demo` runs the server plus a live demo training; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What the demo runs (the agent, the server, TensorFlow), then the test tools on top of it.
INSTALLED := $(VENV)/.installed
DEV_INSTALLED := $(VENV)/.installed-dev
# What building the UI needs (npm's "dependencies"), then its test tools ("devDependencies").
NODE_MODULES := frontend/node_modules/.package-lock.json
NODE_DEV := frontend/node_modules/.installed-dev
# The test tiers (tests/README.md; the run takes their modules ui, fit, server, unit, longest
# first: RUN_ORDER in tests/conftest.py). The fit tests marked tf_matrix also run on the oldest
# TensorFlow supported (tf.keras = Keras 2, in its own venv) and with tf_keras
# (TF_USE_LEGACY_KERAS=1) on the newest.
TEST_TIERS := tests/unit tests/server tests/fit tests/ui
TF_OLDEST := 2.15.1
# pytest-xdist: two workers, this machine's and CI's two cores. A full run keeps them 65-85 %
# busy (user+sys 22-31 core-minutes a run): three workers gained 0-15 % (875-1,065 s against
# 1,032-1,103 s) and broke three tests' premise of a core to spare in one run of three.
# Each test module runs whole on one worker, so that its module-scoped servers and fits start
# once. PYTEST_PARALLEL= runs them in one process.
PYTEST_PARALLEL ?= -n 2 --dist loadscope
TF_OLDEST_VENV := $(VENV)/tf2.15
# The agent on Keras 3's JAX backend, in a venv without TensorFlow.
JAX_VENV := $(VENV)/jax

.PHONY: demo serve deps test test-venvs test-tf-matrix test-tf-keras test-tf-oldest test-jax build lint format clean api-types settings-doc corpus

demo: build
	$(BIN)/stoker demo

serve: build
	$(BIN)/stoker serve

# What `make test` installs before it starts: the main venv with the test tools, and the UI's
# node_modules with its test tools (.ci/run installs them while the Debian packages install).
deps: $(DEV_INSTALLED) $(NODE_DEV)

# The test tools first, so that the UI's build finds node_modules complete and up to date.
test: deps build
	# The TF 2.15 and JAX venvs (under a minute with uv, about 5 with pip) install in the
	# background while the checks and the main tiers run; the steps that need them wait.
	$(MAKE) --no-print-directory test-venvs > $(VENV)/test-venvs.log 2>&1 & echo $$! > $(VENV)/test-venvs.pid
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	cd frontend && npm test
	# Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python writes no
	# bytecode: compiled once here, the hundreds of processes the tests start read it instead
	# of compiling the project's modules each time (about 1 s of CPU a process importing agent
	# and server).
	$(BIN)/python -m compileall -q trainer_agent backend tests bench
	$(BIN)/pytest -ra --durations=30 $(PYTEST_PARALLEL) $(TEST_TIERS)
	while kill -0 $$(cat $(VENV)/test-venvs.pid) 2>/dev/null; do sleep 5; done; \
	cat $(VENV)/test-venvs.log
	# The three passes on other Keras versions and backends, two at a time and one process
	# each (two test processes on the two cores, as in the tiers): TF 2.15's beside tf_keras's
	# then JAX's, ~160 s against ~125 s (in turn, on two workers each: ~185 s).
	$(MAKE) --no-print-directory -k test-tf-keras test-jax PYTEST_PARALLEL= \
		> $(VENV)/test-passes.log 2>&1 & passes=$$!; \
	$(MAKE) --no-print-directory test-tf-oldest PYTEST_PARALLEL=; oldest=$$?; \
	wait $$passes; others=$$?; cat $(VENV)/test-passes.log; \
	[ $$oldest = 0 ] && [ $$others = 0 ]

test-venvs: $(TF_OLDEST_VENV)/.installed $(JAX_VENV)/.installed

test-tf-matrix: test-tf-keras test-tf-oldest

test-tf-keras: $(DEV_INSTALLED)
	# tf_keras on the newest TF: test_pipeline_rewrites is tf.data alone (no Keras), which the
	# tiers ran on this TF already.
	TF_USE_LEGACY_KERAS=1 $(BIN)/pytest -ra $(PYTEST_PARALLEL) -m tf_matrix tests/fit \
		--ignore=tests/fit/test_pipeline_rewrites.py

test-tf-oldest: $(DEV_INSTALLED) $(TF_OLDEST_VENV)/.installed
	# TF 2.15's own tf.keras, with the two-worker MultiWorkerMirroredStrategy fits (tf_oldest:
	# one run for the whole job). Their straggler test stays on the newest TF: on 2.15 the
	# job's collective step outlasts the delay that test derives from a worker's own step, so
	# no worker starves.
	$(TF_OLDEST_VENV)/bin/pytest -ra $(PYTEST_PARALLEL) -m "tf_matrix or tf_oldest" tests/fit

# The tests start `stoker serve` with the venv's Python, so it has the server extra too.
$(TF_OLDEST_VENV)/.installed: pyproject.toml | $(INSTALLED)
	$(PYTHON) -m venv $(TF_OLDEST_VENV)
	$(INSTALL) $(TF_OLDEST_VENV) \
		'tensorflow==$(TF_OLDEST)' -e '.[server]' 'pytest>=8' 'pytest-timeout>=2.3' 'pytest-xdist>=3.6'
	touch $@

test-jax: $(JAX_VENV)/.installed
	KERAS_BACKEND=jax $(JAX_VENV)/bin/pytest -ra tests/keras_jax

# No TensorFlow here: the agent must work without it (750 MB).
$(JAX_VENV)/.installed: pyproject.toml | $(INSTALLED)
	$(PYTHON) -m venv $(JAX_VENV)
	$(INSTALL) $(JAX_VENV) \
		-e '.[server]' 'jax[cpu]' 'keras==3.15.1' 'pytest>=8' 'pytest-timeout>=2.3'
	touch $@

build: $(INSTALLED) $(NODE_MODULES)
	cd frontend && npm run build

# `$(INSTALL) VENV ARGS...` installs into VENV with uv (from the main venv): the same
# versions pip resolves, in a fraction of its time (the main venv with the dev tools: 18 s
# against pip's 61 s, on this project's 2-core machine). Where uv fails (no uv, an index only
# pip is configured for), pip does it. uv compiles the bytecode as pip does: where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines), Python would otherwise
# compile TensorFlow's modules at every import (9-10 s of CPU a process instead of 3-4).
# The UI is built by `make build`, not by the install (STOKER_SKIP_UI_BUILD). setuptools says
# of every editable install of packages from two folders (`.` and `backend/`) that "folders in
# your working directory with the same name as your package ... may take precedence": true of
# any editable install, and no news to whoever runs `make demo` in the clone.
INSTALL := install() { venv=$$1; shift; export STOKER_SKIP_UI_BUILD=1 \
	PYTHONWARNINGS='ignore:Editable installation'; \
	$(BIN)/uv pip install --quiet --compile-bytecode --python "$$venv/bin/python" "$$@" \
	|| "$$venv/bin/pip" install --quiet "$$@"; }; install
$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv || echo "uv did not install: pip installs instead"
	$(INSTALL) $(VENV) -e '.[tensorflow,server]'
	touch $@

$(DEV_INSTALLED): $(INSTALLED)
	$(INSTALL) $(VENV) -e '.[tensorflow,server,dev]'
	touch $@

$(NODE_MODULES): frontend/package-lock.json
	cd frontend && npm ci --omit=dev --no-audit --no-fund
	touch $@

$(NODE_DEV): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund
	touch $(NODE_MODULES) $@

lint: $(DEV_INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: $(DEV_INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) frontend/node_modules backend/stoker_server/static test-artifacts

# The server's OpenAPI schema into frontend/openapi.json, and the UI's API types from it.
api-types: $(INSTALLED) $(NODE_DEV)
	$(BIN)/python -c "import json, sys, tempfile, pathlib; from stoker_server.service.app import create_app; from stoker_server.core.settings import Settings; json.dump(create_app(Settings(data_dir=pathlib.Path(tempfile.mkdtemp()))).openapi(), sys.stdout, indent=2); print()" > frontend/openapi.json
	cd frontend && npm run gen:api

# docs/settings.md from the settings models of both sides (a unit test fails while they differ).
settings-doc: $(INSTALLED)
	$(BIN)/python -m stoker_server.core.settings_reference docs/settings.md

# Public training scripts run plain and under `stoker run` (tests/corpus/README.md). They are
# never committed: place them first with CORPUS_ARGS="--from-git OWNER/NAME=GIT_DIR ...".
corpus: $(INSTALLED)
	$(BIN)/python -m bench.corpus --table bench/results/corpus.md $(CORPUS_ARGS)
