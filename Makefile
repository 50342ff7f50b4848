# The commands behind README.md. `make run` runs the main job on the default
# model; `make test` runs every test (what CI runs).

MODEL ?= models/resnet50.onnx
PRECISION ?= fp32
BATCH ?= 1
CARGO ?= cargo

.PHONY: run test model lint fmt fuzz dump clean-models cuda-tools serve-client perf-analyzer serve-load validate-manifests generated example example-small example-vit

# On a machine with an NVIDIA driver: GPU vs CPU reference, then timings.
# Without one: the CPU reference.
run: cuda-tools $(MODEL)
	$(CARGO) build --release --features cli --bin aotune
	if ls /dev/nvidia0 >/dev/null 2>&1; then \
		./target/release/aotune verify $(MODEL) --batch $(BATCH) --precision $(PRECISION) && \
		./target/release/aotune bench $(MODEL) --batch $(BATCH) --precision $(PRECISION); \
	else \
		./target/release/aotune run $(MODEL) --batch $(BATCH) --precision $(PRECISION); \
	fi

dump: $(MODEL)
	$(CARGO) run --release --features cli --bin aotune -- dump $(MODEL) --batch $(BATCH) --precision $(PRECISION)

model: $(MODEL)

$(MODEL):
	$(CARGO) run --profile ci -p aotune-compiler --bin aotune-zoo -- resnet50 -o $(MODEL)

# Skipped tests (no GPU, no nvcc, no fixtures) are listed at the end;
# AOTUNE_REQUIRE_GPU=1 makes each of them a failure instead.
SKIP_LOG = $(CURDIR)/target/test-skips.tsv
test: cuda-tools serve-client perf-analyzer
	@mkdir -p target && rm -f $(SKIP_LOG)
	AOTUNE_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --workspace --all-features --profile ci
	@if [ -s $(SKIP_LOG) ]; then \
		echo "== $$(wc -l < $(SKIP_LOG)) test(s) skipped (AOTUNE_REQUIRE_GPU=1 makes a skip fail), by reason:"; \
		cut -f2 $(SKIP_LOG) | sort | uniq -c | sort -rn; \
	else echo "== no test skipped"; fi

# nvcc 13.0 without a CUDA install: the pinned PyPI wheels (DESIGN.md), into
# .tools/cuda (ignored by git). No GPU needed; kernels compile to sm_90.
CUDA_WHEELS = $(shell cat model-spec/compiler/cuda-wheels.txt)
cuda-tools: .tools/cuda/nvidia/cu13/bin/nvcc

.tools/cuda/nvidia/cu13/bin/nvcc:
	python3 -m pip install --quiet --disable-pip-version-check --target .tools/cuda $(CUDA_WHEELS)

# The official Triton client (pinned) for tests/serve_triton_client.rs, into
# .tools/serve-client (ignored by git; the test puts it on PYTHONPATH).
SERVE_CLIENT = tritonclient[http,grpc]==2.55.0
serve-client: .tools/serve-client/tritonclient/__init__.py

.tools/serve-client/tritonclient/__init__.py:
	python3 -m pip install --quiet --disable-pip-version-check --target .tools/serve-client '$(SERVE_CLIENT)'

# Triton's perf_analyzer and the two libraries it loads, for
# tests/serve_perf_analyzer.rs, into .tools/perf_analyzer (ignored by git).
# Fetching needs pip and apt-get; where it fails the test skips, visibly.
perf-analyzer:
	@[ -x .tools/perf_analyzer/perf_analyzer ] || DEST=.tools/perf_analyzer bash bench/fetch_perf_analyzer.sh \
		|| echo "== perf_analyzer not fetched: tests/serve_perf_analyzer.rs will skip"

# `aotune serve` under load: SERVE_LOAD_SECONDS at concurrency 64 (loopback,
# CPU reference, a tiny model); prints p50/p99 and RSS growth.
SERVE_LOAD_SECONDS ?= 60
serve-load:
	AOTUNE_SERVE_LOAD_SECONDS=$(SERVE_LOAD_SECONDS) $(CARGO) test --profile ci --features serve --test serve_load -- --nocapture

# The deploy manifests (examples/serving/deploy/) against the Kubernetes schemas
# (kubernetes-validate bundles them) and KServe's CRD schemas (vendored in
# examples/serving/deploy/schemas/, checked with check-jsonschema); then broken
# copies that must fail. The validators are pinned, from PyPI, into
# .tools/manifests (ignored by git). `make lint` runs it.
MANIFEST_TOOLS = kubernetes-validate==1.37.0 check-jsonschema==0.39.0
validate-manifests: .tools/manifests/check_jsonschema/__init__.py
	PYTHONPATH=$(CURDIR)/.tools/manifests python3 examples/serving/deploy/validate_manifests.py

.tools/manifests/check_jsonschema/__init__.py:
	python3 -m pip install --quiet --disable-pip-version-check --target .tools/manifests $(MANIFEST_TOOLS)

# The user story: examples/resnet50-app embeds the model with include_model!.
example: cuda-tools $(MODEL)
	CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) build --profile ci --manifest-path examples/resnet50-app/Cargo.toml

# The same example with ResNet-18 at batch 1 embedded: small enough to carry
# to a GPU machine (bench/prepare_device.sh example).
example-small: cuda-tools models/resnet18.onnx
	CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) build --release --features small --manifest-path examples/resnet50-app/Cargo.toml

# The same user story with a transformer: the tiny ViT fixture, refilled by
# the example's build.rs, at batch 1.
example-vit: cuda-tools
	CARGO_TARGET_DIR=$(CURDIR)/target $(CARGO) build --profile ci --features vit --manifest-path examples/resnet50-app/Cargo.toml

models/resnet18.onnx:
	$(CARGO) run --profile ci -p aotune-compiler --bin aotune-zoo -- resnet18 -o $@

# Rewrites generated/ (the default model's kernels.cu, executor.rs, plan.txt).
generated:
	AOTUNE_BLESS=1 $(CARGO) test --profile ci --test generated

lint: validate-manifests
	$(CARGO) fmt --all --check
	python3 tests/import_cycles.py model-spec/src model-spec/compiler/src src
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings

fmt:
	$(CARGO) fmt --all

# Fuzz the importer (cargo install cargo-fuzz; see fuzz/README.md).
FUZZ_SECONDS ?= 600
fuzz:
	fuzz/seed-corpus.sh
	RUSTC_BOOTSTRAP=1 cargo fuzz run import fuzz/corpus/import -- -max_total_time=$(FUZZ_SECONDS)

clean-models:
	rm -f models/*.onnx
