# Two entry points that need no set-up: `make demo` and `make test`.
# Both create .venv on first use and install schedkit (editable) with its plugins into it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PLUGINS := $(wildcard plugins/*/pyproject.toml)

$(STAMP): pyproject.toml $(PLUGINS)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]' $(foreach p,$(PLUGINS),-e $(dir $(p)))
	touch $(STAMP)

.PHONY: demo test lint
demo: $(STAMP)
	$(BIN)/schedkit bench --workload azure-conv --policy fcfs --policy shortest-prompt \
		--rate-scale 4 --slo-ttft-ms 2000 --slo-tpot-ms 100 --out out/demo --overwrite

lint: $(STAMP)
	$(BIN)/ruff check schedkit plugins tests benchmarks deploy
	$(BIN)/ruff format --check schedkit plugins tests
	$(BIN)/mypy --strict schedkit $(filter-out %.egg-info,$(wildcard plugins/*/schedkit_*))
	$(BIN)/mypy --strict tests $(wildcard plugins/*/tests) $(filter-out %.egg-info,$(wildcard plugins/*/schedkit_*))  # the plugins' tests find their packages by path
	$(BIN)/lint-imports  # the layers and no import cycles: [tool.importlinter] in pyproject.toml
	$(BIN)/pytest -q -p no:cacheprovider tests/test_function_length.py  # no function over 60 lines
	$(BIN)/ruff check adapters/tensorrt-llm
	$(BIN)/ruff format --check adapters/tensorrt-llm
	$(BIN)/mypy --strict --config-file adapters/tensorrt-llm/pyproject.toml adapters/tensorrt-llm/schedkit_trtllm

test: lint lint-vllm lint-sglang lint-lmdeploy lint-ray browser promtool
	$(BIN)/pytest -q tests $(foreach p,$(PLUGINS),$(dir $(p))tests)
	$(BIN)/pytest -q adapters/tensorrt-llm/tests  # the skeleton, with stand-ins: no tensorrt_llm
	$(MAKE) test-vllm
	$(MAKE) test-vllm034
	$(MAKE) test-vllm-upstream
	$(MAKE) test-sglang
	$(MAKE) test-lmdeploy
	$(MAKE) test-ray

# The report's browser test (tests/bench/test_report_browser.py) opens report.html in
# headless Chromium: Debian's package, installed when missing (~15 s, once; needs root).
# `make report-screenshot` redraws docs/report.png from `make demo`.
.PHONY: browser report-screenshot
browser:
	benchmarks/report/install-chromium.sh

# The Prometheus rules' unit tests (tests/test_observability.py) run Debian's promtool.
.PHONY: promtool
promtool:
	deploy/prometheus/install-promtool.sh

report-screenshot: $(STAMP) browser
	$(BIN)/python benchmarks/report/screenshot.py --demo docs/report.png

# The vLLM adapter's suites run against the real vLLM CPU build in their own environment
# (.venv-vllm, created on first use by adapters/vllm/scripts/make-venv.sh, ~2 min).
VLLM_VENV := .venv-vllm
.PHONY: test-vllm lint-vllm
lint-vllm:
	adapters/vllm/scripts/make-venv.sh
	$(VLLM_VENV)/bin/ruff check adapters/vllm
	$(VLLM_VENV)/bin/ruff format --check adapters/vllm
	$(VLLM_VENV)/bin/mypy --strict --config-file adapters/vllm/pyproject.toml adapters/vllm/schedkit_vllm

test-vllm: browser promtool  # test_dashboard.py draws the dashboard from a real Prometheus
	adapters/vllm/scripts/make-venv.sh
	HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/pytest -q adapters/vllm/tests
	# every shipped policy's contract test, here on the simulator and vLLM's schedulers
	HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/pytest -q $(foreach p,$(PLUGINS),$(dir $(p))tests) -k contract

# The same adapter against the official vLLM 0.33.0 wheel (CUDA build), what GPU users run,
# in .venv-vllm033 (~3 min, ~9.5 GB, once). Not in `make test`: the supported range's ends,
# 0.32 and 0.34, are; a third CUDA venv would not fit a fresh CI machine's disk. Only the model-less suites, selected by name in
# adapters/vllm/scripts/test-modelless.sh (which prints the selection and why the
# real-model suites cannot run on this wheel without a GPU); no VLLM_TARGET_DEVICE needed.
VLLM033_VENV := .venv-vllm033
.PHONY: test-vllm033
test-vllm033:
	VLLM_DIST=vllm==0.33.0 VLLM_VENV=$(VLLM033_VENV) adapters/vllm/scripts/make-venv.sh
	VLLM_VENV=$(VLLM033_VENV) adapters/vllm/scripts/test-modelless.sh

# The same model-less suites against the official vLLM 0.34.0 wheel, the current release,
# in .venv-vllm034 (~4 min, ~9.8 GB, once). Its x86_64 wheel pins flashinfer-python==0.7.3,
# which the package index lacks (plain `pip install vllm==0.34.0` fails): make-venv.sh
# installs it with flashinfer-python==0.7.4 in its place (VLLM_OVERRIDE; model-less code
# never loads flashinfer).
VLLM034_VENV := .venv-vllm034
.PHONY: test-vllm034
test-vllm034:
	VLLM_DIST=vllm==0.34.0 VLLM_OVERRIDE=flashinfer-python==0.7.4 VLLM_VENV=$(VLLM034_VENV) \
		adapters/vllm/scripts/make-venv.sh
	VLLM_VENV=$(VLLM034_VENV) adapters/vllm/scripts/test-modelless.sh

# vLLM's own tests/v1/core with schedkit's scheduler classes swapped in: stock, then none,
# fcfs, priority and priority-on-fcfs; fails if a mode passes a different set of tests than
# stock (adapters/vllm/scripts/test-upstream.sh). The tests come from each installed vLLM's
# sdist on the package index (once per version, into .cache/vllm-upstream); ~4 min per venv.
# `make test` runs it on the CPU build (0.32) and the current release (0.34);
# test-vllm-upstream-033 adds 0.33.
.PHONY: test-vllm-upstream test-vllm-upstream-033
test-vllm-upstream:
	adapters/vllm/scripts/make-venv.sh
	adapters/vllm/scripts/test-upstream.sh
	VLLM_DIST=vllm==0.34.0 VLLM_OVERRIDE=flashinfer-python==0.7.4 VLLM_VENV=$(VLLM034_VENV) \
		adapters/vllm/scripts/make-venv.sh
	VLLM_VENV=$(VLLM034_VENV) adapters/vllm/scripts/test-upstream.sh
test-vllm-upstream-033:
	VLLM_DIST=vllm==0.33.0 VLLM_VENV=$(VLLM033_VENV) adapters/vllm/scripts/make-venv.sh
	VLLM_VENV=$(VLLM033_VENV) adapters/vllm/scripts/test-upstream.sh

# The next vLLM release in one command: the newest vllm on the package index (or VLLM_NEXT=X.Y.Z)
# in .venv-vllm-next, the model-less suites against it, and a summary naming what broke. Not
# part of `make test` (~10 GB the first time); see adapters/vllm/scripts/test-next.sh.
.PHONY: test-vllm-next
test-vllm-next:
	adapters/vllm/scripts/test-next.sh

# The SGLang adapter's suites run against the real SGLang (lean CPU install) in their own
# environment (.venv-sglang, created on first use by adapters/sglang/scripts/make-venv.sh,
# ~2 min).
SGLANG_VENV := .venv-sglang
.PHONY: test-sglang lint-sglang
lint-sglang:
	adapters/sglang/scripts/make-venv.sh
	$(SGLANG_VENV)/bin/ruff check adapters/sglang benchmarks/speed/sglang
	$(SGLANG_VENV)/bin/ruff format --check adapters/sglang benchmarks/speed/sglang
	$(SGLANG_VENV)/bin/mypy --strict --config-file adapters/sglang/pyproject.toml adapters/sglang/schedkit_sglang

test-sglang:
	adapters/sglang/scripts/make-venv.sh
	HF_HUB_OFFLINE=1 $(SGLANG_VENV)/bin/pytest -q adapters/sglang/tests

# The LMDeploy adapter's suites drive LMDeploy's real Scheduler model-less (its engine has
# no CPU backend) in their own environment (.venv-lmdeploy, created on first use by
# adapters/lmdeploy/scripts/make-venv.sh, ~2 min).
LMDEPLOY_VENV := .venv-lmdeploy
.PHONY: test-lmdeploy lint-lmdeploy
lint-lmdeploy:
	adapters/lmdeploy/scripts/make-venv.sh
	$(LMDEPLOY_VENV)/bin/ruff check adapters/lmdeploy benchmarks/speed/lmdeploy
	$(LMDEPLOY_VENV)/bin/ruff format --check adapters/lmdeploy benchmarks/speed/lmdeploy
	$(LMDEPLOY_VENV)/bin/mypy --strict --config-file adapters/lmdeploy/pyproject.toml adapters/lmdeploy/schedkit_lmdeploy

test-lmdeploy:
	adapters/lmdeploy/scripts/make-venv.sh
	$(LMDEPLOY_VENV)/bin/pytest -q adapters/lmdeploy/tests
	# every shipped policy's contract test, here on the simulator and LMDeploy's scheduler
	$(LMDEPLOY_VENV)/bin/pytest -q $(foreach p,$(PLUGINS),$(dir $(p))tests) -k contract

# The Ray Serve adapter's suites run on a real local Ray (one per session) in their own
# environment (.venv-ray, created on first use by adapters/ray/scripts/make-venv.sh,
# ~45 s): schedkit's route_request as Ray Serve's request router, simulated replicas.
RAY_VENV := .venv-ray
.PHONY: test-ray lint-ray
lint-ray:
	adapters/ray/scripts/make-venv.sh
	$(RAY_VENV)/bin/ruff check adapters/ray
	$(RAY_VENV)/bin/ruff format --check adapters/ray
	$(RAY_VENV)/bin/mypy --strict --config-file adapters/ray/pyproject.toml adapters/ray/schedkit_ray

test-ray:
	adapters/ray/scripts/make-venv.sh
	$(RAY_VENV)/bin/pytest -q adapters/ray/tests
