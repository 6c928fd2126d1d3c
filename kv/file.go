package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"sync"
)

// bbolt's meta page, as it lies in the file (bbolt v1, format version 2):
// a 16-byte page header, then magic, version, page size, flags (uint32
// each), the root bucket (root pgid, sequence), the freelist pgid, the
// high-water mark (pgid), the transaction ID and an FNV-64a checksum of
// everything before it, in the machine's byte order.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pageHeaderLen   = 16
	metaChecksumOff = 56
	metaLen         = 64
	noFreelist      = ^uint64(0)
)

type boltMeta struct {
	pageSize                 uint32
	root, freelist, pgid, tx uint64
}

// newest returns the meta page of metas (one or two valid ones) with the
// higher transaction ID: the file's last commit.
func newest(metas []boltMeta) boltMeta {
	m := metas[0]
	if len(metas) == 2 && metas[1].tx > m.tx {
		m = metas[1]
	}
	return m
}

func parseMeta(b []byte) (boltMeta, bool) {
	if len(b) < pageHeaderLen+metaLen {
		return boltMeta{}, false
	}
	m := b[pageHeaderLen : pageHeaderLen+metaLen]
	ne := binary.NativeEndian
	h := fnv.New64a()
	_, _ = h.Write(m[:metaChecksumOff])
	if ne.Uint32(m[0:]) != boltMagic || ne.Uint32(m[4:]) != boltVersion || ne.Uint64(m[metaChecksumOff:]) != h.Sum64() {
		return boltMeta{}, false
	}
	return boltMeta{pageSize: ne.Uint32(m[8:]), root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]),
		pgid: ne.Uint64(m[40:]), tx: ne.Uint64(m[48:])}, true
}

// preflight looks at an existing file before bbolt maps it, so that damage
// bbolt would meet as a SIGBUS or a panic (a truncated copy, a page number
// past the end) is reported as a *FileError instead (issue 13, item 11).
// It returns the file's size; 0 for a file that does not exist. A reader
// is not stopped by a damaged freelist, which only writers load. A writer
// walks every page reachable from the root first (about 0.2 s for a
// million records), so that a damaged tree, or a page in use that the
// freelist calls free, is refused before a commit can write over it.
func preflight(path string, readOnly bool) (int64, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil
	case err != nil:
		return 0, err
	case fi.IsDir():
		return 0, &FileError{Path: path, Err: ErrNotDatabase, Reason: "is a directory, not a database file"}
	case !fi.Mode().IsRegular():
		return 0, &FileError{Path: path, Err: ErrNotDatabase, Reason: fmt.Sprintf("is not a regular file (%s)", fi.Mode().Type())}
	case fi.Size() == 0:
		return 0, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	// Opened for writing, bbolt reads more than the meta and root pages at
	// once (below). Those reads are checked under a shared lock, so that
	// no writer changes the file under them; while a writer holds it they
	// are skipped (bbolt then waits for the lock, and a writer that closes
	// leaves a consistent file).
	settled := false
	if !readOnly {
		if unlock, ok := lockedForReading(f); ok {
			defer unlock()
			settled = true
			if now, err := f.Stat(); err == nil {
				fi = now // a writer may have grown it before the lock
			}
		}
	}
	size := fi.Size()
	head := make([]byte, 0x1000)
	n, err := f.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return 0, err
	}
	head = head[:n]
	var metas []boltMeta
	if m, ok := parseMeta(head); ok {
		metas = append(metas, m)
	}
	// The second meta page sits one page in; the page size comes from the
	// first one, or is guessed as bbolt does (1 KiB to 16 MiB).
	for i := 0; i <= 14; i++ {
		pos := int64(1024) << i
		if len(metas) > 0 {
			pos = int64(metas[0].pageSize)
		}
		if pos+pageHeaderLen+metaLen > size {
			break
		}
		buf := make([]byte, pageHeaderLen+metaLen)
		if _, err := f.ReadAt(buf, pos); err == nil {
			if m, ok := parseMeta(buf); ok {
				metas = append(metas, m)
				break
			}
		}
		if len(metas) > 0 {
			break
		}
	}
	if len(metas) == 0 {
		return size, &FileError{Path: path, Err: ErrNotDatabase, Reason: fmt.Sprintf("is not a bbolt database: no valid meta page in its %d bytes", size)}
	}
	m := newest(metas)
	ps := uint64(m.pageSize)
	switch {
	case ps < 512 || ps > 1<<24 || ps&(ps-1) != 0:
		return size, &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("meta page names a page size of %d bytes", ps)}
	case m.pgid < 2 || m.pgid > uint64(1<<62)/ps:
		return size, &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("meta page names %d pages", m.pgid)}
	case uint64(size) < m.pgid*ps:
		return size, &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("is truncated: %d bytes, but its meta page says the data runs to %d bytes (%d pages of %d); restore it from a backup",
			size, m.pgid*ps, m.pgid, ps)}
	case m.root >= m.pgid || (m.freelist != noFreelist && m.freelist >= m.pgid):
		return size, &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("meta page points past the end of the data (root page %d, freelist page %d, %d pages)", m.root, m.freelist, m.pgid)}
	}
	// bbolt reads the root and (opened for writing) the freelist at once, and
	// panics on a page that is not what the meta page says it is.
	if err := checkPage(f, path, m.root, ps, branchPage|leafPage, "root"); err != nil {
		return size, err
	}
	if readOnly || !settled {
		// A reader never loads the freelist; a file a writer holds is
		// bbolt's to wait for.
		return size, nil
	}
	// An Open for writing walks every page reachable from the root, reading
	// the file, and checks the freelist against it. Without a freelist
	// (Options.SyncFreelist false and the writer did not close it, or
	// bbolt's NoFreelistSync elsewhere, as etcd writes) bbolt finds the free
	// pages by that same walk, in a goroutine of its own where a damaged
	// page is a fatal panic. With one, a page in use that the list also
	// calls free would be handed to the next commit's new data.
	var free map[uint64]bool
	if m.freelist != noFreelist {
		if free, err = checkFreelist(f, m.freelist, ps, m.pgid); err != nil {
			return size, &FileError{Path: path, Err: ErrDamaged, Reason: "is damaged: " + err.Error()}
		}
	}
	if err := walkFile(f, size, int(ps), m.pgid, m.root, free); err != nil {
		return size, &FileError{Path: path, Err: ErrDamaged, Reason: "is damaged (opening it for writing walks every page): " + err.Error()}
	}
	return size, nil
}

// bbolt's page types (the flags field of a page header).
const (
	branchPage   = 0x01
	leafPage     = 0x02
	freelistPage = 0x10
)

// checkPage checks that page id carries its own ID and one of the types in
// want in its header.
func checkPage(f *os.File, path string, id, pageSize uint64, want uint16, what string) error {
	var hdr [pageHeaderLen]byte
	if _, err := f.ReadAt(hdr[:], int64(id*pageSize)); err != nil {
		return &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("%s page %d cannot be read: %v", what, id, err)}
	}
	gotID, flags := binary.NativeEndian.Uint64(hdr[0:]), binary.NativeEndian.Uint16(hdr[8:])
	if gotID != id || flags&want == 0 || flags&^want != 0 {
		return &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("%s page %d is damaged (its header says page %d, type 0x%02x)", what, id, gotID, flags)}
	}
	return nil
}

// openFiles remembers the files this process has open through Open, so a
// second Open of the same file fails at once with ErrAlreadyOpen instead of
// waiting for a lock that this very process holds.
var openFiles struct {
	mu    sync.Mutex
	files map[*DB]os.FileInfo
}

// alreadyOpen returns the DB of this process that holds the file at path.
// The caller holds openFiles.mu.
func alreadyOpen(path string) *DB {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	for db, other := range openFiles.files {
		if os.SameFile(fi, other) {
			return db
		}
	}
	return nil
}

// register notes db's file, as newDB read it (DB.file), among those this
// process has open.
func register(db *DB) {
	if db.file == nil {
		return
	}
	if openFiles.files == nil {
		openFiles.files = map[*DB]os.FileInfo{}
	}
	openFiles.files[db] = db.file
}

func unregister(db *DB) {
	openFiles.mu.Lock()
	delete(openFiles.files, db)
	openFiles.mu.Unlock()
}
