//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package atomicfile

// SyncDir does nothing where a directory cannot be synced (Windows): the
// link's durability is the file system's.
func SyncDir(string) error { return nil }
