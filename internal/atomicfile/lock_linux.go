package atomicfile

import (
	"errors"
	"fmt"
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

// staleBy: RemoveStale tries the lock of every temporary file it finds.
const staleBy = byLock

// inUse is never asked here.
func inUse(error) bool { return false }

// lockedThroughPublish: the temporary file stays open, its lock held,
// until it is linked or renamed at its name.
const lockedThroughPublish = true

// stagingSuffix ends the name Temp makes a file under, before it is
// locked.
const stagingSuffix = ".new"

// claim locks f, made under its staging name, and links it at final (a
// name another writer's file may hold already: errNameTaken), then
// removes the staging name. It returns the file under its final name: a
// duplicate of f's descriptor, sharing its open file description and so
// its lock (f is closed).
func claim(f *os.File, final string) (*os.File, error) {
	ok, err := lock(f)
	if errors.Is(err, errNoLocks) {
		err = nil // nothing here tells live from dead: none is removed
	} else if err == nil && !ok {
		err = fmt.Errorf("%s is locked by another process", f.Name())
	}
	if err != nil {
		return nil, err
	}
	// A link, not a rename: a rename would replace a live writer's file
	// whose random part happened to be the same.
	if err := publishName(f.Name(), final); err != nil {
		return nil, err
	}
	fd, err := syscall.Dup(int(f.Fd())) // #nosec G115 -- a file descriptor fits in an int
	if err != nil {
		_ = os.Remove(final) // the caller removes it under its staging name
		return nil, err
	}
	_ = os.Remove(f.Name())                    // its staging name; a clean-up would take it in a minute
	_ = f.Close()                              // the lock stays with the duplicate
	return os.NewFile(uintptr(fd), final), nil // #nosec G115 -- a descriptor is not negative
}

// publishName gives the file at staging the name final too, never taking
// a name that exists (errNameTaken); a file system without hard links
// gets a rename after a last look.
func publishName(staging, final string) error {
	err := link(staging, final)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrExist):
		return errNameTaken
	}
	if _, serr := os.Lstat(final); serr == nil {
		return errNameTaken
	}
	if rerr := os.Rename(staging, final); rerr != nil {
		return errors.Join(err, rerr)
	}
	return nil // claim's removal of the staging name finds nothing
}
