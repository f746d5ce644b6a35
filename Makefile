# Thin wrapper over CMake. The two commands of the README:
#   make demo   installs what is missing, builds, runs the demo
#   make test   installs what is missing, builds, runs the whole suite (ctest)
# make test SANITIZE=1 builds with ASan + UBSan in build-san/.
# make install PREFIX=/usr/local   builds, then installs the command, libturbospark.so, turbospark.h
#                                  and turbospark.pc under PREFIX

SANITIZE ?= 0
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
ifeq ($(SANITIZE),1)
BUILD ?= build-san
CMAKE_FLAGS += -DTS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
else
BUILD ?= build
endif

.PHONY: all deps build test demo install fuzz format clean

all: build

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE cuda

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	@bash scripts/demo.sh $(BUILD)/turbospark

fuzz: deps
	@bash scripts/fuzz.sh $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-san build-fuzz
