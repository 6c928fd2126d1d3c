package conditional

import (
	"encoding/binary"
	"fmt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/seal"
)

// Row is a stored value with its primary key and version. Versions start at
// 1 and increase by one on every write that changes the row.
type Row[T any] struct {
	ID      string
	Version uint64
	Value   T
}

// Key builds an index key from a tuple of parts, such as (tenant,
// external_ref). Each part is length-prefixed, so ("ab", "c") and ("a", "bc")
// never collide.
func Key(parts ...string) []byte {
	var k []byte
	for _, p := range parts {
		k = binary.AppendUvarint(k, uint64(len(p)))
		k = append(k, p...)
	}
	return k
}

// indexKey is one index's key for a row, as stored in the row.
type indexKey struct {
	index string
	key   []byte
}

// storedRow is the encoding-level view of a row: what the generic checker
// can read without knowing T.
type storedRow struct {
	version uint64
	keys    []indexKey
	value   []byte
	sealed  bool // value is sealed (layout 2) and not opened yet
}

// Row layout, version 1: version uvarint | nkeys uvarint |
// (index name, key)... | value bytes. Version 2 is version 1 with the value
// sealed (package seal), bound to the table and the row's ID; the index
// keys stay clear (they are the index buckets' keys anyway).
const (
	rowLayout       = 1
	rowLayoutSealed = 2
)

// rowAAD binds a sealed value to its table and row.
func rowAAD(table, id string) []byte { return sealing.AAD("conditional.row", table, id) }

func encodeRow(e *record.Encoder, r storedRow) []byte {
	layout := byte(rowLayout)
	if r.sealed {
		layout = rowLayoutSealed
	}
	e.Reset(record.KindVersioned, layout)
	e.Uvarint(r.version)
	e.Uvarint(uint64(len(r.keys)))
	for _, k := range r.keys {
		e.String(k.index)
		e.Bytes(k.key)
	}
	e.Bytes(r.value)
	return e.Finish()
}

// decodeRow decodes a stored row; slices alias v.
func decodeRow(v []byte) (storedRow, error) {
	var d record.Decoder
	layout, err := d.Reset(record.KindVersioned, v)
	if err != nil {
		return storedRow{}, err
	}
	if layout != rowLayout && layout != rowLayoutSealed {
		return storedRow{}, d.Fail(fmt.Sprintf("unknown row layout %d", layout))
	}
	r := storedRow{sealed: layout == rowLayoutSealed}
	r.version = d.Uvarint()
	n := d.Uvarint()
	if n > uint64(len(v)) {
		return storedRow{}, d.Fail(fmt.Sprintf("%d index keys in a %d-byte row", n, len(v)))
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		r.keys = append(r.keys, indexKey{index: d.String(), key: d.Bytes()})
	}
	r.value = d.Bytes()
	if err := d.Done(); err != nil {
		return storedRow{}, err
	}
	if r.version == 0 {
		return storedRow{}, d.Fail("row version 0")
	}
	if r.sealed && !seal.IsSealed(r.value) {
		return storedRow{}, d.Fail("sealed value without the sealed layout")
	}
	return r, nil
}

// open opens a sealed row's value with ring (in place).
func (r *storedRow) open(ring *seal.Ring, table, id string) error {
	if !r.sealed {
		return nil
	}
	p, err := ring.Open(nil, r.value, rowAAD(table, id))
	if err != nil {
		return err
	}
	r.value, r.sealed = p, false
	return nil
}

func (r storedRow) keyFor(index string) ([]byte, bool) {
	for _, k := range r.keys {
		if k.index == index {
			return k.key, true
		}
	}
	return nil, false
}
