//go:build !linux

package atomicfile

import "os"

// lock has no lock to take outside Linux: flock, the only other, is
// bbolt's own, which it takes on the same file (the copy's check, compact),
// and BSD systems and macOS tie byte-range locks to it. RemoveStale
// removes nothing there.
func lock(*os.File) (bool, error) { return false, errNoLocks }

// removesStale: RemoveStale looks at nothing. Even the open it would
// make to try a file's lock keeps, on Windows, a live writer from
// removing its own file (a sharing violation): seen as temporary files
// left by copies side by side, run under Wine.
const removesStale = false

// lockedThroughPublish: no lock to hold, and Windows renames no open file.
const lockedThroughPublish = false

// stagingSuffix: with no lock to take, the file is made under its final
// name.
const stagingSuffix = ".tmp"

// claim has nothing to do where there are no locks.
func claim(f *os.File, _ string) (*os.File, error) { return f, nil }
