#!/usr/bin/env bash
# make wine: runs the tests of the library and of the CLI as Windows
# programs, under Wine, on this Linux machine. CI only builds and vets for
# Windows (go vet with GOOS=windows); this runs the code there: the
# restore's LockFileEx, the copies' temporary files, TerminateProcess as
# the crash points' kill. About 2.5 minutes on a warm build cache. Needs
# root (apt-get) the first time: it installs wine64 and a MinGW compiler.
#
# Usage: ./scripts/wine.sh [package ...]   (default: every library package
# and the CLI's tests)
#
# Two things Wine 8 (Debian 12) lacks are made up for, in this run only:
#   - Go programs need ProcessPrng from bcryptprimitives.dll (Windows 10
#     and later): a small DLL (scripts/wine/bcryptprimitives.c) gives it
#     over RtlGenRandom;
#   - os.RemoveAll (every test's TempDir) deletes with
#     FileDispositionInformationEx, which Wine answers "not implemented",
#     a status Go falls back from only on Windows's own answers: an
#     overlay of the standard library's file (go build -overlay) adds
#     Wine's.
# Tests that cannot hold under Wine are skipped here by name (wineSkip):
# Wine run as root opens a read-only file for writing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v wine64 >/dev/null 2>&1 && [ ! -x /usr/lib/wine/wine64 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wine64 >/dev/null
fi
if ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc-mingw-w64-x86-64 >/dev/null
fi
wine=$(command -v wine64 || echo /usr/lib/wine/wine64)

work=${TMPDIR:-/tmp}/oncekv-wine
mkdir -p "$work/bin"
export WINEPREFIX="$work/prefix" WINEDEBUG=-all

# The prefix, and the DLL in it.
"$wine" cmd /c exit >/dev/null 2>&1 || true
x86_64-w64-mingw32-gcc -shared -o "$work/bcryptprimitives.dll" scripts/wine/bcryptprimitives.c scripts/wine/bcryptprimitives.def
cp "$work/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"

# The overlay.
at="$(go env GOROOT)/src/internal/syscall/windows/at_windows.go"
fallback='STATUS_NOT_SUPPORTED:     // the file system'
if ! grep -q "$fallback" "$at"; then
  echo "wine.sh: $at has changed; update the overlay's edit" >&2
  exit 1
fi
sed "s|$fallback|STATUS_NOT_SUPPORTED, NTStatus(0xC0000002), NTStatus(0xC0000010): // Wine's; the file system|" "$at" >"$work/at_windows.go"
printf '{"Replace":{"%s":"%s"}}\n' "$at" "$work/at_windows.go" >"$work/overlay.json"

wineSkip='^(TestOpenReadOnlyFileForWriting)$'

pkgs=("$@")
if [ ${#pkgs[@]} -eq 0 ]; then
  # The packages with tests for Windows (a package's _linux tests alone build no binary).
  mapfile -t pkgs < <(GOOS=windows go list -f '{{if .TestGoFiles}}{{.Dir}}{{else if .XTestGoFiles}}{{.Dir}}{{end}}' ./... ./cmd/oncekv/...)
fi
failed=()
for dir in "${pkgs[@]}"; do
  dir=$(cd "$dir" && pwd)
  bin="$work/bin/$(echo "${dir#"$PWD"}" | tr '/' '_').exe"
  GOOS=windows go test -overlay "$work/overlay.json" -c -o "$bin" "$dir"
  start=$SECONDS
  # Each test binary runs in its package's directory, as go test runs it.
  if (cd "$dir" && timeout 600 "$wine" "$bin" -test.timeout 300s -test.skip "$wineSkip" >"$bin.log" 2>&1); then
    echo "ok    ${dir#"$PWD"/} ($((SECONDS - start))s)"
  else
    echo "FAIL  ${dir#"$PWD"/} ($((SECONDS - start))s): $bin.log"
    grep -A8 -- '--- FAIL' "$bin.log" | head -40 || tail -20 "$bin.log"
    failed+=("$dir")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "wine.sh: ${#failed[@]} package(s) failed under Wine" >&2
  exit 1
fi
echo "wine.sh: every package passed under Wine"
