# Every target installs what it needs on first use, so a fresh clone needs only Python 3.11
# and the PostgreSQL server binaries (see README).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs, each with its stamp: `run` installs only what serving needs (the package), every
# other target the package with its dev extra (test, lint and type tools, the clients the tests
# drive, PySpark). The dev install holds the serving one, so it renews both stamps.
RUN_STAMP := $(VENV)/.run-stamp
STAMP := $(VENV)/.installed-stamp

.PHONY: run test test-tier check lint typecheck imports proto bench clean spark-deps conformance-deps

# $(1): what to install editable, `.` or `.[dev]`.
define install
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '$(1)'
endef

$(RUN_STAMP): pyproject.toml
	$(call install,.)
	@touch $(RUN_STAMP)

$(STAMP): pyproject.toml
	$(call install,.[dev])
	@touch $(STAMP) $(RUN_STAMP)

run: $(RUN_STAMP) spark-deps
	$(BIN)/pgcontroller serve --tier filesystem

# Three workers, each with its own throwaway PostgreSQL, a test file's tests kept on one worker:
# most of the suite waits (subprocesses, timeouts, the real client), so this halves the wall time
# on two cores. The slowest tests are listed at the end, to keep an eye on the 20-minute budget.
test: $(STAMP) spark-deps conformance-deps
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=15

# The whole suite with every store on a filesystem long-term tier of 64 KiB chunks, so tiering
# happens all the time (issue 34: the suite, the Java conformance suite and the Python client suites
# pass unchanged with the tier on): `serve` and `segment-store` read these variables, and so do the
# stores the in-process harnesses compose (app/testing/segment_store.py). About 25 minutes here, so
# not part of `make test`; `make test-tier TIER_TESTS=tests/conformance` runs a part.
TIER_TESTS := tests
test-tier: $(STAMP) spark-deps conformance-deps
	PGCONTROLLER_TIER=filesystem PGCONTROLLER_TIER_DIRECTORY=$$(mktemp -d) \
	PGCONTROLLER_TIER_CHUNK_BYTES=65536 PGCONTROLLER_TIER_FLUSH_INTERVAL_S=0.1 PGCONTROLLER_TIER_FLUSH_AGE_S=2 \
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder $(TIER_TESTS)

lint: $(STAMP)
	$(BIN)/ruff check app workers tests bench migrations spark pgurl
	$(BIN)/ruff format --check app workers tests bench migrations spark pgurl

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

check: lint typecheck imports test

# Java 17 (Spark's runtime) and the PostgreSQL JDBC driver the reporting pipeline (spark/)
# reads through, from Debian's packages; silent and instant when both are present.
JDBC_JAR ?= /usr/share/java/postgresql.jar
spark-deps:
	@if ! command -v java >/dev/null 2>&1 || ! test -f $(JDBC_JAR); then \
		echo "installing Java 17 and/or the PostgreSQL JDBC driver (apt-get)"; \
		apt-get update -qq >/dev/null && \
		{ command -v java >/dev/null 2>&1 || apt-get install -y -qq openjdk-17-jre-headless >/dev/null; } && \
		{ test -f $(JDBC_JAR) || apt-get install -y -qq libpostgresql-jdbc-java >/dev/null; }; \
	fi

# A JDK and Maven for the conformance suite (tests/conformance: Pravega's Java client, Pravega
# standalone as the oracle, Schema Registry), from Debian's packages; Maven fetches the rest into
# ~/.m2 on first use.
conformance-deps:
	@if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then \
		echo "installing a JDK 17 and Maven (apt-get)"; \
		apt-get update -qq >/dev/null && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null; \
	fi

# Regenerates the gRPC code from app/api/grpc/proto/controller.proto; a test proves the
# committed files equal what this produces.
proto: $(STAMP)
	$(BIN)/python -m app.api.grpc.codegen

bench: $(STAMP)
	$(BIN)/python bench/reads.py
	$(BIN)/python bench/coldstart.py
	$(BIN)/python -m bench.failover
	$(BIN)/python -m bench.periodic
	$(BIN)/python bench/dataplane.py
	$(BIN)/python bench/kvt.py
	$(BIN)/python bench/stores.py
	$(BIN)/python bench/autoscale_reaction.py
	$(BIN)/python bench/mark_segments.py
	$(BIN)/python bench/security.py
	$(BIN)/python bench/tokens.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
