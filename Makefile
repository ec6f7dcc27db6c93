# fero's front door. `make help` lists the targets.

GO            ?= go
BIN           := $(CURDIR)/.bin
STATICCHECK   := $(BIN)/staticcheck
# Pinned: staticcheck 2026.1 (module version v0.7.0).
STATICCHECK_VERSION := v0.7.0
# Fuzz budget per target, in executions: a short pass in `make test`, a
# long one in `make fuzz`. Counts, not durations: with a duration, Go 1.26's
# fuzz coordinator can fail a target with "context deadline exceeded" as the
# time runs out (golang/go#75804, fixed in Go 1.27).
FUZZTIME_SHORT ?= 30000x
# FuzzSchedules's share of the short pass: at ~100 execs/s on a loaded
# machine, 30,000 took 6 of make test's 17 minutes.
FUZZTIME_SCHEDULES_SHORT ?= 10000x
FUZZTIME       ?= 10000000x
# FuzzSchedules simulates a whole cluster per input (~100 execs/s).
FUZZTIME_SCHEDULES ?= 100000x
# The long pass minimizes each new input for at most this long (go test's
# default, a minute, held FuzzApply to ~900 execs/s while it kept finding
# coverage; at 5s it ran ~3,700/s: docs/security.md).
FUZZMINIMIZETIME ?= 5s
# The short pass does not minimize: new schedule operations made
# FuzzSchedules find ~170 new inputs in its 10,000 execs against the
# corpus it had, and minimizing each (a minute at most, go test's
# default) took its short pass from 3 minutes to more than 14. A failing input is
# saved as found; `go test -run` replays it all the same.
FUZZMINIMIZETIME_SHORT ?= 0
TEST_TIMEOUT   ?= 20m
# The fault suite (cmd/fero-chaos; needs root, iproute2, nftables). A full
# run is bounded by CHAOS_MAX_TIME: seeds left out fail it. Each seed's
# output goes to .chaos/<run>/seed-<seed>-n<servers>.
CHAOS_SEEDS    ?= 1-250
CHAOS_NODES    ?= 3,5
CHAOS_CLIENTS  ?= 2
CHAOS_DURATION ?= 18s
CHAOS_SETTLE   ?= 6s
CHAOS_MAX_TIME ?= 2h
CHAOS_PARALLEL ?= 3
CHAOS_ARGS     ?=
CHAOS_OUT      ?= .chaos/$(shell date +%Y%m%d-%H%M%S)
# Which seeds' servers keep data directories (off, on, odd): odd-numbered
# ones by default, so the suite runs with durability on and off.
CHAOS_DATA_DIRS ?= odd
# Whole-cluster SIGKILL rounds of TestWholeClusterSIGKILL in make chaos.
CHAOS_SIGKILL_ROUNDS ?= 20

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Quick start: a three-process fero cluster on loopback replicates writes to every node, and keeps them through a SIGKILL of all three.
	@GO=$(GO) BIN=$(BIN) ./scripts/demo.sh

.PHONY: test
test: vet ## vet, the race-enabled short test suite, a short fuzz pass and a short slice of the fault suite (the CI command).
	$(GO) test -race -short -timeout $(TEST_TIMEOUT) ./...
	FUZZTIME_SCHEDULES=$(FUZZTIME_SCHEDULES_SHORT) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME_SHORT) ./scripts/fuzz.sh $(FUZZTIME_SHORT)
	$(MAKE) chaos-short

.PHONY: test-long
test-long: vet ## The full suite with -race, including the large cluster and scale tests.
	$(GO) test -race -timeout 90m ./...

.PHONY: test-multicast
test-multicast: ## Real UDP multicast discovery in a network namespace of its own (needs root, iproute2).
	./scripts/multicast-test.sh

.PHONY: chaos
chaos: ## The fault suite: CHAOS_SEEDS schedules on real processes and namespaces (needs root, ip, nft, tc), then CHAOS_SIGKILL_ROUNDS whole-cluster SIGKILLs.
	./scripts/chaos.sh full --seeds $(CHAOS_SEEDS) --nodes $(CHAOS_NODES) --clients $(CHAOS_CLIENTS) \
		--duration $(CHAOS_DURATION) --settle $(CHAOS_SETTLE) --max-time $(CHAOS_MAX_TIME) --parallel $(CHAOS_PARALLEL) \
		--data-dirs $(CHAOS_DATA_DIRS) --out $(CHAOS_OUT) $(CHAOS_ARGS)
	FERO_SIGKILL_ROUNDS=$(CHAOS_SIGKILL_ROUNDS) $(GO) test -count=1 -timeout 30m -run TestWholeClusterSIGKILL -v ./cmd/fero

.PHONY: chaos-scenarios
chaos-scenarios: ## Regression cases on real processes: paused-owner 50 runs, long-split 20 (issue 16), oneway 10 (issue 42) (needs root, ip, nft, tc).
	@out=.chaos/scenarios-$$(date +%Y%m%d-%H%M%S); rc=0; \
	./scripts/chaos.sh full --scenario paused-owner --seeds 1-50 --nodes 3 --clients 2 --settle 6s --parallel $(CHAOS_PARALLEL) \
		--max-time 45m --out $$out/paused-owner $(CHAOS_ARGS) || rc=1; \
	./scripts/chaos.sh full --scenario long-split --seeds 1-20 --nodes 3 --clients 2 --settle 6s --converge 2m --parallel $(CHAOS_PARALLEL) \
		--max-time 45m --out $$out/long-split $(CHAOS_ARGS) || rc=1; \
	./scripts/chaos.sh full --scenario oneway --seeds 1-10 --nodes 3 --clients 2 --settle 6s --converge 2m --parallel 1 \
		--max-time 20m --out $$out/oneway $(CHAOS_ARGS) || rc=1; \
	exit $$rc

.PHONY: soak
soak: ## Issue 17's soak: a fixed load at 80% of the open-loop max for SOAK_DURATION (10m), alone then beside fero-hostile; RSS sampled.
	./scripts/soak.sh

# The hostile soak's phases (issue 42): quiet, then attacked, each this long.
SOAK_PHASE ?= 10m
SOAK_OUT   ?= .soak/hostile-$(shell date +%Y%m%d-%H%M%S)
# The attackers stand for other hosts: SCHED_IDLE, pinned to CPU 1 (on a
# kernel without in-kernel preemption their system calls would hold any
# CPU they run on; docs/security.md). SOAK_ARGS= runs them at nice 19 on
# any CPU; SOAK_ARGS=--decoy is the control run.
SOAK_ARGS  ?= --idle --attacker-cpus 1

.PHONY: soak-hostile
soak-hostile: ## Issue 42's hostile soak in namespaces (needs root, ip): SOAK_PHASE quiet then SOAK_PHASE attacked from 5 addresses, with the secret, then over TLS.
	$(GO) build -o $(BIN)/fero-chaos ./cmd/fero-chaos
	@rc=0; \
	$(BIN)/fero-chaos soak --phase $(SOAK_PHASE) $(SOAK_ARGS) --out $(SOAK_OUT)/secret || rc=1; \
	$(BIN)/fero-chaos soak --phase $(SOAK_PHASE) $(SOAK_ARGS) --tls --out $(SOAK_OUT)/tls || rc=1; \
	exit $$rc

# The rolling upgrade (issue 43): three servers start on the build of
# UPGRADE_FROM, a commit of this repository (built from a git worktree;
# needs the history, not a shallow clone), and are upgraded one at a time
# to this build under Majority writers through every server and, by seed,
# the counter or the register workload.
UPGRADE_FROM  ?= 0a70971
UPGRADE_SEEDS ?= 1-4
UPGRADE_OUT   ?= .chaos/upgrade-$(shell date +%Y%m%d-%H%M%S)

.PHONY: upgrade
upgrade: ## Issue 43's rolling upgrade in namespaces (needs root, ip, git history): 3 servers on UPGRADE_FROM upgraded one by one to this build, under writes.
	$(GO) build -o $(BIN)/fero-chaos ./cmd/fero-chaos
	$(BIN)/fero-chaos run --scenario upgrade --upgrade-from $(UPGRADE_FROM) --workload register,counter \
		--seeds $(UPGRADE_SEEDS) --parallel 2 --out $(UPGRADE_OUT)

.PHONY: image
image: ## fero's container image FROM scratch (ENGINE=docker or podman, IMAGE=fero:latest); nothing pulled.
	./scripts/image.sh

.PHONY: test-container
test-container: ## The image in containers (needs docker, or Debian's docker.io, whose dockerd it starts): 3 on one network with the secret, writes, SIGKILL all, restart, same keys.
	./scripts/container-test.sh

.PHONY: chaos-short
chaos-short: ## A short seeded slice of the fault suite, under 3 minutes; skips, saying why, without root or tools.
	./scripts/chaos.sh short --seeds 1-4 --nodes 3,5 --clients 2 --duration 15s --settle 5s --parallel 2 \
		--data-dirs $(CHAOS_DATA_DIRS) --max-time 150s --out .chaos/short-$(shell date +%Y%m%d-%H%M%S) $(CHAOS_ARGS)

.PHONY: vet
vet: ## go vet over every package.
	$(GO) vet ./...

.PHONY: lint
lint: vet $(STATICCHECK) ## gofmt, vet and staticcheck (installed into .bin at a pinned version).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting" >&2; exit 1)
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(BIN) GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: fuzz
fuzz: ## Every fuzz target for FUZZTIME executions each (10^7; FuzzSchedules FUZZTIME_SCHEDULES, 10^5): about 13 hours on 2 cores (docs/security.md).
	FUZZTIME_SCHEDULES=$(FUZZTIME_SCHEDULES) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) ./scripts/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: ## fero beside the echo floor, Redis (both drivers) and fero 1.7.1 in one run, ending with the speed targets as ratios (~4 min).
	GO=$(GO) ./scripts/bench.sh

.PHONY: bench-micro
bench-micro: ## Go micro-benchmarks (benchstat-ready, -count=5) and the transport's short profile.
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./internal/... | tee bench.out
	$(GO) run ./cmd/fero-bench transport --short

.PHONY: generate
generate: ## Regenerate every generated file.
	$(GO) generate ./...

.PHONY: checkgenerate
checkgenerate: generate ## Fail if generated files are stale.
	@git diff --exit-code -- . || (echo "generated files are stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain --untracked-files=all -- . | grep -v '^??.*\.bin/')" || (git status --short; echo "generate produced untracked files" >&2; exit 1)

.PHONY: tidy-check
tidy-check: ## Fail if go.mod/go.sum are not tidy.
	$(GO) mod tidy -diff

.PHONY: clean
clean: ## Remove build and tool output.
	rm -rf $(BIN) bench.out
