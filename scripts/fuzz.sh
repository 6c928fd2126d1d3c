#!/usr/bin/env bash
# Runs every fuzz target for the given time (default 10s). CI uses the
# default; a release run uses 10m:  ./scripts/fuzz.sh 10m
# FUZZ_TAGS adds build tags: FUZZ_TAGS=oncekv_rerun runs the targets in the
# rerun build, every transaction's function run twice (make fuzz-rerun).
#
# A target fails the run when the fuzzer finds something: it writes the
# failing input under testdata/fuzz/<Target>/. Go's fuzzing coordinator can
# also end a clean run with a bare "context deadline exceeded" when a worker
# is mid-exec as -fuzztime runs out (golang/go#75804, a race in
# internal/fuzz); that is reported as a flake, after the target's corpus is
# replayed deterministically to confirm nothing reproducible was found.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
tags=()
if [ -n "${FUZZ_TAGS:-}" ]; then tags=(-tags "$FUZZ_TAGS"); fi
flakes=0
for pkg in $(go list ./... ./cmd/oncekv/... ./examples/... ./etcdkv/...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($t)"
    corpus="$dir/testdata/fuzz/$target"
    before=$(ls "$corpus" 2>/dev/null | sort || true)
    out=$(mktemp)
    # A short minimisation budget: minimising every "interesting" input for
    # the default 60s stalls the workers and can fail a short run.
    if go test "${tags[@]}" "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$t" -fuzzminimizetime 1s 2>&1 | tee "$out"; then
      rm -f "$out"
      continue
    fi
    after=$(ls "$corpus" 2>/dev/null | sort || true)
    if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$out" &&
      ! grep -qE 'Failing input written|panic:|fuzzing process hung' "$out"; then
      rm -f "$out"
      echo "fuzz $target: bare deadline at the end of -fuzztime, no input written (golang/go#75804); replaying the corpus"
      go test "${tags[@]}" "$pkg" -run "^${target}\$" -count=1
      flakes=$((flakes + 1))
      continue
    fi
    rm -f "$out"
    echo "fuzz $target found a failing input (see $corpus)" >&2
    exit 1
  done
done
echo "fuzz: done ($flakes coordinator deadline flakes tolerated)"
