//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package command

import (
	"errors"
	"os"
	"syscall"
)

// lockDatabase takes, without waiting, the lock bbolt takes on its file
// (flock, exclusive): held is true while a process has the database open.
func lockDatabase(f *os.File) (held bool, err error) {
	fd := int(f.Fd()) // #nosec G115 -- a file descriptor fits in an int
	err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// lockThroughSwap: the lock is held until the copy is in place, so that a
// service started meanwhile waits for it.
const lockThroughSwap = true
