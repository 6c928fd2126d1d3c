//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package kv

import (
	"os"
	"syscall"
)

// lockedForReading takes a shared lock on f (bbolt locks its file with
// flock, exclusively when writing), without waiting: ok is false when a
// writer holds the file. unlock releases it.
func lockedForReading(f *os.File) (unlock func(), ok bool) {
	fd := int(f.Fd()) // #nosec G115 -- a file descriptor fits in an int
	if syscall.Flock(fd, syscall.LOCK_SH|syscall.LOCK_NB) != nil {
		return nil, false
	}
	return func() { _ = syscall.Flock(fd, syscall.LOCK_UN) }, true
}

// mapFile maps the first size bytes of f read-only. Reading past the end
// of a file that shrank since is a memory fault: read it with
// debug.SetPanicOnFault set.
func mapFile(f *os.File, size int64) (data []byte, unmap func(), err error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, syscall.EINVAL
	}
	data, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED) // #nosec G115 -- checked above
	if err != nil {
		return nil, nil, err
	}
	return data, func() { _ = syscall.Munmap(data) }, nil
}
