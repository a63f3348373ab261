# twinserve build. `make` builds build/twinserve; `make test` runs every Check suite and the
# end-to-end tests; `make demo` replays a built-in trace under the four policies.
# Sources are discovered by wildcard so that adding a module file needs no Makefile edit.

CC      ?= cc
BUILD   := build
# libmicrohttpd and jansson: `twinserve serve`'s HTTP server and request bodies.
PKGS    := luajit sqlite3 openblas libmicrohttpd jansson
CHECK_PKG := check

OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -MMD -MP -I. $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# -rdynamic: the LuaJIT FFI views resolve the core's exported accessors through ffi.C.
LDFLAGS += -rdynamic
LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread

SAN ?=
ifneq ($(SAN),)
  CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=$(SAN)
  BUILD   := build-san
endif

# The CUDA backend (engine/cuda/*.cu) is compiled where nvcc is found (on PATH or in
# /usr/local/cuda) together with cuBLAS and cudart; CUDA=0 builds without it. Hopper machine
# code plus compute_90 PTX, which newer GPUs compile at load. The backend is a shared object
# of its own, $(BUILD)/libtwinserve_cuda.so (cudart and cuBLAS linked there, with an rpath),
# that `--backend cuda` opens at run time (engine/backend.c, engine/cuda/cuda_entry.h):
# twinserve itself links no CUDA library and starts without one. Install the object beside
# the binary, or point TWIN_CUDA_LIB at it.
# CUDA_HOME is asked of nvcc itself (its TOP), not derived from nvcc's path: nvcc on PATH
# may be a wrapper script outside the toolkit. The libraries may be in lib64 or in
# targets/<arch>/lib; a toolkit without them builds without CUDA, and says so.
CUDA    ?= auto
# NVCC and CUDA_HOME are found once (:=), not at every expansion of CFLAGS; the environment
# or the command line may set either.
ifeq ($(CUDA),0)
  override NVCC :=
else ifeq ($(origin NVCC),undefined)
  NVCC  := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
endif
ifneq ($(NVCC),)
  ifeq ($(origin CUDA_HOME),undefined)
    CUDA_HOME := $(or $(realpath $(shell $(NVCC) --dryrun -x cu -c /dev/null -o /dev/null 2>&1 \
	| sed -n 's/^#\$$ TOP=//p')),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))))
  endif
  CUDA_LIBDIR := $(patsubst %/libcudart.so,%,$(firstword $(wildcard $(addsuffix libcudart.so,\
	$(dir $(wildcard $(CUDA_HOME)/lib64/libcublas.so $(CUDA_HOME)/targets/*/lib/libcublas.so))))))
  ifeq ($(or $(CUDA_LIBDIR),$(filter 1,$(CUDA))),)
    $(warning nvcc found ($(NVCC)) but not libcublas.so with libcudart.so under \
	$(CUDA_HOME)/lib64 or $(CUDA_HOME)/targets/*/lib: building without the CUDA backend \
	(set CUDA_HOME to the toolkit))
    override NVCC :=
  endif
endif
ifneq ($(NVCC),)
  CUDA_SRC  := $(wildcard engine/cuda/*.cu)
  CFLAGS    += -DTWIN_HAVE_CUDA -I$(CUDA_HOME)/include
  LDLIBS    += -ldl
  CUDA_LDLIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcudart
  CUDA_SO   := $(BUILD)/libtwinserve_cuda.so
  NVCCFLAGS ?= -O3 -lineinfo
  NVCCFLAGS += -std=c++17 -I. -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90 -Xcompiler -Wall,-Wextra,-fPIC -MMD -MP
endif

MODULE_DIRS := policies traces sim analysis engine engine/cpu
LIB_SRC  := $(foreach d,$(MODULE_DIRS),$(wildcard $(d)/*.c))
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
GEN_SRC  := $(BUILD)/gen/schema_sql.c $(BUILD)/gen/prelude_lua.c $(BUILD)/gen/views_sql.c \
            $(BUILD)/gen/costs_builtin.c $(BUILD)/gen/serving_builtin.c \
            $(BUILD)/gen/ops_builtin.c
COST_FILES := $(sort $(wildcard sim/costs/*.cost))
OPS_FILES := $(sort $(wildcard sim/costs/*.ops))
SERVING_FILES := $(sort $(wildcard sim/serving/*.serving))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(GEN_SRC:.c=.o)
# position-independent, for the shared object; a folder of their own, so that objects an
# older Makefile compiled without -fPIC are never linked into it
CUDA_OBJ := $(CUDA_SRC:engine/cuda/%.cu=$(BUILD)/cuda_so/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
LIB      := $(BUILD)/libtwinserve.a
BIN      := $(BUILD)/twinserve

.PHONY: all test check demo demo-run deps data clean bench sanitize valgrind cuda-info
all: $(BIN) $(CUDA_SO)

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

ifneq ($(NVCC),)
$(BUILD)/cuda_so/%.o: engine/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

# The object takes backend.c's bk_* helpers from the executable (-rdynamic). backend.c
# knows this build's object by its absolute path, so binaries under $(BUILD)/tests find it.
$(CUDA_SO): $(CUDA_OBJ)
	$(CXX) -shared -o $@ $^ $(CUDA_LDLIBS)
$(BUILD)/engine/backend.o: CFLAGS += -DTWIN_CUDA_SO_BUILT='"$(abspath $(CUDA_SO))"'
# test_cuda_plan calls the attention planner (host code in cuda_attention.cu) directly; with
# the static cudart it starts where no CUDA library is installed, as every test must
$(BUILD)/tests/test_cuda_plan: $(BUILD)/cuda_so/cuda_attention.o
$(BUILD)/tests/test_cuda_plan: TEST_LINK := $(BUILD)/cuda_so/cuda_attention.o \
	-L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lstdc++
endif

# Text compiled in as C strings: the record schema and the policy prelude stay readable
# files (traces/schema.sql, policies/prelude.lua) and remain the single source.
embed = @mkdir -p $(dir $@); { echo '/* generated from $< by the Makefile: do not edit */'; \
	echo 'const char $(1)[] ='; \
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	echo ';'; } > $@

$(BUILD)/gen/schema_sql.c: traces/schema.sql
	$(call embed,rec_schema_sql)
$(BUILD)/gen/prelude_lua.c: policies/prelude.lua
	$(call embed,lhost_prelude_lua)
$(BUILD)/gen/views_sql.c: analysis/views.sql
	$(call embed,analysis_views_sql)
# Files compiled in as a table of {name, text}: $(1) the table's element type and name
# prefix, $(2) the files, $(3) their extension (stripped from the names).
embed_table = @mkdir -p $(dir $@); { echo '/* generated by the Makefile from its embedded files: do not edit */'; \
	echo 'typedef struct { const char *name, *text; } $(1)_builtin_t;'; i=0; \
	for f in $(2); do echo "static const char $(1)_$$i[] ="; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $$f; echo ';'; i=$$((i+1)); done; \
	echo 'extern const $(1)_builtin_t $(1)_builtins[];'; \
	echo 'const $(1)_builtin_t $(1)_builtins[] = {'; i=0; \
	for f in $(2); do echo "    {\"$$(basename $$f $(3))\", $(1)_$$i},"; i=$$((i+1)); done; \
	echo '    {0, 0}};'; } > $@
# the shipped calibrations (sim/costs/NAME.cost) as cost_builtins[] (sim/cost_file.c), the
# GPUs' operator rates (sim/costs/GPU.ops: ops_builtins[], sim/gpu_ops.c) and the serving
# profiles (sim/serving/NAME.serving: serving_builtins[], sim/serving.c)
$(BUILD)/gen/costs_builtin.c: $(COST_FILES) Makefile
	$(call embed_table,cost,$(COST_FILES),.cost)
$(BUILD)/gen/ops_builtin.c: $(OPS_FILES) Makefile
	$(call embed_table,ops,$(OPS_FILES),.ops)
$(BUILD)/gen/serving_builtin.c: $(SERVING_FILES) Makefile
	$(call embed_table,serving,$(SERVING_FILES),.serving)
$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c tests/testutil.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(shell pkg-config --cflags $(CHECK_PKG)) $(LDFLAGS) -o $@ $< \
	    $(filter %.o,$(TEST_LINK)) $(LIB) $(shell pkg-config --libs $(CHECK_PKG)) $(LDLIBS) \
	    $(filter-out %.o,$(TEST_LINK))

# tests/cuda_emu: the CUDA kernels (engine/cuda/cuda_{attention,ops,gemv,sample}.cu) run on
# the CPU under a host emulator of the execution model, so `check` tests them where no GPU
# is. CUDA builds only (it compiles against the CUDA headers); g++ on copies of the kernel
# files that tests/cuda_emu/gen.py rewrites into C++ (tests/cuda_emu/emu.h says how).
ifneq ($(NVCC),)
EMU_BIN := $(patsubst tests/cuda_emu/test_%.cpp,$(BUILD)/tests/test_cuda_emu_%,\
	$(wildcard tests/cuda_emu/test_*.cpp))
EMU_CXXFLAGS := -std=c++17 -O1 -g -ffp-contract=off -Wall -Wextra -Wno-unknown-pragmas \
	-I. -Itests/cuda_emu -I$(BUILD)/cuda_emu -I$(CUDA_HOME)/include \
	$(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer)
.PRECIOUS: $(BUILD)/cuda_emu/gen_%.inc
$(BUILD)/cuda_emu/gen_%.inc: engine/cuda/cuda_%.cu tests/cuda_emu/gen.py
	@mkdir -p $(dir $@)
	python3 tests/cuda_emu/gen.py $< $@
$(BUILD)/cuda_emu/emu.o: tests/cuda_emu/emu.cpp $(wildcard tests/cuda_emu/*.h)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c -o $@ $<
$(BUILD)/tests/test_cuda_emu_sample: $(BUILD)/engine/sampler.o
$(BUILD)/tests/test_cuda_emu_%: tests/cuda_emu/test_%.cpp $(BUILD)/cuda_emu/gen_%.inc \
		$(BUILD)/cuda_emu/emu.o $(wildcard tests/cuda_emu/*.h) $(wildcard engine/cuda/*.cuh) \
		engine/cuda/cuda_kernels.h
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(shell pkg-config --cflags $(CHECK_PKG)) -o $@ $< \
	    $(filter %.o,$^) $(shell pkg-config --libs $(CHECK_PKG)) -lm
check: $(EMU_BIN)
endif

# `make test` and `make demo` first make sure the dependencies are there (a sub-make, so
# that pkg-config is asked again after an install).
test:
	@bash .ci/deps.sh
	@$(MAKE) --no-print-directory check

demo:
	@bash .ci/deps.sh
	@$(MAKE) --no-print-directory demo-run

# Unit suites (Check), then the end-to-end scripts. CK_FORK stays on: a crashing test is
# reported as a failure instead of killing the suite.
check: $(BIN) $(CUDA_SO) $(TEST_BIN)
	@bash tests/run_all.sh $(BUILD)

# what this Makefile found, one key=value a line, for bench/gpu.sh's preflight (so the
# rules that find CUDA stay in one place)
cuda-info:
	@printf 'nvcc=%s\nhome=%s\nlibdir=%s\nso=%s\npkgs=%s\n' '$(NVCC)' '$(CUDA_HOME)' \
	    '$(CUDA_LIBDIR)' '$(if $(CUDA_SO),$(abspath $(CUDA_SO)))' '$(PKGS) $(CHECK_PKG)'

demo-run: $(BIN)
	@bash cli/demo.sh $(BIN)

# stories260K behind the OpenAI-compatible server, for a first try (Ctrl-C stops it).
.PHONY: serve
serve: $(BIN)
	$(BIN) serve --model $${TWIN_DATA:-../shared/data}/models/stories260K.bin

bench: $(BIN) $(BENCH_BIN)
	@bash bench/sim_azure.sh $(BIN)
	@$(BUILD)/bench/bench_policy
	@bash bench/engine_cpu.sh $(BIN)
	@bash bench/engine_replay.sh $(BIN)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

sanitize:
	$(MAKE) SAN=address,undefined OPT=-O1 check

# Children are traced rather than CK_FORK=no: some tests expect the process to exit (the
# policy watchdog). The full-trace simulator suite takes several minutes under valgrind.
valgrind: $(TEST_BIN)
	@for t in $(TEST_BIN); do valgrind -q --trace-children=yes --error-exitcode=9 \
	    --suppressions=tests/valgrind.supp \
	    --leak-check=full $$t || exit 1; done

deps:
	@bash .ci/deps.sh

data:
	@bash traces/fetch_data.sh

clean:
	rm -rf build build-san

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
