# ureplicator-py — every command a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: help install venv lock lock-upgrade jars helm promtool browser image image-test test test-parallel test-serial unit integration lint demo stack-up stack-down \
	sanitize clean bench bench-throughput bench-eos bench-controller-scale bench-verifier bench-latency bench-ack-latency bench-stalls drill soak

help:
	@echo "make install      venv (.venv from requirements.lock, editable, dev + verifier extras) + pinned JVM jars (.cache/jvm)"
	@echo "make lock         re-resolve requirements.lock after a change to setup.cfg (uv, pins kept where they fit)"
	@echo "make lock-upgrade every pin to the newest allowed release, then the checks that guard it (review git diff requirements.lock)"
	@echo "make test         unit + integration tests against a real local ZooKeeper/Kafka stack (+ helm, promtool), on TEST_WORKERS=2 xdist workers"
	@echo "make test-serial  the same tests in one pytest process (make test: one stack, TEST_WORKERS=2 xdist workers, then the disruptive tests alone)"
	@echo "make demo         end-to-end demo: mirror 100,000 records and compare per partition"
	@echo "make lint         ruff + import-linter (the layers)"
	@echo "make sanitize     worker/_native.c built with AddressSanitizer + UBSan, and the native-loop tests run on it"
	@echo "make helm         pinned helm (.cache/bin/helm, built with Go) for the chart tests"
	@echo "make browser      Debian's chromium + chromium-driver for the status-page browser test (apt-get as root)"
	@echo "make promtool     pinned promtool (.cache/bin/promtool, built with Go) for the chart's alerting rules"
	@echo "make image        the controller/worker and verifier images, built with buildah (no daemon)"
	@echo "make image-test   run the images against a local stack: mirror 10,000 records, then verify"
	@echo "make stack-up / stack-down   a local stack for manual work (.cache/stack/stack.json)"
	@echo "make bench        every benchmark (BENCH_ARGS=--quick for smoke runs); results in docs/benchmarks.md"
	@echo "make drill        failure drill under load, ending with the verifier's verdict"
	@echo "make bench-eos    exactly-once throughput: ours (at-least-once, exactly-once) vs MirrorMaker 2 exactly-once"
	@echo "make soak         random faults for MINUTES=30 under load (SEED=n replays), then compare + verify"
	@echo "                  (BENCH_ARGS=--exactly-once: the pipeline in exactly-once mode, read read_committed)"

# What `make demo` needs: Python and Java/Maven, no Go (helm and promtool are for `make test`).
install: venv jars

# The tested set: every Python package pinned with hashes in requirements.lock, for Python 3.10, 3.11
# and 3.12 in one file (devtools/pylock.py, made by uv); setup.cfg keeps only the compatible ranges.
# Installed with --require-hashes, the
# build tools included (--no-build-isolation), then the package itself without resolving anything.
PYVERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
LOCK := requirements.lock
LOCK_PYTHONS := 3.10 3.11 3.12

# Reinstall only when the package metadata, the lock or the C loop changed; say what was reused.
# editable_mode=compat puts the checkout on sys.path, so the console script also finds devtools/
# (which the wheel leaves out), and builds worker/_native.c in place (optional: without a C
# compiler the worker runs its Python loop; `ureplicator worker` logs which one, and its gauge
# ureplicator_worker_native_loop says so).
venv:
	@set -e; case " $(LOCK_PYTHONS) " in *" $(PYVERSION) "*) ;; *) echo "venv: no tested set for Python" \
	  "'$(PYVERSION)': $(LOCK) is resolved for $(LOCK_PYTHONS) (e.g. PYTHON=python3.11 make ...)" >&2; exit 1;; esac; \
	sum=$$(cat setup.cfg setup.py pyproject.toml worker/_native.c $(LOCK) | sha256sum | cut -c1-16); \
	if [ -x $(BIN)/python ] && [ "$$(cat $(VENV)/.installed 2>/dev/null)" = "$$sum" ]; then \
	  echo "venv: reused $(VENV) (setup.cfg, setup.py, $(LOCK) and worker/_native.c unchanged)"; \
	else \
	  echo "venv: creating $(VENV) from $(LOCK) (pinned with hashes; pyspark is large: this takes a minute)"; \
	  [ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV); \
	  $(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar off --require-hashes --no-deps -r $(LOCK); \
	  $(BIN)/python -m pip install --disable-pip-version-check -q --progress-bar off --no-deps --no-build-isolation \
	    --config-settings editable_mode=compat -e .; \
	  $(BIN)/python -m pip check --disable-pip-version-check >/dev/null || { $(BIN)/python -m pip check; exit 1; }; \
	  echo "$$sum" > $(VENV)/.installed; \
	  echo "venv: ready ($$($(BIN)/python -c 'import confluent_kafka as c; print("confluent-kafka", c.version()[0] if isinstance(c.version(), tuple) else c.version())'))"; \
	fi

# Re-resolve requirements.lock and lock/ after a change to setup.cfg, keeping every pin that still fits.
lock: venv
	@$(BIN)/python -m devtools.pylock compile

# Every pin to the newest release setup.cfg allows, then the checks that guard it: the venv
# reinstalled from the new lock, the lock against setup.cfg, the C loop's self-test on the new
# confluent-kafka, and the unit tests. Review `git diff requirements.lock lock/` and commit it as its own change.
lock-upgrade: venv
	@$(BIN)/python -m devtools.pylock compile --upgrade
	@$(MAKE) --no-print-directory venv
	@$(BIN)/python -m devtools.pylock check
	@$(BIN)/python -m ureplicator.worker.selftest >/dev/null && echo "lock-upgrade: the C loop's self-test passes" \
	  || { echo "lock-upgrade: the C loop's self-test fails on the new lock:"; $(BIN)/python -m ureplicator.worker.selftest; exit 1; }
	@$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit
	@git diff --stat -- requirements.lock lock/

jars: venv
	@$(BIN)/python -m devtools.jvm fetch

# Pinned helm for the chart tests, built from the Go module proxy into .cache/bin; reused when present.
helm: venv
	@$(BIN)/python -m devtools.helmtool install

# Pinned promtool (Prometheus) for the chart's PrometheusRule and dashboard queries; reused when present.
promtool: venv
	@$(BIN)/python -m devtools.promtool install

# Chromium and its driver from Debian for the status page's browser test; reused when present.
# As root it installs them (apt-get update first when the package lists are empty or stale).
browser:
	@set -e; if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "browser: reused $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "browser: apt-get install chromium chromium-driver"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }; \
	else \
	  echo "browser: chromium and chromium-driver are missing; install them (Debian: apt-get install -y chromium chromium-driver)" >&2; \
	  exit 1; \
	fi

# Images: buildah and debootstrap (`apt-get install -y buildah debootstrap`). The base is
# python:3.11-slim-bookworm when a registry answers, else a local one made with debootstrap.
image: venv jars
	nice $(BIN)/python -m devtools.images build

image-test: image
	$(BIN)/python -m devtools.images test

unit: venv helm promtool
	$(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

integration: venv jars browser
	$(BIN)/python -m pytest tests/integration -q $(PYTEST_ARGS)

# What CI runs (docs/development.md): one stack of its own (3 clusters, SASL_SSL), always stopped
# after; the tests that leave its services alone on TEST_WORKERS pytest-xdist workers (0: one
# process), then the `disruptive` ones one at a time. `make test-serial`: one pytest process on the
# session fixtures' stack, as `make test` was until 2026-11-29.
TEST_WORKERS ?= 2
test: venv jars helm promtool browser
	$(BIN)/python -m devtools.testrun --workers $(TEST_WORKERS) $(PYTEST_ARGS)

test-parallel: test

test-serial: venv jars helm promtool browser
	$(BIN)/python -m pytest tests -q -ra --durations=30 $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m devtools.schemas --check  # the OpenAPI document and report schema match their models

# The C copy loop under AddressSanitizer and UndefinedBehaviorSanitizer: a build of its own in
# build/sanitize (the in-place build stays as it is), preloaded runtimes (python itself is not
# instrumented), leak detection off (CPython's own allocations are not leaks), any finding fatal.
# The native-loop unit tests and the C/Python differential test run on that build; the latter's
# worker processes inherit the environment. UREPLICATOR_TEST_STACK=DIR reuses a running stack.
# Needs an installed venv (`make install`); it never reinstalls it.
SANITIZE_CFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
sanitize:
	@set -e; [ -x $(BIN)/python ] || { echo "sanitize: run make install first"; exit 1; }; rm -rf build/sanitize; \
	CFLAGS="$(SANITIZE_CFLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	  $(BIN)/python setup.py -q build_ext --build-lib build/sanitize --build-temp build/sanitize/tmp; \
	so=$$(ls build/sanitize/ureplicator/worker/_native*.so 2>/dev/null || true); \
	[ -n "$$so" ] || { echo "sanitize: the instrumented build failed (is gcc with libasan installed?)"; exit 1; }; \
	so=$$(realpath $$so); \
	export LD_PRELOAD="$$($${CC:-gcc} -print-file-name=libasan.so) $$($${CC:-gcc} -print-file-name=libubsan.so)"; \
	export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1; \
	export UREPLICATOR_NATIVE_MODULE=$$so; \
	$(BIN)/python -c "from ureplicator.worker import native; m = native.load(); assert m.__file__ == '$$so', m.__file__; \
	  print('sanitize: C loop under ASan/UBSan:', m.__file__)"; \
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_worker_native.py tests/integration/test_native_loop.py \
	  $(PYTEST_ARGS)

demo: install
	$(BIN)/ureplicator demo

stack-up: install
	$(BIN)/ureplicator stack up

stack-down: venv
	$(BIN)/ureplicator stack down

# Benchmarks: not part of `make test`; each is bounded in time and writes bench/results/ and
# its section of docs/benchmarks.md. BENCH_ARGS=--quick gives smoke runs.
BENCH_ARGS ?=

bench: bench-throughput bench-eos bench-controller-scale bench-verifier bench-latency bench-stalls drill bench-ack-latency

# Benchmarks share the machine's cores: never run them in parallel (make -j).
.NOTPARALLEL: bench

# Throughput: steady-state window, CPU with/without JIT compiler threads, scaling curve 1/2/4 (`--scale 1`
# skips it); BENCH_ARGS='--worker-repo DIR' measures another checkout's worker. Long (~40 min): runs niced.
bench-throughput: install
	nice $(BIN)/python -m bench.throughput $(BENCH_ARGS)

# Exactly-once: our at-least-once and exactly-once runs against MirrorMaker 2 with
# exactly.once.source.support=enabled, 100 B and 1 KB, one worker / task, in one run.
bench-eos: install
	nice $(BIN)/python -m bench.throughput --exactly-once $(BENCH_ARGS)

bench-controller-scale: venv
	$(BIN)/python -m bench.controller_scale $(BENCH_ARGS)

bench-verifier: install
	$(BIN)/python -m bench.verifier_bench $(if $(findstring --quick,$(BENCH_ARGS)),--records 200000 --rounds 1 --no-write,)

# Latency: ureplicator with default and low-latency settings, and MirrorMaker 2, side by side at the
# same rates; `python -m bench.latency --render FILE` re-renders the section from a results file.
bench-latency: install
	$(BIN)/python -m bench.latency $(BENCH_ARGS)

# The producer clients alone (librdkafka from C, kafka-clients from Java): where the latency benchmark's
# replicator legs differ. Needs cc and javac, so it runs last in `make bench`.
bench-ack-latency: install
	$(BIN)/python -m bench.ack_latency $(BENCH_ARGS)

bench-stalls: install
	$(BIN)/python -m bench.stalls $(BENCH_ARGS)

# Soak: random faults for MINUTES (default 30) under load, then the exact comparison and the
# verifier; the seed is printed, SEED=<n> replays a schedule.
soak: install
	$(BIN)/python -m bench.soak --minutes $(or $(MINUTES),30) $(if $(SEED),--seed $(SEED),) $(BENCH_ARGS)

# Failure drill: kill and restart a worker, the leader, both brokers under load; then verify.
drill: install
	$(BIN)/python -m bench.drill $(BENCH_ARGS)

clean:
	-$(BIN)/ureplicator stack down 2>/dev/null
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .hypothesis *.egg-info
