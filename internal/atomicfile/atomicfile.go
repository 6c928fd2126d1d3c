package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
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
		err := link(tmp, path)
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
	tmp, err := Temp(dir, base)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("create %s: no directory %s (%w)", path, filepath.Clean(dir), os.ErrNotExist)
	}
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		// The name goes first, while the file is still open and locked:
		// a clean-up in the directory never sees it unlocked. Where an
		// open file cannot be removed (Windows), it goes once closed. A
		// rename that published it took the name already.
		gone := os.Remove(tmp.Name())
		_ = tmp.Close()
		if gone != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if n, err = write(tmp); err != nil {
		return n, err
	}
	if err := tmp.Sync(); err != nil {
		return n, fmt.Errorf("create %s: sync: %w", path, err)
	}
	// Where a lock keeps other writers' clean-ups off it, the file stays
	// open (locked) until it is published: closed first, another writer
	// starting in this directory could take it for a dead one's and remove
	// it between the two. Elsewhere it is closed first, as Windows renames
	// no open file (and nothing there removes another's).
	if !lockedThroughPublish {
		if err := tmp.Close(); err != nil {
			return n, fmt.Errorf("create %s: %w", path, err)
		}
	}
	if err := publish(tmp.Name()); err != nil {
		return n, err
	}
	if err := SyncDir(dir); err != nil {
		return n, fmt.Errorf("create %s: sync its directory: %w", path, err)
	}
	return n, nil
}

// marker is in every temporary file's name, between the name it stands
// for and its random part: RemoveStale removes only files that carry it.
const marker = ".oncekv-"

// staleAfter is how old a file still being set up (".new") must be before
// RemoveStale takes its writer for dead: setting up takes microseconds.
const staleAfter = time.Minute

// Temp creates a temporary file in dir, named ".NAME.oncekv-RANDOM.tmp"
// and locked for as long as it is open, after removing the files of
// writers killed in dir (RemoveStale; what it fails to remove is left).
// The caller closes and removes it.
//
// Where locks tell a live writer from a dead one (Linux), the file is
// made under a name RemoveStale leaves alone for a minute
// (".NAME.oncekv-RANDOM.new"), locked, and only then given its ".tmp"
// name: a ".tmp" file is always locked while its writer lives, so that a
// clean-up starting at any moment never takes it.
func Temp(dir, name string) (*os.File, error) {
	_, _ = RemoveStale(dir)
	for attempt := 1; ; attempt++ {
		f, err := os.CreateTemp(dir, "."+name+marker+"*"+stagingSuffix)
		if err != nil {
			return nil, err
		}
		final := strings.TrimSuffix(f.Name(), stagingSuffix) + ".tmp"
		g, err := claim(f, final)
		if err == nil {
			return g, nil
		}
		_ = f.Close()
		_ = os.Remove(f.Name())
		if !errors.Is(err, errNameTaken) || attempt == 10 {
			return nil, fmt.Errorf("set up %s: %w", final, err)
		}
		// Another writer's file has the name: draw another.
	}
}

// errNameTaken is claim's answer when another writer's temporary file
// has the name drawn: Temp draws another.
var errNameTaken = errors.New("atomicfile: a temporary file of that name exists")

// link is os.Link (a variable for tests: a file system without links).
var link = os.Link

// named reports whether f's name still leads to f.
func named(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	li, err := os.Lstat(f.Name())
	return err == nil && os.SameFile(fi, li)
}

// errNoLocks is lock's answer where no lock tells a live writer's file
// from a dead one's.
var errNoLocks = errors.New("atomicfile: no open-file-description locks here")

// Removed is a temporary file RemoveStale removed.
type Removed struct {
	Path string
	Size int64 // its size when removed: the disk space it gave back
}

// How RemoveStale tells a dead writer's file from a live one's (staleBy,
// per system).
const (
	byNothing    = iota // it does not: nothing is removed (macOS, the BSDs)
	byLock              // its writer's lock is free (Linux)
	byOpenAndAge        // nobody has it open, and it is a minute old (Windows)
)

// RemoveStale removes from dir the temporary files of writers that died
// before finishing (killed, or the machine stopped): on Linux those whose
// lock no open file holds (and, for one still being set up, older than a
// minute); on Windows those nobody has open, last written a minute ago or
// more. It returns what it removed. Where nothing tells (macOS, the BSDs,
// a Linux before 3.15) it removes nothing.
func RemoveStale(dir string) ([]Removed, error) {
	if staleBy == byNothing {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []Removed
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		var minAge time.Duration
		switch {
		case isTemp(name, ".tmp"):
		case isTemp(name, ".new"):
			minAge = staleAfter
		default:
			continue
		}
		path := filepath.Join(dir, name)
		switch size, ok, err := removeIfStale(path, minAge); {
		case err != nil:
			errs = append(errs, err)
		case ok:
			removed = append(removed, Removed{Path: path, Size: size})
		}
	}
	return removed, errors.Join(errs...)
}

// isTemp reports whether name is one Temp makes: ".NAME.oncekv-DIGITS"
// and suffix (os.CreateTemp's random part is decimal).
func isTemp(name, suffix string) bool {
	rest, ok := strings.CutSuffix(name, suffix)
	i := strings.LastIndex(rest, marker)
	if !ok || !strings.HasPrefix(name, ".") || i < 1 || i+len(marker) == len(rest) {
		return false
	}
	for _, c := range rest[i+len(marker):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// removeIfStale removes path if no open file holds its lock and it was
// last written minAge ago or more, holding the lock itself meanwhile so
// that no writer takes the file back, and returns its size.
func removeIfStale(path string, minAge time.Duration) (int64, bool, error) {
	if staleBy == byOpenAndAge {
		return removeIfUnopened(path, max(minAge, staleAfter))
	}
	// The age first, without touching the lock: a writer setting its file
	// up must find it free.
	if li, err := os.Lstat(path); err != nil || time.Since(li.ModTime()) < minAge {
		return 0, false, nil // gone already, or too young
	}
	// Open for writing, which a write lock asks for; nothing is written.
	f, err := os.OpenFile(path, os.O_RDWR, 0) // #nosec G304 -- a temporary file of ours, found in the caller's directory
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil // its writer finished, or another clean-up came first
	}
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = f.Close() }()
	ok, err := lock(f)
	if errors.Is(err, errNoLocks) {
		return 0, false, nil
	}
	if err != nil || !ok || !named(f) {
		return 0, false, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, false, err
	}
	return fi.Size(), true, nil
}

// removeIfUnopened removes path if it was last written minAge ago or
// more and the system refuses to remove no file open elsewhere (Windows),
// and returns its size. A file some handle has open is left.
func removeIfUnopened(path string, minAge time.Duration) (int64, bool, error) {
	li, err := os.Lstat(path)
	if err != nil || !li.Mode().IsRegular() || time.Since(li.ModTime()) < minAge {
		return 0, false, nil // gone already, or not a file, or too young
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) || inUse(err) {
			return 0, false, nil // its writer finished, or it is open: alive
		}
		return 0, false, err
	}
	return li.Size(), true, nil
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
