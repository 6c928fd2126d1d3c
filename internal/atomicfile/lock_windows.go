package atomicfile

import (
	"errors"
	"os"
	"syscall"
)

// lock has no lock to take on Windows: its byte-range locks are
// mandatory, and would stop bbolt reading the copy (the CLI's check of
// it). A live writer's file is told from a dead one's otherwise: it is
// open, and Windows removes no file open without FILE_SHARE_DELETE (Go
// never asks for it). RemoveStale does not even open a file to look: its
// open would keep the writer from removing the file (a sharing
// violation), which left files behind when copies ran side by side.
func lock(*os.File) (bool, error) { return false, errNoLocks }

// staleBy: a file nobody has open, last written a minute ago or more.
const staleBy = byOpenAndAge

// inUse reports whether err is Windows refusing to remove a file another
// handle has open (or whose removal is under way).
func inUse(err error) bool {
	const errorSharingViolation = syscall.Errno(32)
	return errors.Is(err, errorSharingViolation) || errors.Is(err, syscall.ERROR_ACCESS_DENIED)
}

// lockedThroughPublish: Windows renames no open file, so the file is
// closed first. Between its close and its publishing it is not open: it
// was written a moment before, which the minute RemoveStale waits for
// covers.
const lockedThroughPublish = false

// stagingSuffix: with no lock to take, the file is made under its final
// name.
const stagingSuffix = ".tmp"

// claim has nothing to do where there are no locks.
func claim(f *os.File, _ string) (*os.File, error) { return f, nil }
