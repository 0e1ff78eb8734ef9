# Tabcast — see README.md. `make help` lists the targets.
SHELL   := /bin/bash
GO      ?= go
BIN     := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
PLUGINS := capture-cdp capture-tab encoder-ffmpeg auth-local turnd
PROTOS  := base capture encoder auth turn
# Debian 12 packages a fresh machine lacks. ffmpeg (the CLI) is for the
# benchmark's baseline; protobuf-compiler for `make proto` and its test.
APT_PKGS := chromium libavcodec-dev libavformat-dev libavutil-dev libswscale-dev \
            libavfilter-dev libavdevice-dev libswresample-dev pkg-config ffmpeg \
            protobuf-compiler ca-certificates \
            iproute2 nftables iptables coturn
# What `make image` and `make image-test` need besides: the image build's
# tools (no loop devices, no mounts) and QEMU/OVMF for the boot test.
IMAGE_PKGS := mmdebstrap fdisk e2fsprogs dosfstools mtools zstd \
              qemu-system-x86 qemu-utils ovmf openssh-client
# Package tests run one at a time: several suites start Chromium and encode
# video, and on a 2-core box running them side by side only makes each
# slower and their deadlines noisier.
TESTFLAGS ?= -count=1 -p 1 -timeout 40m

.PHONY: help deps apt-node npm-deps image-deps build run test test-unit vet bench proto image image-test clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# apt-install installs the Debian packages of $(1) that are missing.
define apt-install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "$@: all present"; exit 0; fi; \
	cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$(echo $$missing)"; \
	if [ "$$(id -u)" != 0 ]; then echo "$@: missing: $$missing"; echo "$@: run as root: $$cmd"; exit 1; fi; \
	echo "$@: installing: $$missing"; eval "$$cmd"
endef

deps: ## install the Debian packages Tabcast needs (idempotent)
	$(call apt-install,$(APT_PKGS))
	@if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled coturn >/dev/null 2>&1; then \
	  echo "deps: coturn is only the benchmark's baseline: stopping its service (it would hold 3478)"; \
	  systemctl disable --now coturn >/dev/null 2>&1 || true; fi

# The CDP test clients (playwright-core, puppeteer-core) at the versions
# pinned in test/npm/package-lock.json. --ignore-scripts and the SKIP
# variables: no install script runs and no browser is downloaded; the
# clients drive the appliance's own Chromium through its CDP endpoint.
# Skipped when node_modules matches the lock file already.
NPM_DIR := test/npm
npm-deps: ## install the e2e tests' and bench's CDP clients from npm (pinned, no browser download)
	@command -v npm >/dev/null 2>&1 || $(MAKE) --no-print-directory apt-node
	@if [ -f $(NPM_DIR)/node_modules/.package-lock.json ] && cmp -s <(sed -n '/"packages"/,$$p' $(NPM_DIR)/package-lock.json | grep -v '"": {' | grep '"node_modules/' ) <(grep '"node_modules/' $(NPM_DIR)/node_modules/.package-lock.json); then \
	  echo "npm-deps: all present"; else \
	  cd $(NPM_DIR) && PUPPETEER_SKIP_DOWNLOAD=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund; fi

# Debian's Node.js and npm, only when the machine has no npm (a machine
# with its own Node.js, e.g. NodeSource's, keeps it).
apt-node:
	$(call apt-install,nodejs npm)

image-deps: ## install what the image build and its boot test need (idempotent)
	$(call apt-install,$(IMAGE_PKGS))

build: ## build tabcast and every plugin into bin/
	@mkdir -p $(BIN)
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/tabcast ./appliance
	@for p in $(PLUGINS); do echo "$(GO) build -o $(BIN)/$$p ./$$p"; $(GO) build -o $(BIN)/$$p ./$$p || exit 1; done

run: deps build ## set up and start the appliance on its embedded defaults
	$(BIN)/tabcast run

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags imagetest ./test/image

test: deps npm-deps build vet ## set up and run every test (unit, plugin processes, end to end)
	TABCAST_BIN=$(CURDIR)/$(BIN) $(GO) test $(TESTFLAGS) ./...

# test-unit is `go test -short`: internal/testenv skips each test that
# launches Chromium or makes network namespaces; `make test` runs them all.
test-unit: build ## the fast loop (-short): skips test/e2e and every test needing Chromium or network namespaces
	TABCAST_BIN=$(CURDIR)/$(BIN) $(GO) test -short $(TESTFLAGS) $$($(GO) list ./... | grep -v '/test/e2e$$')

bench: deps npm-deps build ## measure the media path (figures, never pass/fail)
	TABCAST_BIN=$(CURDIR)/$(BIN) $(GO) run ./bench

proto: ## regenerate the plugin protos (committed)
	@for p in $(PROTOS); do \
	  protoc -I plugins/$$p/proto \
	    --plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" \
	    --plugin=protoc-gen-go-grpc="$$($(GO) tool -n protoc-gen-go-grpc)" \
	    --go_out=paths=source_relative:plugins/$$p/proto \
	    --go-grpc_out=paths=source_relative:plugins/$$p/proto \
	    plugins/$$p/proto/$$p.proto || exit 1; done

image: deps image-deps build ## build the flashable appliance image (see image/README.md)
	VERSION=$(VERSION) BIN=$(CURDIR)/$(BIN) OUT=$(CURDIR)/dist image/build.sh

# IMAGE_REUSE=1 tests the image built last instead of building one.
# IMAGE_ACCEL=kvm|tcg forces the guest's accelerator (no fallback); by
# default KVM where /dev/kvm opens, falling back to TCG when a KVM boot
# aborts before the guest's first output (test/image/qemu_test.go).
IMAGE_ACCEL ?=
image-test: ## build the image, check its files (image/test.sh), boot and update it in QEMU (test/image)
	@if [ -z "$(IMAGE_REUSE)" ]; then $(MAKE) --no-print-directory image; else $(MAKE) --no-print-directory deps image-deps build; fi
	OUT=$(CURDIR)/dist image/test.sh
	TABCAST_BIN=$(CURDIR)/$(BIN) TABCAST_IMAGE_ACCEL=$(IMAGE_ACCEL) $(GO) test -tags imagetest -count=1 -v -timeout 60m ./test/image

clean:
	rm -rf $(BIN) dist
