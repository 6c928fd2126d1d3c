package command

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockDatabase takes, without waiting, the lock bbolt takes on its file
// on Windows (LockFileEx on the byte at offset 2^64-1, exclusive): held is
// true while a process has the database open.
func lockDatabase(f *os.File) (held bool, err error) {
	const m1 = 1<<32 - 1
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_FAIL_IMMEDIATELY|windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0,
		&windows.Overlapped{Offset: m1, OffsetHigh: m1})
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return true, nil
	}
	return false, err
}

// lockThroughSwap is false: Windows renames nothing over a file that is
// open, so the lock goes with the file's handle once the old file has its
// second name, before the copy takes its place.
const lockThroughSwap = false
