#!/usr/bin/env bash
# Compare the benchmarks of two commits with benchstat, on this machine, in
# one run:
#
#   ./scripts/benchcompare.sh HEAD~1 HEAD ['SingleTx|ReplayHit'] [count]
#
# Each commit is checked out into a temporary worktree; its bench package
# and the `oncekv bench` harness (--gobench) run COUNT times (default 6),
# alternating between the two commits so both see the same machine.
set -euo pipefail
old=${1:?old commit}; new=${2:?new commit}
pattern=${3:-.}; count=${4:-6}
root=$(git rev-parse --show-toplevel)
work=$(mktemp -d); trap 'git -C "$root" worktree remove --force "$work/old" 2>/dev/null; git -C "$root" worktree remove --force "$work/new" 2>/dev/null; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/old" "$old" >/dev/null
git -C "$root" worktree add --detach "$work/new" "$new" >/dev/null
for i in $(seq "$count"); do
  for side in old new; do
    echo "run $i/$count: $side" >&2
    (cd "$work/$side" && go test ./bench -run '^$' -bench "$pattern" -benchtime 10000x -count 1) >> "$work/$side.txt"
    (cd "$work/$side" && go run ./cmd/oncekv bench --duration 2s --clients 64 --gobench) >> "$work/$side.txt" 2>/dev/null || true
  done
done
BENCHSTAT=${BENCHSTAT:-"go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da"}
$BENCHSTAT "$work/old.txt" "$work/new.txt"
