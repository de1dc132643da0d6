# promptkv — build, test, run.
#   make            library + CLI (build/promptkv, build/libpromptkv.a) + build/bench-press (press timings)
#                   + build/bench-threads (the thread pool's cost per step), build/bench-dot (one dot kernel),
#                   build/bench-attn (one head's decode attention)
#   make run        build, install the default model, run the demo
#   make test       every test suite (unit, sanitizers, golden, real model); ends with "N passed, N failed"
#   make test-qwen1.5b  the Qwen2.5-Coder-1.5B-Instruct checks against llama.cpp (perplexity, tokenizer;
#                   installs the 1.1 GB model; not part of make test)
#   make model      install a model into models/ (NAME=qwen2.5-coder-0.5b-instruct, the default;
#                   qwen2.5-coder-1.5b-instruct; gemma-3-270m): tools/install-model.sh --list
#   make fuzz       libFuzzer target for the GGUF reader (clang)
#   make bench      re-run the measurements of docs/performance.md and docs/compression.md
#                   (long; LLAMA_BENCH=path/to/llama-bench for the llama.cpp comparisons)
#   make fuzz-request  libFuzzer target for the server's request parsing (clang)
#   make fuzz-tokenizer, make fuzz-chat  libFuzzer targets for the tokenizers and the chat formatter (clang)
#   make fuzz-http     libFuzzer target for the server's HTTP framing checks (clang)
#   make fuzz-cachefile libFuzzer target for the saved-cache reader (clang)
#   make deps       Debian packages the server needs (tools/install-deps.sh; run by make)

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2 -g
PYTHON  ?= python3

# The library is portable x86-64/C11; SIMD files get their own flags and are
# chosen at run time (src/kernels/cpu.c).
CFLAGS_COMMON = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
                -Iinclude -Isrc -pthread -fno-strict-aliasing
AVX2_FLAGS    = -mavx2 -mfma -mf16c
AVX512_FLAGS  = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c

# the engine's layers, lowest first: a layer includes only the layers before it
ENGINE_DIRS := base format kernels cache text model press engine
LIB_SRC  := $(sort $(foreach d,$(ENGINE_DIRS),$(wildcard src/$(d)/*.c)))
# the harness, each its own archive over the engine's public API (and src/base/):
# linked into the CLI and the tests, not into libpromptkv.a
EVAL_SRC  := $(sort $(wildcard src/eval/*.c))
BENCH_SRC := $(sort $(wildcard src/bench/*.c))
CLI_SRC  := $(sort $(wildcard cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
# the HTTP server: its own archive, linked only into the CLI (the library stays libc-only)
SERVER_SRC  := $(sort $(wildcard src/server/*.c))
SERVER_LIBS  = -lmicrohttpd -ljansson

# ------------------------------------------------------------ build rules
# $(call objs,DIR,SOURCES)
objs = $(patsubst %.c,$(1)/%.o,$(2))

define build_tree
# $(1) = output dir, $(2) = extra CFLAGS, $(3) = extra LDFLAGS
$(1)/%_avx2.o: %_avx2.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$(AVX2_FLAGS) -MMD -MP -c $$< -o $$@
$(1)/%_avx512.o: %_avx512.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$(AVX512_FLAGS) -MMD -MP -c $$< -o $$@
$(1)/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) -MMD -MP -c $$< -o $$@
$(1)/libpromptkv.a: $(call objs,$(1),$(LIB_SRC))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/libpromptkv_server.a: $(call objs,$(1),$(SERVER_SRC))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/libpromptkv_eval.a: $(call objs,$(1),$(EVAL_SRC))
	@rm -f $$@
	ar rcs $$@ $$^
$(1)/libpromptkv_bench.a: $(call objs,$(1),$(BENCH_SRC))
	@rm -f $$@
	ar rcs $$@ $$^
$(call objs,$(1),$(SERVER_SRC)): | deps
$(1)/promptkv: $(call objs,$(1),$(CLI_SRC)) $(1)/libpromptkv_server.a $(1)/libpromptkv_eval.a $(1)/libpromptkv_bench.a $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(SERVER_LIBS) $(3)
$(1)/test_runner: $(call objs,$(1),$(TEST_SRC)) $(1)/libpromptkv_eval.a $(1)/libpromptkv_bench.a $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
$(1)/bench-press: $(1)/tools/bench-press.o $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
$(1)/bench-dot: $(1)/tools/bench-dot.o $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
$(1)/bench-attn: $(1)/tools/bench-attn.o $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
$(1)/bench-threads: $(1)/tools/bench-threads.o $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
$(1)/protokv-diagnose: $(1)/tools/protokv-diagnose.o $(1)/libpromptkv_eval.a $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
$(1)/gguf-edit: $(1)/tools/gguf-edit.o $(1)/libpromptkv.a
	$$(CC) $$(CFLAGS_COMMON) $$(OPT) $(2) $$^ -o $$@ -lm $(3)
endef

SAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.DEFAULT_GOAL := all

# MPI=1: promptkv eval shards samples over MPI ranks (mpicc, -DPKV_MPI). Only
# cli/cmd_eval.c and cli/eval_args.c (its usage text) use MPI; a stamp rebuilds
# them (and relinks) when the setting changes.
ifeq ($(MPI),1)
CC := mpicc
CFLAGS_COMMON += -DPKV_MPI
endif
MPI_STAMP := $(BUILD)/.mpi-$(if $(filter 1,$(MPI)),on,off)
$(MPI_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.mpi-* && touch $@
$(BUILD)/cli/cmd_eval.o $(BUILD)/cli/eval_args.o: $(MPI_STAMP)

$(eval $(call build_tree,$(BUILD),,))
$(eval $(call build_tree,$(BUILD)/san,$(SAN_FLAGS),$(SAN_FLAGS)))

.PHONY: all lib cli tests run test test-qwen1.5b model fuzz fuzz-request fuzz-http fuzz-tokenizer fuzz-chat fuzz-cachefile deps clean demo bench
all: deps $(BUILD)/libpromptkv.a $(BUILD)/promptkv $(BUILD)/bench-press $(BUILD)/bench-threads $(BUILD)/bench-dot $(BUILD)/bench-attn $(BUILD)/protokv-diagnose
deps:
	@tools/install-deps.sh
lib: $(BUILD)/libpromptkv.a
cli: $(BUILD)/promptkv
# the CLI under ASan + UBSan and gguf-edit: the mutated-model property test (tests/mutate-test.sh)
tests: $(BUILD)/test_runner $(BUILD)/san/test_runner $(BUILD)/san/promptkv $(BUILD)/gguf-edit

# models by name (tools/install-model.sh): the file each name installs
NAME          ?= qwen2.5-coder-0.5b-instruct
DEFAULT_MODEL  = models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
GEMMA_MODEL    = models/gemma-3-270m-q4_k_m.gguf
QWEN15_MODEL   = models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

model:
	PYTHON=$(PYTHON) tools/install-model.sh $(NAME)
$(DEFAULT_MODEL):
	PYTHON=$(PYTHON) tools/install-model.sh qwen2.5-coder-0.5b-instruct
$(GEMMA_MODEL):
	PYTHON=$(PYTHON) tools/install-model.sh gemma-3-270m
$(QWEN15_MODEL):
	PYTHON=$(PYTHON) tools/install-model.sh qwen2.5-coder-1.5b-instruct

run: all $(DEFAULT_MODEL)
	tools/demo.sh $(BUILD)/promptkv $(DEFAULT_MODEL)

# the MPI build of the CLI (own tree) lets the eval smoke test check that
# mpirun -np 2 writes the files one process writes
test: all tests $(DEFAULT_MODEL) $(GEMMA_MODEL)
	@tools/install-deps.sh --test
	$(MAKE) MPI=1 BUILD=$(BUILD)/mpi $(BUILD)/mpi/promptkv
	BUILD=$(BUILD) tests/run-all.sh

test-qwen1.5b: $(BUILD)/test_runner $(QWEN15_MODEL)
	$(BUILD)/test_runner manual_qwen15_

bench: all $(GEMMA_MODEL)
	tools/bench-docs.sh

# ------------------------------------------------------------ fuzzing (clang + libFuzzer)
FUZZ_FLAGS = -fsanitize=fuzzer,address,undefined -g -O1
fuzz: $(BUILD)/fuzz_gguf
FUZZ_GGUF_SRC = src/format/gguf.c src/format/gguf_format.c src/base/error.c
$(BUILD)/fuzz_gguf: fuzz/fuzz_gguf.c $(FUZZ_GGUF_SRC) src/format/gguf.h
	@mkdir -p $(BUILD)
	clang -std=c11 -D_GNU_SOURCE -Iinclude -Isrc $(FUZZ_FLAGS) fuzz/fuzz_gguf.c $(FUZZ_GGUF_SRC) -o $@ -lm

# the saved-cache reader and the cache it fills
fuzz-cachefile: $(BUILD)/fuzz_cachefile
FUZZ_CACHEFILE_SRC = src/cache/kvfile.c src/cache/kvcache.c src/base/crc64.c src/base/error.c src/kernels/quant.c \
                     src/kernels/vec.c
$(BUILD)/fuzz_cachefile: fuzz/fuzz_cachefile.c $(FUZZ_CACHEFILE_SRC) src/cache/kvfile.h src/cache/kvcache.h
	@mkdir -p $(BUILD)
	clang -std=c11 -D_GNU_SOURCE -Iinclude -Isrc $(FUZZ_FLAGS) fuzz/fuzz_cachefile.c $(FUZZ_CACHEFILE_SRC) -o $@ -lm

# the request parser with the whole library, built by clang into $(BUILD)/fuzz; CPU detection
# and the SIMD kernels use gcc-only builtins and pragmas: gcc builds them, uninstrumented
FUZZ_LIB_FLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
FUZZ_GCC_OBJS  = $(call objs,$(BUILD)/fuzz,src/kernels/cpu.c $(wildcard src/kernels/*_avx2.c src/kernels/*_avx512.c))
$(eval $(call build_tree,$(BUILD)/fuzz,$$(FUZZ_LIB_FLAGS),))
$(BUILD)/fuzz/%: CC = clang
$(FUZZ_GCC_OBJS): CC = gcc
$(FUZZ_GCC_OBJS): FUZZ_LIB_FLAGS =
fuzz-request: $(BUILD)/fuzz_request
fuzz-http: $(BUILD)/fuzz_http
$(BUILD)/fuzz_request $(BUILD)/fuzz_http: $(BUILD)/fuzz_%: fuzz/fuzz_%.c $(BUILD)/fuzz/libpromptkv_server.a \
                                         $(BUILD)/fuzz/libpromptkv.a
	clang $(CFLAGS_COMMON) $(FUZZ_FLAGS) -fno-sanitize-recover=undefined $^ -o $@ -lm $(SERVER_LIBS)
# the tokenizers (SPM and BPE) and the chat formatter with prompt assembly, on the whole library
fuzz-tokenizer: $(BUILD)/fuzz_tokenizer
fuzz-chat: $(BUILD)/fuzz_chat
$(BUILD)/fuzz_tokenizer $(BUILD)/fuzz_chat: $(BUILD)/fuzz_%: fuzz/fuzz_%.c $(BUILD)/fuzz/libpromptkv.a
	clang $(CFLAGS_COMMON) $(FUZZ_FLAGS) -fno-sanitize-recover=undefined $^ -o $@ -lm

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
