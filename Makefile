# kvscope: `make run` opens the app, `make test` runs every check.
# Both install what a fresh Debian/Ubuntu machine with Go lacks.

GO       ?= go
BIN      := kvscope
TESTDATA ?= $(if $(KVSCOPE_TESTDATA),$(KVSCOPE_TESTDATA),../shared)
MODEL    ?= $(TESTDATA)/models/stories260K.gguf
# System packages Fyne needs to build (cgo, OpenGL and X11 headers).
APT_PKGS := gcc pkg-config libgl1-mesa-dev xorg-dev
# and what `make screenshot` needs to open the window without a display.
SHOT_PKGS := xvfb xauth
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps build run test test-openai fuzz bench screenshot clean native cuda cuda-toolkit cuda-check cuda-emu metal

all: build

# deps installs the missing system packages with apt-get.
deps:
	@missing=""; for p in $(APT_PKGS) $(EXTRA_PKGS); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# native builds the CPU compute library (native/README.md); run, test and
# bench rebuild it when its C sources change.
NATIVE_LIB := native/build/libkvscope_cpu.$(if $(filter Darwin,$(shell uname -s)),dylib,so)
native: $(NATIVE_LIB)
$(NATIVE_LIB): $(wildcard native/Makefile native/cpu/*.c native/cpu/*.h native/include/*.h)
	$(MAKE) -C native

# cuda builds native/build/libkvscope_cuda.so (native/cuda, native/README.md)
# with nvcc, for sm_80 and sm_90 (CUDA_ARCHS overrides); where nvcc is
# missing it says so and fails. `make cuda-toolkit` installs Debian's
# toolkit (CUDA 11.8, contrib non-free) when nvcc is missing.
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo /usr/bin/nvcc)
cuda:
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "make cuda: nvcc is not installed, so the CUDA library cannot be built here (make cuda-toolkit installs Debian's nvidia-cuda-toolkit)"; exit 1; }
	$(MAKE) -C native/cuda NVCC=$(NVCC)

# cuda-toolkit adds Debian's contrib and non-free components (a sources
# file of its own, for this machine's Debian release) and installs
# nvidia-cuda-toolkit, unless nvcc exists. Elsewhere (Ubuntu: multiverse)
# it tries the install as the sources stand.
CUDA_SOURCES := /etc/apt/sources.list.d/kvscope-cuda.sources
cuda-toolkit:
	@if command -v nvcc >/dev/null 2>&1; then echo "nvcc is installed: $$(command -v nvcc)"; exit 0; fi; \
	. /etc/os-release; \
	if [ "$$ID" = debian ] && [ ! -f $(CUDA_SOURCES) ]; then \
		echo "adding Debian $$VERSION_CODENAME contrib non-free ($(CUDA_SOURCES))"; \
		printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s %s-updates\nComponents: contrib non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
			"$$VERSION_CODENAME" "$$VERSION_CODENAME" | $(SUDO) tee $(CUDA_SOURCES) >/dev/null; \
	fi; \
	$(SUDO) apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $(SUDO) nice -n 10 apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit || \
		{ echo "make cuda-toolkit: could not install nvidia-cuda-toolkit (Debian: contrib non-free; Ubuntu: multiverse)"; exit 1; }

# cuda-check is CI's compile check: the CUDA library for sm_80 and sm_90,
# installing the toolkit first when nvcc is missing. No GPU is needed.
cuda-check: cuda-toolkit
	$(MAKE) cuda CUDA_ARCHS="80 90"

# cuda-emu builds the CUDA library's own sources (native/cuda) with g++ on
# ROCm's HIP-CPU runtime into native/build/emu/libkvscope_cuda.so, whose
# kernels run on the CPU (native/README.md): make test runs the device
# tests on it. SANITIZE=1 builds it with AddressSanitizer and UBSan into
# native/build/emu-asan (.ci/run runs the device tests on that once). It
# installs libtbb-dev (HIP-CPU's parallel algorithms) when missing, and
# skips, saying so, where HIPCPU (HIP-CPU's source tree) is not found.
HIPCPU ?= $(TESTDATA)/third_party/hip-cpu
EMU_JOBS := $(if $(filter -j% --jobserver%,$(MAKEFLAGS)),,-j$(shell nproc 2>/dev/null || echo 2))
cuda-emu:
	@if [ ! -f $(HIPCPU)/include/hip/hip_runtime.h ]; then \
		echo "make cuda-emu: skipped: no HIP-CPU at $(HIPCPU) (HIPCPU= names its source tree), so the device tests run on the CPU library only"; exit 0; \
	fi; \
	$(MAKE) --no-print-directory deps APT_PKGS="g++ libtbb-dev" EXTRA_PKGS= && \
	$(MAKE) --no-print-directory $(EMU_JOBS) -C native/cuda emu HIPCPU=$(abspath $(HIPCPU)) SANITIZE=$(SANITIZE)

# metal builds native/build/libkvscope_metal.dylib on macOS (native/metal).
metal:
	@[ "$$(uname -s)" = Darwin ] || { echo "make metal: the Metal library builds only on macOS (clang with the Metal framework)"; exit 1; }
	$(MAKE) -C native/metal

build: deps
	$(GO) build -o $(BIN) .

run: build $(NATIVE_LIB)
	./$(BIN) $(if $(wildcard $(MODEL)),-m $(MODEL))

# test: vet, the whole suite under the race detector (the device tests
# also on the CUDA library emulated on the CPU: cuda-emu; and
# internal/early, a module of its own), a few seconds of fuzzing the GGUF
# reader, and the openai client test (test-openai). The timeout is a hang
# guard: the app package plays every lesson under the race detector, which
# takes go test's default 10 minutes on a slow or busy two-core machine.
test: deps $(NATIVE_LIB) cuda-emu
	$(GO) vet ./...
	$(GO) test -race -timeout 30m ./...
	$(GO) -C internal/early vet ./... && $(GO) -C internal/early test ./...
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 5s ./engine/gguf
	$(MAKE) test-openai

# test-openai runs the official openai npm client against `kvscope serve`
# on stories260K (test/openai: installed by npm ci from its committed
# package-lock.json). Where node or npm is missing it installs Debian's
# nodejs and npm; where the node it finds is older than 20 (the client's
# minimum) it says so and skips.
OPENAI_TEST := test/openai
test-openai: build
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		echo "installing system packages: nodejs npm"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nodejs npm; \
	fi; \
	if [ "$$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ]; then \
		echo "test-openai: skipped: node $$(node --version 2>/dev/null) is older than 20, which the openai client needs"; exit 0; \
	fi; \
	cd $(OPENAI_TEST) && npm ci --no-audit --no-fund --loglevel=error && \
	KVSCOPE_BIN=$(CURDIR)/$(BIN) KVSCOPE_TESTDATA=$(abspath $(TESTDATA)) node --test openai.test.mjs

fuzz: deps
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 60s ./engine/gguf

# bench prints prefill and decode speed (on the backend auto picks: the
# native CPU library once built) on TinyLlama-shaped models with
# random Q4_0, Q8_0 and Q4_K_M weights, and Llama 3.2 1B- and Qwen 2.5
# 0.5B-shaped ones with Q4_K_M weights, beside the machine's bandwidth limit and,
# where $(TESTDATA)/peers/llama.cpp/bin holds llama.cpp's benchmarks, beside
# llama.cpp's figures measured on the same files in the same run; then the
# K/V precision and allocator tables, sampling time per token with and
# without a JSON schema on a 128k-token vocabulary, and the Go and native kernels'
# throughput in GB/s.
bench: build $(NATIVE_LIB)
	./$(BIN) bench speed --peer $(TESTDATA)/peers/llama.cpp/bin
	./$(BIN) bench speed --peer $(TESTDATA)/peers/llama.cpp/bin --preset llama-3.2-1b --types Q4_K_M
	./$(BIN) bench speed --peer $(TESTDATA)/peers/llama.cpp/bin --preset qwen2.5-0.5b --types Q4_K_M
	./$(BIN) bench cache
	./$(BIN) bench sample
	@echo "Matrix kernels: MB/s of weights read (bench speed above measured this machine's read bandwidth, the bound for one vector)"
	$(GO) test -run '^$$' -bench 'MatMul' -benchtime 20x ./engine/quant
	$(GO) test -run '^$$' -bench 'MatMul' -benchtime 20x ./engine/backend/native
	@echo "Heatmap redraws of 16,384 blocks at 1100x700 (redraws/s must stay above 30)"
	$(GO) test -run '^$$' -bench 'Render16K' ./app/inspector

# screenshot opens the real window under Xvfb and runs a short scripted
# session on the demo model (app.ScreenshotEnv): two conversations through
# a chat template named in the conversation, saved at 1280x800 as
# assets/screenshot.png, then each lesson held at its pictured step at 1024x700, saved
# as assets/lesson-NAME.png, with the first-run screen (assets/first-run.png)
# and the Controls tab's capacity view (assets/capacity.png) at 1024x700.
# It takes a few minutes.
screenshot: EXTRA_PKGS = $(SHOT_PKGS)
screenshot: build
	xvfb-run -a -s "-screen 0 1280x800x24" env KVSCOPE_SCREENSHOT=assets/screenshot.png ./$(BIN)

clean:
	rm -f $(BIN)

# ---- Packages and installing (README "Install") ----
# dist writes to $(DIST): kvscope-VERSION-linux-ARCH.tar.xz, made by `fyne
# package` (its Linux layout: kvscope/usr/local/{bin,share} and a Makefile
# installing to a PREFIX), with the native libraries added under
# usr/local/lib/kvscope, and kvscope_VERSION_ARCH.deb, built by dpkg-deb
# from the same files. install copies the same files under PREFIX;
# uninstall removes them. The binary finds its library in ../lib/kvscope
# (engine/backend/native's search). VERSION is FyneApp.toml's. macOS and
# Windows packages are made on those systems: `go run $(FYNE_PKG) package
# -os darwin` (or `-os windows`), the library beside the executable.
VERSION   := $(shell sed -n 's/^ *Version *= *"\(.*\)"/\1/p' FyneApp.toml)
APP_ID    := $(shell sed -n 's/^ *ID *= *"\(.*\)"/\1/p' FyneApp.toml)
DIST      ?= dist
PREFIX    ?= $(HOME)/.local
FYNE_PKG  := fyne.io/tools/cmd/fyne@v1.7.4
# ARCH is Go's name for the machine, which is Debian's for amd64 and arm64.
ARCH      := $(shell $(GO) env GOARCH)
TARBALL   := kvscope-$(VERSION)-linux-$(ARCH).tar.xz
DEB       := kvscope_$(VERSION)_$(ARCH).deb
# xz for the tarball and the .deb (dpkg-deb is part of dpkg); the others
# are what the packaging test (test/install) needs to open the installed
# window under Xvfb and take its picture.
DIST_PKGS := xz-utils
INSTALL_TEST_PKGS := xz-utils xvfb x11-utils imagemagick
# The Debian packages of the libraries the window needs: libGL and libX11
# are linked; GLFW opens the other X11 extensions at run time (their names
# are in the binary: test/install checks them against this list).
DEB_DEPENDS := libc6, libgl1, libx11-6, libx11-xcb1, libxcursor1, libxi6, libxinerama1, libxrandr2, libxrender1, libxxf86vm1
# The native libraries that go with the binary: the CPU one, and CUDA's
# when `make cuda` built it.
DIST_LIBS  = $(NATIVE_LIB) $(wildcard native/build/libkvscope_cuda.so)
STAGE     := $(DIST)/stage
TREE      := $(STAGE)/tree/kvscope
# TREE_USR is the tree's usr folder in the recipes' shell: fyne package
# lays files out under usr/local, or under usr in some versions.
TREE_USR   = $$([ -d $(TREE)/usr/local ] && echo usr/local || echo usr)

.PHONY: dist dist-tree install uninstall
test: EXTRA_PKGS += $(INSTALL_TEST_PKGS)
dist dist-tree install: EXTRA_PKGS += $(DIST_PKGS)

# dist-tree builds the binary and lays out $(TREE) as the tarball holds it:
# fyne package's tarball (packed with xz -0: it is unpacked at once), with
# the libraries added and its Makefile's targets extended to install them.
# fyne package reads FyneApp.toml and the icon from a copy, as it adds one
# to the build number of the FyneApp.toml it reads (and rewrites the file).
dist-tree: deps $(NATIVE_LIB)
	@[ -n "$(VERSION)" ] || { echo "dist: no Version in FyneApp.toml"; exit 1; }
	rm -rf $(STAGE) && mkdir -p $(STAGE)/tree $(STAGE)/src/assets
	$(GO) build -ldflags "-s -w" -o $(STAGE)/kvscope .
	cp FyneApp.toml main.go $(STAGE)/src && cp assets/icon.png $(STAGE)/src/assets
	cd $(STAGE) && XZ_OPT=-0 $(GO) run $(FYNE_PKG) package -os linux -src $(abspath $(STAGE))/src -exe $(abspath $(STAGE))/kvscope
	tar -xJf $(STAGE)/kvscope.tar.xz -C $(STAGE)/tree
	@usr=$(TREE_USR); \
	install -Dm644 -t $(TREE)/$$usr/lib/kvscope $(DIST_LIBS) && \
	printf '%s\n' '' '# Added by kvscope: the native libraries, in PREFIX/lib/kvscope.' \
		'install: install-lib' 'uninstall: uninstall-lib' 'user-install: user-install-lib' 'user-uninstall: user-uninstall-lib' \
		'install-lib:' "	install -Dm00644 -t \$$(DESTDIR)\$$(PREFIX)/lib/kvscope $$usr/lib/kvscope/*" \
		'uninstall-lib:' '	-rm -r $$(DESTDIR)$$(PREFIX)/lib/kvscope' \
		'user-install-lib:' "	install -Dm00644 -t \$$(DESTDIR)\$$(HOME)/.local/lib/kvscope $$usr/lib/kvscope/*" \
		'user-uninstall-lib:' '	-rm -r $$(DESTDIR)$$(HOME)/.local/lib/kvscope' >> $(TREE)/Makefile

# dist packs $(TREE) as the tarball, and the same files, laid out for
# /usr, as the .deb.
dist: dist-tree
	tar -cJf $(DIST)/$(TARBALL) -C $(STAGE)/tree kvscope
	@usr=$(TREE_USR); deb=$(STAGE)/deb; \
	install -Dm755 $(TREE)/$$usr/bin/kvscope $$deb/usr/bin/kvscope && \
	install -Dm644 -t $$deb/usr/lib/kvscope $(TREE)/$$usr/lib/kvscope/* && \
	install -Dm644 $(TREE)/$$usr/share/applications/$(APP_ID).desktop $$deb/usr/share/applications/$(APP_ID).desktop && \
	install -Dm644 $(TREE)/$$usr/share/pixmaps/$(APP_ID).png $$deb/usr/share/icons/hicolor/256x256/apps/$(APP_ID).png && \
	mkdir -p $$deb/DEBIAN && \
	printf '%s\n' 'Package: kvscope' 'Version: $(VERSION)' 'Architecture: $(ARCH)' \
		'Maintainer: kvscope developers <kvscope@users.noreply.github.com>' \
		"Installed-Size: $$(du -sk $$deb/usr | cut -f1)" \
		'Depends: $(DEB_DEPENDS)' 'Section: utils' 'Priority: optional' \
		'Homepage: https://github.com/kvscope/kvscope' \
		'Description: chat with local GGUF language models and watch the KV cache' \
		' kvscope runs GGUF models in process (a pure Go engine, a native CPU' \
		' library and optional CUDA) and shows its paged KV cache at work.' > $$deb/DEBIAN/control && \
	dpkg-deb --root-owner-group --build $$deb $(DIST)/$(DEB) >/dev/null
	rm -rf $(STAGE)
	@echo "dist: $(DIST)/$(TARBALL) and $(DIST)/$(DEB)"

# install puts the binary in PREFIX/bin, the libraries in PREFIX/lib/kvscope,
# the desktop entry (its Exec the installed binary's full path, as a
# launcher's PATH may lack PREFIX/bin) and the icon under PREFIX/share.
install: dist-tree
	@usr=$(TREE_USR); \
	install -Dm755 $(TREE)/$$usr/bin/kvscope $(DESTDIR)$(PREFIX)/bin/kvscope && \
	install -Dm644 -t $(DESTDIR)$(PREFIX)/lib/kvscope $(TREE)/$$usr/lib/kvscope/* && \
	install -Dm644 $(TREE)/$$usr/share/pixmaps/$(APP_ID).png $(DESTDIR)$(PREFIX)/share/icons/hicolor/256x256/apps/$(APP_ID).png && \
	sed 's,^Exec=kvscope,Exec=$(PREFIX)/bin/kvscope,' $(TREE)/$$usr/share/applications/$(APP_ID).desktop > $(STAGE)/entry.desktop && \
	install -Dm644 $(STAGE)/entry.desktop $(DESTDIR)$(PREFIX)/share/applications/$(APP_ID).desktop
	rm -rf $(STAGE)
	@echo "installed kvscope in $(PREFIX) (make uninstall PREFIX=$(PREFIX) removes it)"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/kvscope $(DESTDIR)$(PREFIX)/share/applications/$(APP_ID).desktop \
		$(DESTDIR)$(PREFIX)/share/icons/hicolor/256x256/apps/$(APP_ID).png
	rm -rf $(DESTDIR)$(PREFIX)/lib/kvscope
