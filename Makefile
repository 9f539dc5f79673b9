# The two commands a newcomer needs: `make run` and `make test`. Everything else builds on them.
BUILD ?= build
JOBS ?= $(shell nproc)
MODEL ?= models/micro-qwen3

.PHONY: deps configure build run test bench fuzz clean

deps:
	@./scripts/install_deps.sh

$(BUILD)/build.ninja:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@echo "Starting the OpenAI-compatible server on $(MODEL) (Ctrl-C stops it; docs/server.md has the flags)."
	./$(BUILD)/tqserve serve --model $(MODEL) $(SERVE_ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1200

bench: build
	./$(BUILD)/bench/bench_cpu_engine

fuzz:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DTQ_FUZZ=ON -DTQ_BENCH=OFF
	cmake --build build-fuzz -j $(JOBS)

clean:
	rm -rf $(BUILD) build-fuzz
