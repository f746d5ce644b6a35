# Thin wrapper over CMake. The two commands of the README:
#   make demo   installs the missing runtime packages, builds the command alone, runs the demo
#   make test   installs the missing runtime and test packages, builds everything, runs the whole
#               suite (ctest)
# make test SANITIZE=1 builds with ASan + UBSan in build-san/.
# make install PREFIX=/usr/local   installs the missing runtime packages, builds the command and
#                                  libturbospark.so, then installs them, turbospark.h and
#                                  turbospark.pc under PREFIX

SANITIZE ?= 0
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(SANITIZE),1)
BUILD ?= build-san
CMAKE_FLAGS += -DTS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
else
BUILD ?= build
endif

.PHONY: all deps deps-runtime build test demo install fuzz format clean

all: build

# scripts/install-deps.sh: `runtime` to build and run, `test` adds the test suite's packages
deps:
	@bash scripts/install-deps.sh test

deps-runtime:
	@bash scripts/install-deps.sh runtime

# Without cmocka (a machine with the runtime packages only) CMake configures no tests.
CONFIGURE = cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: deps
	@$(CONFIGURE)
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure --no-tests=error -j $(JOBS) -LE cuda

install: deps-runtime
	@$(CONFIGURE)
	@cmake --build $(BUILD) -j $(JOBS) --target turbospark turbospark_shared
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: deps-runtime
	@$(CONFIGURE)
	@cmake --build $(BUILD) -j $(JOBS) --target turbospark
	@bash scripts/demo.sh $(BUILD)/turbospark

fuzz: deps
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-san build-fuzz
