//go:build linux || darwin

package kv

import "syscall"

// freeBytes returns the bytes the file system holding path has available
// to an unprivileged writer, and whether it could tell.
func freeBytes(path string) (uint64, bool) {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true // #nosec G115 -- a block size is positive
}
