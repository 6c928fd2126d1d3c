// Package atomicfile creates a file that holds the whole of what was
// written into it or does not exist: written into a temporary file beside
// it, synced, then linked at its name. The backups (kv.DB.BackupFile, the
// CLI's backup) write their copies with it.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Create creates path, mode 0600, with what write writes into a temporary
// file beside it: the file is synced and linked at path only when write
// succeeds, and its directory synced after. An existing path is refused
// (an error matching os.ErrExist), before write runs and again when the
// file is linked: never replaced. The temporary file is removed whatever
// happens. It returns what write returned.
func Create(path string, write func(f *os.File) (int64, error)) (int64, error) {
	if _, err := os.Lstat(path); err == nil {
		return 0, exists(path)
	}
	return writeThen(path, write, func(tmp string) error {
		// A hard link publishes the file without replacing one that
		// appeared meanwhile (a rename would replace it); a file system
		// without links gets a rename after a last look.
		err := os.Link(tmp, path)
		if err == nil {
			return nil
		}
		if _, serr := os.Lstat(path); errors.Is(err, os.ErrExist) || serr == nil {
			return exists(path)
		}
		if rerr := os.Rename(tmp, path); rerr != nil {
			return fmt.Errorf("create %s: %w", path, errors.Join(err, rerr))
		}
		return nil
	})
}

// Replace is Create for a path that may exist: the file written takes its
// place in one rename, so that path names the old file or the whole new
// one at every moment, a crash included.
func Replace(path string, write func(f *os.File) (int64, error)) (int64, error) {
	return writeThen(path, write, func(tmp string) error {
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("replace %s: %w", path, err)
		}
		return nil
	})
}

// writeThen writes a temporary file beside path with write, syncs it,
// publishes it with publish, and syncs the directory.
func writeThen(path string, write func(f *os.File) (int64, error), publish func(tmp string) error) (n int64, err error) {
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
		_ = os.Remove(tmp.Name()) // gone already once published by a rename
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
	if err := publish(tmp.Name()); err != nil {
		return n, err
	}
	if err := syncDir(dir); err != nil {
		return n, fmt.Errorf("create %s: sync its directory: %w", path, err)
	}
	return n, nil
}

func exists(path string) error {
	return fmt.Errorf("create %s: %w (never replaced)", path, os.ErrExist)
}

// PaceBytes is how much Paced lets be written between two syncs.
const PaceBytes = 4 << 20

// Paced returns a writer to f that syncs it every PaceBytes written, so
// that a large copy's dirty pages never pile up: the file system's next
// journal commit, which a database's own commits wait for, would have to
// write them all. Measured with a 500 MB backup of a database taking
// durable writes (kv.DB.BackupFile): the longest write during the copy
// waited 0.5 s unpaced, 17-19 ms paced every 4 MiB (25-38 ms every 16 MiB,
// 76-100 ms every 64 MiB), the copy as fast.
func Paced(f *os.File) io.Writer { return &paced{f: f} }

type paced struct {
	f       *os.File
	pending int
}

func (p *paced) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	if p.pending += n; err == nil && p.pending >= PaceBytes {
		p.pending, err = 0, p.f.Sync()
	}
	return n, err
}
