package kv

import (
	"encoding/binary"
	"fmt"
	"io"
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
// memory map, that every page reachable from root is what its parent says
// and that every element's key and value lie inside its page. bbolt's own
// check follows those offsets blindly in a goroutine of its own, where a
// damaged element is a fatal memory fault rather than a report; Check runs
// this walk first and hands the file to bbolt only when it passes.
func walkStructure(r io.ReaderAt, pageSize int, pages uint64, root uint64) error {
	w := &walker{r: r, ps: uint64(pageSize), pages: pages, seen: map[uint64]bool{}}
	return w.page(root, 0)
}

type walker struct {
	r     io.ReaderAt
	ps    uint64
	pages uint64
	seen  map[uint64]bool
}

func (w *walker) page(id uint64, depth int) error {
	switch {
	case depth > maxTreeDepth:
		return fmt.Errorf("the B+tree is deeper than %d levels at page %d (a cycle?)", maxTreeDepth, id)
	case id < 2 || id >= w.pages:
		return fmt.Errorf("a branch points to page %d, outside the data (%d pages)", id, w.pages)
	case w.seen[id]:
		return fmt.Errorf("page %d is reachable twice", id)
	}
	w.seen[id] = true
	var hdr [pageHeaderLen]byte
	if _, err := w.r.ReadAt(hdr[:], int64(id*w.ps)); err != nil {
		return fmt.Errorf("page %d cannot be read: %w", id, err)
	}
	overflow := uint64(binary.NativeEndian.Uint32(hdr[12:]))
	if binary.NativeEndian.Uint64(hdr[0:]) != id || id+overflow >= w.pages {
		return fmt.Errorf("page %d is damaged (its header says page %d, %d overflow pages)", id, binary.NativeEndian.Uint64(hdr[0:]), overflow)
	}
	buf := make([]byte, (1+overflow)*w.ps)
	if _, err := w.r.ReadAt(buf, int64(id*w.ps)); err != nil {
		return fmt.Errorf("page %d cannot be read: %w", id, err)
	}
	return w.elements(buf, fmt.Sprintf("page %d", id), depth)
}

// elements checks the elements of one page held in buf (a page in the file,
// or a bucket's inline page inside a value).
func (w *walker) elements(buf []byte, where string, depth int) error {
	if len(buf) < pageHeaderLen {
		return fmt.Errorf("%s is %d bytes, shorter than a page header", where, len(buf))
	}
	flags := binary.NativeEndian.Uint16(buf[8:])
	count := int(binary.NativeEndian.Uint16(buf[10:]))
	if flags != branchPage && flags != leafPage {
		return fmt.Errorf("%s has type 0x%02x where a branch or leaf page belongs", where, flags)
	}
	if pageHeaderLen+count*elementLen > len(buf) {
		return fmt.Errorf("%s claims %d elements, more than fit in it", where, count)
	}
	for i := range count {
		off := pageHeaderLen + i*elementLen
		e := buf[off : off+elementLen]
		var pos, ksize, vsize uint64
		if flags == branchPage {
			pos, ksize = uint64(binary.NativeEndian.Uint32(e[0:])), uint64(binary.NativeEndian.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(binary.NativeEndian.Uint32(e[4:])), uint64(binary.NativeEndian.Uint32(e[8:])), uint64(binary.NativeEndian.Uint32(e[12:]))
		}
		if uint64(off)+pos+ksize+vsize > uint64(len(buf)) {
			return fmt.Errorf("%s element %d points past the end of its page", where, i)
		}
		switch {
		case flags == branchPage:
			if err := w.page(binary.NativeEndian.Uint64(e[8:]), depth+1); err != nil {
				return err
			}
		case binary.NativeEndian.Uint32(e[0:])&bucketLeafFlag != 0:
			v := buf[uint64(off)+pos+ksize : uint64(off)+pos+ksize+vsize]
			if len(v) < inBucketLen {
				return fmt.Errorf("%s element %d is a bucket of %d bytes", where, i, len(v))
			}
			if root := binary.NativeEndian.Uint64(v); root != 0 {
				if err := w.page(root, depth+1); err != nil {
					return err
				}
			} else if err := w.elements(v[inBucketLen:], where+" inline bucket", depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
