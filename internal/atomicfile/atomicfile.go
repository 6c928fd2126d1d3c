// Package atomicfile creates a file that holds the whole of what was
// written into it or does not exist: written into a temporary file beside
// it, synced, then linked at its name. The backups (kv.DB.BackupFile, the
// CLI's backup) write their copies with it.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Create creates path, mode 0600, with what write writes into a temporary
// file beside it: the file is synced and linked at path only when write
// succeeds, and its directory synced after. An existing path is refused
// (an error matching os.ErrExist), before write runs and again when the
// file is linked: never replaced. The temporary file is removed whatever
// happens. It returns what write returned.
func Create(path string, write func(f *os.File) (int64, error)) (n int64, err error) {
	if _, err := os.Lstat(path); err == nil {
		return 0, exists(path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}()
	if n, err = write(tmp); err != nil {
		return n, err
	}
	if err := tmp.Sync(); err != nil {
		return n, fmt.Errorf("create %s: sync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return n, fmt.Errorf("create %s: %w", path, err)
	}
	// A hard link publishes the file without replacing one that appeared
	// meanwhile (a rename would replace it); a file system without links
	// gets a rename after a last look.
	if err := os.Link(tmp.Name(), path); err != nil {
		if _, serr := os.Lstat(path); errors.Is(err, os.ErrExist) || serr == nil {
			return n, exists(path)
		}
		if rerr := os.Rename(tmp.Name(), path); rerr != nil {
			return n, fmt.Errorf("create %s: %w", path, errors.Join(err, rerr))
		}
	}
	if err := syncDir(dir); err != nil {
		return n, fmt.Errorf("create %s: sync its directory: %w", path, err)
	}
	return n, nil
}

func exists(path string) error {
	return fmt.Errorf("create %s: %w (never replaced)", path, os.ErrExist)
}
