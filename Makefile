# specgate: `make demo` runs the main job, `make test` runs the tests.
# Both install what they need into ./.venv by themselves.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
BASE_STAMP := $(VENV)/.specgate-base
CPU_STAMP := $(VENV)/.specgate-sglang-cpu
MODEL_DIR ?= models/tiny-llama

.PHONY: venv cpu-engine models test test-fast demo lint clean

venv: $(BASE_STAMP)
$(BASE_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' torch==2.13.0
	touch $@

cpu-engine: $(CPU_STAMP)
$(CPU_STAMP): $(BASE_STAMP) serving/cpu/install.sh serving/cpu/requirements.txt
	bash serving/cpu/install.sh $(VENV)
	touch $@

models: cpu-engine
	$(BIN)/python -m serving.tinymodel --out $(MODEL_DIR)

test: models
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not sglang and not slow"

demo: models
	$(BIN)/specgate demo --config examples/demo.yaml --report demo-report.json

lint: venv
	$(BIN)/ruff check router serving drafters loadtests tests

clean:
	rm -rf $(VENV) models build *.egg-info
