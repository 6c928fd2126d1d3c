.DEFAULT_GOAL := help

help: ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

MODULES := ./... ./cmd/oncekv/... ./examples/... ./bench/chart/... ./etcdkv/... ./otel/... ./internal/powercut/...

test: ## run the tests of every module (the README's command, then the etcd suite's short profile)
	go test ./... ./cmd/oncekv/... ./examples/... ./bench/chart/... ./otel/... ./internal/powercut/...
	go test -short ./etcdkv/...

race: ## run the tests under the race detector
	go test -race -count=1 ./... ./cmd/oncekv/... ./examples/... ./bench/chart/... ./otel/... ./internal/powercut/...
	go test -race -short -count=1 -skip 'TestLibrarySuitesOnEtcd|TestLibrarySuitesWithLostAnswers|TestLedgerLinearizableThroughEtcdFaults' ./etcdkv/...

rerun: ## the tests with every bbolt transaction run twice, the first rolled back (-tags oncekv_rerun: etcd's conflict reruns, at every transaction)
	go test -tags oncekv_rerun -count=1 ./... ./cmd/oncekv/... ./examples/... ./otel/...
	go test -tags oncekv_rerun -short -count=1 ./etcdkv/...

etcd-long: ## the etcd suite's long profile: the library's suites on a 3-member cluster at full size, the fault tests, the payments replicas
	go test -count=1 -timeout 30m -v ./etcdkv/...
	ONCEKV_REPLICAS_LONG=1 go test -count=1 -timeout 30m -v -run Replicas ./examples/payments/...

powerloss: ## power cuts under the durable workload (300), an HTTP service (200), backups and restores (300 each), the payments example (50), on powercut's FUSE filesystem (root, /dev/fuse)
	go build -o $${TMPDIR:-/tmp}/oncekv-powercut ./internal/powercut
	ONCEKV_POWERCUT=$${TMPDIR:-/tmp}/oncekv-powercut ONCEKV_REQUIRE_POWERCUT=1 ONCEKV_CRASH_CYCLES=100 go test -count=1 -timeout 30m -v -run 'PowerLoss' ./internal/crashtest ./examples/payments

fuzz-smoke: ## run every fuzz target for 6s (CI profile)
	./scripts/fuzz.sh 6s

crash: ## crash suite, CI profile: SIGKILL at every failpoint, 10 cycles each
	go test -tags failpoints -count=1 ./internal/crashtest

crash-long: ## crash suite, release profile: 100 cycles per failpoint
	ONCEKV_CRASH_CYCLES=100 go test -tags failpoints -count=1 -timeout 2h -v -run TestCrashAtEveryFailpoint ./internal/crashtest

fuzz-long: ## run every fuzz target for 10m (release profile)
	./scripts/fuzz.sh 10m

fuzz-rerun: ## run every fuzz target for 2m in the rerun build (every transaction's function run twice)
	FUZZ_TAGS=oncekv_rerun ./scripts/fuzz.sh 2m

bench: ## run the paired benchmarks (oncekv vs bare bbolt)
	go test ./bench -run '^$$' -bench . -benchtime 20000x

lint: ## gofmt, go vet, golangci-lint (staticcheck, errcheck, unused, gosec), goleak in every test package, doc.go and examples
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet $(MODULES)
	golangci-lint run $(MODULES)
	./scripts/leakcheck.sh
	./scripts/doccheck.sh

wine: ## run the library's and the CLI's tests as Windows programs under Wine (installs wine64 and MinGW; about 2.5 minutes after that)
	./scripts/wine.sh

cross: ## go vet every module for Windows and macOS (CI vets the library and the CLI for Windows)
	GOOS=windows go vet $(MODULES)
	GOOS=darwin go vet $(MODULES)

goals: ## measure the hot path's goals beside their floors, one table (about 3 minutes; a quiet machine)
	go run ./bench/goals -out $${TMPDIR:-/tmp}/oncekv-goals.md

mutate: ## mutation testing with gremlins over the library packages (slow: about an hour)
	./scripts/mutate.sh

chart: ## rerun the client sweep (1-128 clients, 200k rows preloaded, durable) and redraw bench/throughput.svg (about 10 minutes)
	go run ./cmd/oncekv bench --clients-list 1,2,4,8,16,32,64,128 --preload 200000 --duration 4s --keyed --bare-bolt-batch --floor --json > $${TMPDIR:-/tmp}/oncekv-sweep.json
	go run ./bench/chart -in $${TMPDIR:-/tmp}/oncekv-sweep.json -out bench/throughput.svg

bench-postgres: ## compare with PostgreSQL (claim + insert + complete) on a throwaway server started by the test (needs the postgresql package)
	ONCEKV_TEST_POSTGRES=1 go test -count=1 -run TestBenchAgainstPostgres -v ./cmd/oncekv/internal/command

docs-graph: ## redraw docs/packages.svg and the graph in docs/architecture.md from go list (needs Graphviz)
	./scripts/pkggraph.sh

ci: ## what CI runs
	bash .ci/run

.PHONY: help test race rerun fuzz-smoke fuzz-long fuzz-rerun crash crash-long powerloss bench goals lint cross mutate chart bench-postgres docs-graph etcd-long ci wine
