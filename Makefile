# inflight: one non-recursive GNU Makefile.
#
#   make                 build/inflight, build/libinflight.a, build/libinflight.so, tools
#   make test            install missing Debian packages, build, run every test
#   make run             the README's main job
#   make fuzz            libFuzzer targets (clang)
#   make format / format-check
# Knobs: DEBUG=1, SANITIZE=address,undefined | SANITIZE=thread, CC=clang, V=1, MPI=0

CC ?= cc
SANITIZE ?=
DEBUG ?=

comma := ,
ifeq ($(SANITIZE),)
BUILD := build
else
BUILD := build/san-$(subst $(comma),-,$(SANITIZE))
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
ifeq ($(CI),true)
WARN += -Werror
endif
OPT := -O2 -g
ifneq ($(DEBUG),)
OPT := -O0 -g3
endif
PCRE2_CFLAGS := $(shell pkg-config --cflags libpcre2-8 2>/dev/null)
PCRE2_LIBS := $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
# ICU: Unicode properties, case and NFD for the WordPiece tokenizer
ICU_LIBS := $(shell pkg-config --libs icu-uc 2>/dev/null || echo -licuuc -licudata)

CPPFLAGS := -Iinclude -Isrc -D_GNU_SOURCE $(PCRE2_CFLAGS)
CFLAGS := -std=c11 $(OPT) $(WARN) -fPIC -pthread -MMD -MP $(EXTRA_CFLAGS)
LDLIBS := $(PCRE2_LIBS) $(ICU_LIBS) -ljansson -lmicrohttpd -lpng16 -lturbojpeg -lm -pthread
LDFLAGS := $(EXTRA_LDFLAGS)
ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# Only the per-ISA kernel files get ISA flags; dispatch picks them at run time.
AVX2_FLAGS := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -mavx2
# Only x86_avx512_bf16.c may hold BF16 instructions: the plain avx512 table
# runs on CPUs without them (Ice Lake), where the compiler's free use of one
# (a conversion it finds cheaper, say) would fault. `make isa-check` checks.
AVX512BF16_FLAGS := $(AVX512_FLAGS) -mavx512bf16

# MPI (src/dist/comm.c, tools/commbench.c): on when $(MPICC) is found, off
# with MPI=0 or without it (then every communicator is one rank; see
# docs/distributed.md). The flags come from the wrapper: Open MPI's answers
# --showme:compile/--showme:link, MPICH's -compile_info/-link_info (whose
# first word, the compiler, is dropped). Only comm.c and commbench.c see
# mpi.h; --as-needed links libmpi only into what calls the layer.
MPICC ?= mpicc
ifeq ($(origin MPI),undefined)
MPI := $(if $(shell command -v $(MPICC) 2>/dev/null),1,0)
endif
ifeq ($(MPI),1)
ifeq ($(origin MPI_CFLAGS),undefined)
MPI_CFLAGS := $(filter -I% -D%,$(shell $(MPICC) --showme:compile 2>/dev/null || \
  $(MPICC) -compile_info 2>/dev/null))
endif
ifeq ($(origin MPI_LIBS),undefined)
MPI_LIBS := $(filter -L% -l% -Wl% -pthread,$(shell $(MPICC) --showme:link 2>/dev/null || \
  $(MPICC) -link_info 2>/dev/null))
endif
LDLIBS += -Wl,--as-needed $(MPI_LIBS) -Wl,--no-as-needed
endif
# a change of MPI or its flags rebuilds what they reach
MPI_STAMP := $(BUILD)/mpi.flags
$(shell mkdir -p $(BUILD) && echo '$(MPI) $(MPI_CFLAGS) $(MPI_LIBS)' | cmp -s - $(MPI_STAMP) || \
  echo '$(MPI) $(MPI_CFLAGS) $(MPI_LIBS)' > $(MPI_STAMP))

LIB_SRC := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRC := $(shell find src/cli -name '*.c' | sort)
TOOL_SRC := $(wildcard tools/*.c)
ifneq ($(MPI),1)
TOOL_SRC := $(filter-out tools/commbench.c,$(TOOL_SRC))
endif
TEST_SRC := $(wildcard tests/test_*.c)
EXAMPLE_SRC := $(wildcard examples/*.c)
TEST_HELPER_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))

# The playground's files (src/server/web/) embedded as C arrays, generated
# at build time (src/server/web/embed.sh: sh, od, sha256sum).
WEB_FILES := $(sort $(wildcard src/server/web/*.html src/server/web/*.css src/server/web/*.js \
  src/server/web/*.json))
WEB_C := $(BUILD)/gen/web_assets.c
WEB_OBJ := $(BUILD)/gen/web_assets.o
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(WEB_OBJ)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_HELPER_OBJ := $(TEST_HELPER_SRC:%.c=$(BUILD)/%.o)
TOOLS := $(TOOL_SRC:tools/%.c=$(BUILD)/tools/%)
TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
EXAMPLES := $(EXAMPLE_SRC:examples/%.c=$(BUILD)/examples/%)

LIB_A := $(BUILD)/libinflight.a
LIB_SO := $(BUILD)/libinflight.so
BIN := $(BUILD)/inflight

ifeq ($(V),)
Q := @
endif

.PHONY: all test check-test run deps fuzz fuzz-deps format format-check clean tests tools examples python
all: $(BIN) $(LIB_A) $(LIB_SO) $(TOOLS) $(EXAMPLES)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(XFLAGS) -c $< -o $@

$(WEB_C): $(WEB_FILES) src/server/web/embed.sh
	@mkdir -p $(@D)
	$(Q)sh src/server/web/embed.sh $@ $(WEB_FILES)
$(WEB_OBJ): $(WEB_C)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/src/kernels/x86_avx2%.o: XFLAGS := $(AVX2_FLAGS)
$(BUILD)/src/kernels/x86_avx512%.o: XFLAGS := $(AVX512_FLAGS)
$(BUILD)/src/kernels/x86_avx512_bf16.o: XFLAGS := $(AVX512BF16_FLAGS)
ifeq ($(MPI),1)
$(BUILD)/src/dist/comm.o $(BUILD)/tools/commbench.o: XFLAGS := -DIFL_HAVE_MPI=1 $(MPI_CFLAGS)
endif
$(BUILD)/src/dist/comm.o $(BUILD)/tools/commbench.o: $(MPI_STAMP)

$(LIB_A): $(LIB_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ)
	$(Q)$(CC) -shared $(LDFLAGS) -Wl,-soname,libinflight.so -o $@ $^ $(LDLIBS)

# only the command line uses libcurl (the load generator of inflight bench --url)
$(BIN): $(CLI_OBJ) $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB_A) $(LDLIBS) -lcurl

$(BUILD)/tools/%: $(BUILD)/tools/%.o $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB_A) $(LDLIBS)

$(BUILD)/examples/%: $(BUILD)/examples/%.o $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB_A) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_HELPER_OBJ) $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TEST_HELPER_OBJ) $(LIB_A) $(LDLIBS)

# The differential guide fuzzer's checked-in corpus, replayed by the
# ordinary compiler without libFuzzer: the target's entry point is linked
# into test_fuzz_replay, which `make test` runs.
$(BUILD)/tests/test_fuzz_replay: $(BUILD)/tests/test_fuzz_replay.o \
  $(BUILD)/tests/fuzz/fuzz_guide_diff.o $(TEST_HELPER_OBJ) $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(LDLIBS)
# Likewise the image decoder's corpus (tests/fuzz/corpus/fuzz_image).
$(BUILD)/tests/test_fuzz_replay_image: $(BUILD)/tests/test_fuzz_replay_image.o \
  $(BUILD)/tests/fuzz/fuzz_image.o $(TEST_HELPER_OBJ) $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(LDLIBS)
# Likewise the LoRA adapter loader's corpus (tests/fuzz/corpus/fuzz_lora).
$(BUILD)/tests/test_fuzz_replay_lora: $(BUILD)/tests/test_fuzz_replay_lora.o \
  $(BUILD)/tests/fuzz/fuzz_lora.o $(TEST_HELPER_OBJ) $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(LDLIBS)
# Likewise the mmproj loader's corpus (tests/fuzz/corpus/fuzz_clip).
$(BUILD)/tests/test_fuzz_replay_clip: $(BUILD)/tests/test_fuzz_replay_clip.o \
  $(BUILD)/tests/fuzz/fuzz_clip.o $(TEST_HELPER_OBJ) $(LIB_A)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) $(LDLIBS)

# The Python package (python/): the extension inflight._core, built against
# Debian's python3-dev, linked to a copy of libinflight.so beside it (found
# through $ORIGIN), so python/ is importable from the repository root and
# `pip install ./python` packs the same files. A sanitized build goes to
# $(BUILD)/python/inflight instead, with links to the package's .py files.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
PY_INC := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
PY_EXT := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
ifeq ($(SANITIZE),)
PY_DEST := python/inflight
else
PY_DEST := $(BUILD)/python/inflight
endif
PY_CORE := $(PY_DEST)/_core$(PY_EXT)
PY_SRC := $(wildcard python/inflight/*.py)
python: $(PY_CORE) $(PY_DEST)/libinflight.so $(if $(SANITIZE),$(PY_SRC:python/inflight/%=$(PY_DEST)/%))

$(PY_DEST)/libinflight.so: $(LIB_SO)
	@mkdir -p $(@D)
	$(Q)cp $< $@

$(BUILD)/python/%.o: python/src/%.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC $<")
	$(Q)$(CC) $(CPPFLAGS) -I$(PY_INC) $(CFLAGS) -fvisibility=hidden -c $< -o $@

PY_OBJ := $(patsubst python/src/%.c,$(BUILD)/python/%.o,$(wildcard python/src/*.c))
$(PY_CORE): $(PY_OBJ) $(PY_DEST)/libinflight.so
	$(Q)$(CC) -shared $(LDFLAGS) -o $@ $(PY_OBJ) -L$(PY_DEST) -linflight \
	  -Wl,-rpath,'$$ORIGIN' -pthread -lm

$(BUILD)/python/inflight/%.py: python/inflight/%.py
	@mkdir -p $(@D)
	$(Q)ln -sf $(abspath $<) $@

# Test vocabularies stay xz-compressed in tests/data/vocab/ (a quarter of
# their size) and are unpacked into $(BUILD)/vocab/ for the tests.
VOCAB_XZ := $(wildcard tests/data/vocab/*.gguf.xz)
VOCAB_GGUF := $(VOCAB_XZ:tests/data/vocab/%.xz=$(BUILD)/vocab/%)
$(BUILD)/vocab/%.gguf: tests/data/vocab/%.gguf.xz
	@mkdir -p $(@D)
	$(Q)xz -dc $< > $@.tmp && mv $@.tmp $@
$(BUILD)/tests/test_vocab_vectors: $(VOCAB_GGUF)

tests: $(TESTS)
tools: $(TOOLS)
examples: $(EXAMPLES)

# The README's test command: installs what is missing, builds, runs the suite.
test: deps
	$(Q)$(MAKE) --no-print-directory check-test

check-test: all $(TESTS) $(VOCAB_GGUF) python
	$(Q)BUILD=$(BUILD) bash tests/run.sh

run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(BIN) serve -m ../shared/models/stories260K.gguf --host 127.0.0.1 --port 8080

deps:
	$(Q)bash scripts/deps.sh

# libFuzzer targets: the library is built by clang with the fuzzer's
# instrumentation in build/fuzz/lib (per-ISA flags as usual), then linked
# with each target. Run one: build/fuzz/fuzz_gguf CORPUS_DIR -max_total_time=60
# FUZZ_SANITIZE picks the sanitizers (default address,undefined); another
# choice builds in build/fuzz-<name>, e.g. `make fuzz FUZZ_SANITIZE=undefined`
# (several times the executions per second, without ASan's checks).
# The differential guide target keeps a corpus in the tree (see
# tests/fuzz/README.md): build/fuzz/fuzz_guide_diff tests/fuzz/corpus/fuzz_guide_diff
FUZZ_SANITIZE ?= address,undefined
ifeq ($(FUZZ_SANITIZE),address,undefined)
FUZZ_OUT := build/fuzz
else
FUZZ_OUT := build/fuzz-$(subst $(comma),-,$(FUZZ_SANITIZE))
endif
FUZZ_SAN_FLAGS := $(if $(FUZZ_SANITIZE),$(comma)$(FUZZ_SANITIZE))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_OUT)/%)
FUZZ_LIB := $(FUZZ_OUT)/lib/libinflight.a
fuzz: fuzz-deps $(FUZZERS)
# clang and libFuzzer (Debian: clang, libclang-rt-dev); only `make fuzz` needs them
fuzz-deps:
	$(Q)command -v clang >/dev/null && \
	  test -f "$$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a)" || { \
	  echo "make fuzz needs clang and libFuzzer; as root run:" >&2; \
	  echo "  apt-get install -y clang libclang-rt-dev" >&2; exit 1; }
ifneq ($(BUILD),$(FUZZ_OUT)/lib)
$(FUZZ_LIB): $(LIB_SRC) $(WEB_FILES)
	$(MAKE) --no-print-directory CC=clang BUILD=$(FUZZ_OUT)/lib \
	  EXTRA_CFLAGS="-fsanitize=fuzzer-no-link$(FUZZ_SAN_FLAGS)" \
	  EXTRA_LDFLAGS="$(if $(FUZZ_SANITIZE),-fsanitize=$(FUZZ_SANITIZE))" $(FUZZ_LIB)
endif
$(FUZZ_OUT)/%: tests/fuzz/%.c $(FUZZ_LIB)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  $(FUZZ_LIB) $(LDLIBS)
# The guide targets link only what the guide needs (its vocabulary code
# reads GGUF): they build quickly and run fast.
FUZZ_GUIDE_SRC := $(wildcard src/guide/*.c src/core/*.c src/tokenizer/*.c) src/model/gguf.c \
  src/kernels/types.c
FUZZ_GUIDE_OBJ := $(FUZZ_GUIDE_SRC:%.c=$(FUZZ_OUT)/lib/%.o)
FUZZ_GUIDE_LIB := $(FUZZ_OUT)/lib/libguide.a
ifneq ($(BUILD),$(FUZZ_OUT)/lib)
$(FUZZ_GUIDE_LIB): $(FUZZ_GUIDE_SRC)
	$(MAKE) --no-print-directory CC=clang BUILD=$(FUZZ_OUT)/lib \
	  EXTRA_CFLAGS="-fsanitize=fuzzer-no-link$(FUZZ_SAN_FLAGS)" $(FUZZ_GUIDE_OBJ)
	rm -f $@ && ar rcs $@ $(FUZZ_GUIDE_OBJ)
endif
GUIDE_FUZZERS := $(filter $(FUZZ_OUT)/fuzz_guide%,$(FUZZERS))
$(GUIDE_FUZZERS): $(FUZZ_OUT)/%: tests/fuzz/%.c $(FUZZ_GUIDE_LIB)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  $(FUZZ_GUIDE_LIB) $(LDLIBS)

# The LoRA loader's target links the model loader, the kernels and core.
FUZZ_LORA_SRC := $(wildcard src/core/*.c src/kernels/*.c) \
  src/model/gguf.c src/model/gguf_meta.c src/model/gguf_write.c src/model/lora.c \
  src/model/model.c src/model/repack.c
FUZZ_LORA_OBJ := $(FUZZ_LORA_SRC:%.c=$(FUZZ_OUT)/lib/%.o)
FUZZ_LORA_LIB := $(FUZZ_OUT)/lib/liblora.a
ifneq ($(BUILD),$(FUZZ_OUT)/lib)
$(FUZZ_LORA_LIB): $(FUZZ_LORA_SRC)
	$(MAKE) --no-print-directory CC=clang BUILD=$(FUZZ_OUT)/lib \
	  EXTRA_CFLAGS="-fsanitize=fuzzer-no-link$(FUZZ_SAN_FLAGS)" $(FUZZ_LORA_OBJ)
	rm -f $@ && ar rcs $@ $(FUZZ_LORA_OBJ)
endif
$(FUZZ_OUT)/fuzz_lora: tests/fuzz/fuzz_lora.c $(FUZZ_LORA_LIB)
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  $(FUZZ_LORA_LIB) -lm -pthread

# The Hermes tool-call parser's target links the parser, the <think> splitter
# and the byte buffer.
$(FUZZ_OUT)/fuzz_hermes: tests/fuzz/fuzz_hermes.c tests/fuzz/reply_chain.h src/server/hermes.c \
  src/server/think.c src/core/buf.c
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  src/server/hermes.c src/server/think.c src/core/buf.c -ljansson

# Likewise the Llama 3.1 tool-call parser's (it shares hermes.c's helpers).
$(FUZZ_OUT)/fuzz_llama3: tests/fuzz/fuzz_llama3.c tests/fuzz/reply_chain.h src/server/llama3.c \
  src/server/hermes.c src/server/think.c src/core/buf.c
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  src/server/llama3.c src/server/hermes.c src/server/think.c src/core/buf.c -ljansson

# Likewise Qwen3-Coder's XML tool-call parser's (hermes.c's machine).
$(FUZZ_OUT)/fuzz_xmlcall: tests/fuzz/fuzz_xmlcall.c tests/fuzz/reply_chain.h src/server/xmlcall.c \
  src/server/hermes.c src/server/think.c src/core/buf.c
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  src/server/xmlcall.c src/server/hermes.c src/server/think.c src/core/buf.c -ljansson

# Likewise Mistral's [TOOL_CALLS] parser's.
$(FUZZ_OUT)/fuzz_mistral: tests/fuzz/fuzz_mistral.c tests/fuzz/reply_chain.h src/server/mistral.c \
  src/server/hermes.c src/server/think.c src/core/buf.c
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  src/server/mistral.c src/server/hermes.c src/server/think.c src/core/buf.c -ljansson

# Likewise DeepSeek-R1's tool-call parser's (hermes.c's machine).
$(FUZZ_OUT)/fuzz_deepseek: tests/fuzz/fuzz_deepseek.c tests/fuzz/reply_chain.h src/server/deepseek.c \
  src/server/hermes.c src/server/think.c src/core/buf.c
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  src/server/deepseek.c src/server/hermes.c src/server/think.c src/core/buf.c -ljansson

# The image target links only the decoder (and libpng, libturbojpeg).
FUZZ_IMAGE_SRC := src/core/err.c src/vision/image.c
FUZZ_IMAGE_OBJ := $(FUZZ_IMAGE_SRC:%.c=$(FUZZ_OUT)/lib/%.o)
ifneq ($(BUILD),$(FUZZ_OUT)/lib)
$(FUZZ_OUT)/lib/libimage.a: $(FUZZ_IMAGE_SRC)
	$(MAKE) --no-print-directory CC=clang BUILD=$(FUZZ_OUT)/lib \
	  EXTRA_CFLAGS="-fsanitize=fuzzer-no-link$(FUZZ_SAN_FLAGS)" $(FUZZ_IMAGE_OBJ)
	rm -f $@ && ar rcs $@ $(FUZZ_IMAGE_OBJ)
endif
$(FUZZ_OUT)/fuzz_image: tests/fuzz/fuzz_image.c $(FUZZ_OUT)/lib/libimage.a
	@mkdir -p $(@D)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer$(FUZZ_SAN_FLAGS) -o $@ $< \
	  $(FUZZ_OUT)/lib/libimage.a -lpng16 -lturbojpeg -lm

FORMAT_FILES = $(shell find include src tests tools examples python/src -name '*.[ch]' 2>/dev/null)
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build python/inflight/_core*.so python/inflight/libinflight.so python/build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
