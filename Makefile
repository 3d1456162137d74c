# Every target installs what it needs on first use, so a fresh clone needs only Python 3.11
# and the PostgreSQL server binaries (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test check lint typecheck imports proto bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/pgcontroller serve

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check app workers tests bench migrations
	$(BIN)/ruff format --check app workers tests bench migrations

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

check: lint typecheck imports test

# Regenerates the gRPC code from app/api/grpc/proto/controller.proto; a test proves the
# committed files equal what this produces.
proto: $(STAMP)
	$(BIN)/python -m app.api.grpc.codegen

bench: $(STAMP)
	$(BIN)/python bench/reads.py
	$(BIN)/python bench/coldstart.py
	$(BIN)/python -m bench.failover
	$(BIN)/python -m bench.periodic

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
