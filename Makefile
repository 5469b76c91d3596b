# specgate: `make demo` runs the main job, `make test` runs the tests.
# Both install what they need into ./.venv by themselves.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BASE_STAMP := $(VENV)/.specgate-base
CPU_STAMP := $(VENV)/.specgate-sglang-cpu
MODEL_DIR ?= models/tiny-llama
DRAFT_DIR ?= models/tiny-llama-eagle3
PYTEST_ARGS ?=

.PHONY: venv cpu-engine models system-deps test test-fast demo loadtest drills bench bench-check bench-gate lint clean

venv: $(BASE_STAMP)
$(BASE_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' torch==2.13.0
	touch $@

# The real SGLang 0.5.23 in CPU mode, with specgate's pure-PyTorch sgl_kernel stand-in.
cpu-engine: $(CPU_STAMP)
$(CPU_STAMP): $(BASE_STAMP) serving/cpu/install.sh serving/cpu/requirements.txt
	bash serving/cpu/install.sh $(VENV)
	touch $@

# The tiny target model and its EAGLE-3 drafter, built locally and deterministically
# (both steps return at once when their manifest matches).
models: cpu-engine
	$(BIN)/python -m serving.tinymodel --out $(MODEL_DIR)
	$(BIN)/python -m drafters.eagle3.train --target $(MODEL_DIR) --out $(DRAFT_DIR)

# Servers the tests start themselves (redis-server) and the deploy toolchain (Helm SDK, kubectl).
system-deps: venv
	bash scripts/ensure-redis.sh
	bash deploy/install-helm.sh $(VENV)

test: models system-deps
	SPECGATE_REQUIRE_SGLANG=1 $(BIN)/python -m pytest -q -rs -p no:cacheprovider $(PYTEST_ARGS)

# The fast slice (README "Tests"): tests/unit and tests/contract (the fake side), without the
# tests marked `slow` (model training, day simulations, plots, long randomised sweeps). No
# SGLang, no redis-server, no subprocess router; under 3 minutes on a 2-core machine.
FAST_PATHS ?= tests/unit tests/contract
test-fast: venv
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider -m "not sglang and not slow" $(FAST_PATHS) $(PYTEST_ARGS)

demo: models
	$(BIN)/specgate demo --config examples/demo.yaml --report demo-report.json

# The operating-point table of the demo stack (spec/plain/router, 2 buckets x 3 concurrencies),
# report + calibration patch in runs/loadtest-local/; bounded to 10 minutes (docs/loadtests.md).
loadtest: models
	$(BIN)/specgate loadtest-local --config examples/demo.yaml --out runs/loadtest-local

# Reliability drills: engine kill/freeze, Redis blackhole, non-atomic config rewrite, router
# roll, discovery churn, disconnect storm, Sentinel failover, Cluster reshard, under load (docs/reliability.md); a few minutes,
# DRILLS_ARGS=--quick for a short run. Exits 1 on a fabricated completion, a lease or an
# orphaned generation left.
DRILLS_ARGS ?=
drills: venv
	bash scripts/ensure-redis.sh
	$(BIN)/python benchmarks/drills.py --out runs/drills.json $(DRILLS_ARGS)

# Router cost per request (docs/performance.md): direct, the bare stack, specgate at BENCH_BASE
# (default: the merge base with origin/main, else main), specgate now and SGLang's Rust router,
# interleaved, 3 rounds; req/s and CPU per request, non-stream and stream, c=1/16/64. Needs the
# 2 cores to itself for meaningful figures; about 10 minutes. runs/bench-router.json.
BENCH_ARGS ?=
BENCH_BASE ?=
bench: venv
	$(BIN)/python benchmarks/router_overhead.py --out runs/bench-router.json \
		$(if $(BENCH_BASE),--base $(BENCH_BASE)) $(BENCH_ARGS)

# The release gate: exits 1 when specgate's CPU per request is more than 10% above
# BENCH_BASE's in a cell at c=16 (non-stream and stream; median of 3 paired rounds).
bench-check: venv
	$(BIN)/python benchmarks/router_overhead.py --targets base,specgate --concurrency 16 --runs 3 \
		--duration 5 --no-ttfb --check 0.10 --out runs/bench-check.json \
		$(if $(BENCH_BASE),--base $(BENCH_BASE)) $(BENCH_ARGS)

bench-gate: bench-check

# ruff; the import layers and the no-cycle rule (pyproject's [tool.importlinter], written
# down in docs/architecture.md "Layers"); mypy --strict on router/.
lint: venv
	$(BIN)/ruff check router serving drafters loadtests benchmarks scripts tests
	$(BIN)/lint-imports
	$(BIN)/mypy --strict router

clean:
	rm -rf $(VENV) models build *.egg-info
