//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package atomicfile

import "os"

// SyncDir makes the names just linked in dir durable (a file created
// there, a rename into it).
func SyncDir(dir string) error {
	d, err := os.Open(dir) // #nosec G304 -- the caller's own directory
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
