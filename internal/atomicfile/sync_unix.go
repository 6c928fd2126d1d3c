//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package atomicfile

import "os"

// syncDir makes a name just linked in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir) // #nosec G304 -- the caller's own directory
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
