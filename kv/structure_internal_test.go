package kv

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// treeFile writes a real database whose bucket spans several leaves under
// a branch, and returns its bytes, page size, page count, root page and
// the first branch page of the bucket with at least two children.
func treeFile(t *testing.T) (raw []byte, ps, pages, root, branch uint64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tree.db")
	WriteSample(t, path)
	var err error
	raw, err = os.ReadFile(path)
	require.NoError(t, err)
	m := lastMeta(t, path)
	ps, pages, root = uint64(m.pageSize), m.pgid, m.root
	for id := uint64(2); id < pages; id++ {
		p := raw[id*ps:]
		if binary.NativeEndian.Uint16(p[8:]) == branchPage && binary.NativeEndian.Uint16(p[10:]) >= 2 {
			return raw, ps, pages, root, id
		}
	}
	t.Fatal("no branch page")
	return
}

// Every kind of damage the walk reports, each made in a copy of a real
// file, and a clean file passing.
func TestWalkStructureReportsDamage(t *testing.T) {
	raw, ps, pages, root, branch := treeFile(t)
	walk := func(data []byte) error { return walkStructure(bytes.NewReader(data), int(ps), pages, root, nil) }
	require.NoError(t, walk(raw))

	child := func(data []byte, i int) uint64 {
		return binary.NativeEndian.Uint64(data[branch*ps+pageHeaderLen+uint64(i)*elementLen+8:])
	}
	setChild := func(data []byte, i int, id uint64) {
		binary.NativeEndian.PutUint64(data[branch*ps+pageHeaderLen+uint64(i)*elementLen+8:], id)
	}
	leaf := child(raw, 0)
	for _, c := range []struct {
		name, want string
		damage     func(data []byte)
	}{
		{"a child past the end", "outside the data", func(d []byte) { setChild(d, 0, pages+5) }},
		{"a child reached twice", "reachable twice", func(d []byte) { setChild(d, 1, child(d, 0)) }},
		{"a page whose header names another", "its header says page", func(d []byte) {
			binary.NativeEndian.PutUint64(d[leaf*ps:], leaf+1)
		}},
		{"an overflow past the end", "overflow pages", func(d []byte) {
			binary.NativeEndian.PutUint32(d[leaf*ps+12:], uint32(pages))
		}},
		{"a page of the wrong type", "where a branch or leaf page belongs", func(d []byte) {
			binary.NativeEndian.PutUint16(d[leaf*ps+8:], freelistPage)
		}},
		{"more elements than fit", "more than fit in it", func(d []byte) {
			binary.NativeEndian.PutUint16(d[leaf*ps+10:], 0xFFF0)
		}},
		{"a key past its page", "points past the end of its page", func(d []byte) {
			binary.NativeEndian.PutUint32(d[leaf*ps+pageHeaderLen+8:], 1<<20) // ksize
		}},
		{"keys out of order in a leaf", "out of key order", func(d []byte) {
			e := d[leaf*ps+pageHeaderLen:]
			pos, ksize := binary.NativeEndian.Uint32(e[4:]), binary.NativeEndian.Uint32(e[8:])
			d[leaf*ps+pageHeaderLen+uint64(pos)+uint64(ksize)-1] = 0xFF // the first key now sorts last
		}},
		{"a leaf below its parent's key", "out of key order", func(d []byte) {
			setChild(d, 0, child(d, 1)) // the second leaf's keys under the first's range...
			setChild(d, 1, leaf)        // ...and the first's under the second's
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := append([]byte(nil), raw...)
			c.damage(data)
			err := walk(data)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}
