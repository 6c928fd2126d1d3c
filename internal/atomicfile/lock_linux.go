package atomicfile

import (
	"errors"
	"os"
	"syscall"
)

// fOFDSetLk is F_OFD_SETLK (Linux 3.15): a lock owned by the open file
// description, not by the process, so that two files open in one process
// conflict as two processes' do.
const fOFDSetLk = 37

// lock takes an exclusive lock on f without waiting: false when another
// open file holds it. It lasts until f is closed (or its process dies).
// It is an open-file-description lock, which on Linux does not interact
// with flock: bbolt, opening the same file (the copy's check, compact),
// takes its flock as if there were none.
func lock(f *os.File) (bool, error) {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0} // the whole file
	err := syscall.FcntlFlock(f.Fd(), fOFDSetLk, &lk)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
		return false, nil
	case errors.Is(err, syscall.EINVAL):
		return false, errNoLocks // a kernel before 3.15
	}
	return false, err
}
