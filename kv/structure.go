package kv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
)

// bbolt's page elements, as laid out in the file: a branch element is
// pos, ksize (uint32) and the child's page ID (uint64); a leaf element is
// flags, pos, ksize, vsize (uint32). pos counts from the element itself.
const (
	elementLen     = 16
	bucketLeafFlag = 0x01
	inBucketLen    = 16
	maxTreeDepth   = 64
)

// walkStructure checks, by reading the file and never through bbolt's
// memory map, that every page reachable from root is what its parent says,
// is reached once, and that every element's key and value lie inside its
// page, with the keys of every tree in order (each page's ascending,
// within the range its parent gives it). bbolt follows those offsets
// blindly in goroutines of its own (its check; at a writable open of a
// file without a freelist, its search for free pages), where a damaged
// element is a fatal memory fault or panic rather than a report, and where
// a reported error leaves the goroutine blocked for ever. Check runs this
// walk first and hands the file to bbolt only when it passes; so does
// every Open for writing, which also checks the file's freelist against it.
//
// free, when not nil, is the freelist's pages: a reachable one is damage
// (the next commit would hand it to new data, overwriting the live page).
func walkStructure(r io.ReaderAt, pageSize int, pages uint64, root uint64, free map[uint64]bool) error {
	w := &walker{r: r, ps: uint64(pageSize), pages: pages, seen: make([]uint64, (pages+63)/64), free: free}
	_, err := w.page(root, 0, nil, nil)
	return err
}

// walkFile runs walkStructure over the first size bytes of f, through a
// read-only memory map where there is one (a page read is then a copy, not
// a system call: 1M records' log is walked in a fraction of the time), with
// a memory fault (the file shrinking under it) reported as an error.
func walkFile(f *os.File, size int64, pageSize int, pages uint64, root uint64, free map[uint64]bool) (err error) {
	data, unmap, merr := mapFile(f, size)
	if merr != nil {
		return walkStructure(f, pageSize, pages, root, free)
	}
	defer unmap()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading it failed: %v", r)
		}
	}()
	return walkStructure(bytes.NewReader(data), pageSize, pages, root, free)
}

type walker struct {
	r     io.ReaderAt
	ps    uint64
	pages uint64
	seen  []uint64        // a bit per page: reached
	free  map[uint64]bool // the freelist's pages, if checked against the tree
	// bufs holds one page buffer per tree level, reused from page to page:
	// a level's keys are compared before the next page of that level is
	// read over them.
	bufs [][]byte
}

// read reads n bytes at page id into the buffer of level depth.
func (w *walker) read(id uint64, n uint64, depth int) ([]byte, error) {
	for len(w.bufs) <= depth {
		w.bufs = append(w.bufs, nil)
	}
	if uint64(cap(w.bufs[depth])) < n {
		w.bufs[depth] = make([]byte, n)
	}
	buf := w.bufs[depth][:n]
	if _, err := w.r.ReadAt(buf, int64(id*w.ps)); err != nil { // #nosec G115 -- id < pages, checked by the caller
		return nil, fmt.Errorf("page %d cannot be read: %w", id, err)
	}
	return buf, nil
}

// page checks page id and the tree below it, whose keys must lie in
// [lo, hi) (nil: unbounded), and returns the subtree's last key.
func (w *walker) page(id uint64, depth int, lo, hi []byte) ([]byte, error) {
	switch {
	case depth > maxTreeDepth:
		return nil, fmt.Errorf("the B+tree is deeper than %d levels at page %d (a cycle?)", maxTreeDepth, id)
	case id < 2 || id >= w.pages:
		return nil, fmt.Errorf("a branch points to page %d, outside the data (%d pages)", id, w.pages)
	}
	buf, err := w.read(id, w.ps, depth)
	if err != nil {
		return nil, err
	}
	overflow := uint64(binary.NativeEndian.Uint32(buf[12:]))
	if binary.NativeEndian.Uint64(buf[0:]) != id || id+overflow >= w.pages {
		return nil, fmt.Errorf("page %d is damaged (its header says page %d, %d overflow pages)", id, binary.NativeEndian.Uint64(buf[0:]), overflow)
	}
	for p := id; p <= id+overflow; p++ { // the page and its overflow
		if w.seen[p/64]&(1<<(p%64)) != 0 {
			return nil, fmt.Errorf("page %d is reachable twice", p)
		}
		if w.free[p] {
			return nil, fmt.Errorf("page %d is in use, and the freelist lists it as free", p)
		}
		w.seen[p/64] |= 1 << (p % 64)
	}
	if overflow > 0 {
		if buf, err = w.read(id, (1+overflow)*w.ps, depth); err != nil {
			return nil, err
		}
	}
	return w.elements(buf, "page "+strconv.FormatUint(id, 10), depth, lo, hi)
}

// elements checks the elements of one page held in buf (a page in the file,
// or a bucket's inline page inside a value), whose keys must lie in
// [lo, hi), and returns the last key of the subtree it heads.
func (w *walker) elements(buf []byte, where string, depth int, lo, hi []byte) ([]byte, error) {
	if len(buf) < pageHeaderLen {
		return nil, fmt.Errorf("%s is %d bytes, shorter than a page header", where, len(buf))
	}
	flags := binary.NativeEndian.Uint16(buf[8:])
	count := int(binary.NativeEndian.Uint16(buf[10:]))
	if flags != branchPage && flags != leafPage {
		return nil, fmt.Errorf("%s has type 0x%02x where a branch or leaf page belongs", where, flags)
	}
	if pageHeaderLen+count*elementLen > len(buf) {
		return nil, fmt.Errorf("%s claims %d elements, more than fit in it", where, count)
	}
	element := func(i int) (k, v []byte, e []byte, err error) {
		off := pageHeaderLen + i*elementLen
		e = buf[off : off+elementLen]
		var pos, ksize, vsize uint64
		if flags == branchPage {
			pos, ksize = uint64(binary.NativeEndian.Uint32(e[0:])), uint64(binary.NativeEndian.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(binary.NativeEndian.Uint32(e[4:])), uint64(binary.NativeEndian.Uint32(e[8:])), uint64(binary.NativeEndian.Uint32(e[12:]))
		}
		if uint64(off)+pos+ksize+vsize > uint64(len(buf)) {
			return nil, nil, nil, fmt.Errorf("%s element %d points past the end of its page", where, i)
		}
		k = buf[uint64(off)+pos : uint64(off)+pos+ksize]
		return k, buf[uint64(off)+pos+ksize : uint64(off)+pos+ksize+vsize], e, nil
	}
	prev, last := lo, []byte(nil)
	for i := range count {
		k, v, e, err := element(i)
		if err != nil {
			return nil, err
		}
		// bbolt's order: each key above the one before it (a page's first
		// may equal its lower bound, the key its parent files it under),
		// and below the parent's next key.
		if c := bytes.Compare(k, prev); prev != nil && (c < 0 || c == 0 && i > 0) || hi != nil && bytes.Compare(k, hi) >= 0 {
			return nil, fmt.Errorf("%s element %d is out of key order", where, i)
		}
		last = k
		switch {
		case flags == branchPage:
			next := hi
			if i+1 < count {
				if next, _, _, err = element(i + 1); err != nil {
					return nil, err
				}
			}
			if last, err = w.page(binary.NativeEndian.Uint64(e[8:]), depth+1, k, next); err != nil {
				return nil, err
			}
		case binary.NativeEndian.Uint32(e[0:])&bucketLeafFlag != 0:
			if len(v) < inBucketLen {
				return nil, fmt.Errorf("%s element %d is a bucket of %d bytes", where, i, len(v))
			}
			if root := binary.NativeEndian.Uint64(v); root != 0 {
				_, err = w.page(root, depth+1, nil, nil)
			} else {
				_, err = w.elements(v[inBucketLen:], where+" inline bucket", depth+1, nil, nil)
			}
			if err != nil {
				return nil, err
			}
		}
		prev = last
	}
	return last, nil
}

// checkFreelist checks bbolt's freelist page id before bbolt reads it, and
// returns the pages it lists:
// its count (in the header, or in its first element when the header says
// 0xFFFF) must fit in the page and its overflow, and every ID must name
// a data page (2 ≤ ID < pages), in ascending order, as bbolt writes them,
// and none may be one of the list's own pages. A page of the tree listed
// as free is seen by the walk of the whole tree (walkStructure, given the
// pages returned). bbolt allocates a slice of
// whatever count it finds (a garbled count is a fatal out-of-memory error,
// not a panic) and hands the IDs out to writers (a garbled ID would let a
// commit overwrite a live page).
func checkFreelist(r io.ReaderAt, id, ps, pages uint64) (map[uint64]bool, error) {
	if id < 2 || id >= pages {
		return nil, fmt.Errorf("the meta page puts the freelist at page %d, outside the data (%d pages)", id, pages)
	}
	var hdr [pageHeaderLen + 8]byte
	if _, err := r.ReadAt(hdr[:], int64(id*ps)); err != nil { // #nosec G115 -- id < pages, checked above
		return nil, fmt.Errorf("freelist page %d cannot be read: %w", id, err)
	}
	if got, flags := binary.NativeEndian.Uint64(hdr[0:]), binary.NativeEndian.Uint16(hdr[8:]); got != id || flags != freelistPage {
		return nil, fmt.Errorf("freelist page %d is damaged (its header says page %d, type 0x%02x)", id, got, flags)
	}
	overflow := uint64(binary.NativeEndian.Uint32(hdr[12:]))
	idx, count := uint64(0), uint64(binary.NativeEndian.Uint16(hdr[10:]))
	if count == 0xFFFF {
		idx, count = 1, binary.NativeEndian.Uint64(hdr[pageHeaderLen:])
	}
	room := (1 + overflow) * ps
	switch {
	case id+overflow >= pages:
		return nil, fmt.Errorf("freelist page %d claims %d overflow pages, past the end of the data (%d pages)", id, overflow, pages)
	case count > (room-pageHeaderLen)/8 || pageHeaderLen+(idx+count)*8 > room:
		return nil, fmt.Errorf("freelist page %d claims %d free pages, more than fit in it", id, count)
	}
	buf := make([]byte, pageHeaderLen+(idx+count)*8)
	if _, err := r.ReadAt(buf, int64(id*ps)); err != nil { // #nosec G115 -- as above
		return nil, fmt.Errorf("freelist page %d cannot be read: %w", id, err)
	}
	ids := make(map[uint64]bool, count)
	prev := uint64(1)
	for i := range count {
		free := binary.NativeEndian.Uint64(buf[pageHeaderLen+(idx+i)*8:])
		switch {
		case free <= prev || free >= pages:
			return nil, fmt.Errorf("freelist page %d lists page %d as free (entry %d): not a data page in order (%d pages)", id, free, i, pages)
		case free >= id && free <= id+overflow:
			// The next commit frees the list's own pages: bbolt panics
			// ("already freed"), or first writes new data over them.
			return nil, fmt.Errorf("freelist page %d lists its own page %d as free (entry %d)", id, free, i)
		}
		prev = free
		ids[free] = true
	}
	return ids, nil
}
