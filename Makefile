# Stoker: `make demo` runs the server plus a live demo training; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
NODE_MODULES := frontend/node_modules/.package-lock.json

.PHONY: demo serve test build lint format clean

demo: build
	$(BIN)/stoker demo

serve: build
	$(BIN)/stoker serve

test: build
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	cd frontend && npm test
	$(BIN)/pytest -ra

build: $(INSTALLED) $(NODE_MODULES)
	cd frontend && npm run build

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[tensorflow,server,dev]'
	touch $@

$(NODE_MODULES): frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund
	touch $@

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(INSTALLED)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) frontend/node_modules backend/static test-artifacts
