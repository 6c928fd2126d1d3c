//go:build !linux && !windows

package atomicfile

import "os"

// lock has no lock to take on macOS and the BSDs: flock, the only other,
// is bbolt's own, which it takes on the same file (the copy's check,
// compact), and they tie byte-range locks to it. RemoveStale removes
// nothing there.
func lock(*os.File) (bool, error) { return false, errNoLocks }

// staleBy: nothing tells a dead writer's file from a live one's here.
const staleBy = byNothing

// inUse is never asked here.
func inUse(error) bool { return false }

// lockedThroughPublish: no lock to hold.
const lockedThroughPublish = false

// stagingSuffix: with no lock to take, the file is made under its final
// name.
const stagingSuffix = ".tmp"

// claim has nothing to do where there are no locks.
func claim(f *os.File, _ string) (*os.File, error) { return f, nil }
