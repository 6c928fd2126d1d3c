#!/usr/bin/env bash
# Runs every fuzz target for the given time (default 10s). CI uses the
# default; a release run uses 10m:  ./scripts/fuzz.sh 10m
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
for pkg in $(go list ./... ./cmd/oncekv/... ./examples/...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($t)"
    # A short minimisation budget: minimising every "interesting" input for
    # the default 60s stalls the workers and can fail a short run.
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$t" -fuzzminimizetime 1s
  done
done
