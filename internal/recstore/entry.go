package recstore

import (
	"encoding/binary"
	"hash/crc32"
	"slices"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

// A log entry wraps a record's value with the scope and key it belongs to,
// under one checksum: magic, kind (log entry), layout 1, scope and key
// (length-prefixed), the record's own encoded value (with its own header
// and checksum), and a CRC-32C of everything before it. The keyed layout
// stores the value alone (its bucket key names scope and key); so the same
// value moves between the layouts unchanged, a damaged one included.
const entryLayout = 1

// wrap encodes an entry. The result is a fresh slice (bbolt keeps it until
// the commit).
func wrap(scope, key string, value []byte) []byte {
	return record.AppendChecksum(framed(scope, key, value))
}

// framed is an entry without its trailer, in a fresh slice with room for
// it: what PutFramed closes.
func framed(scope, key string, value []byte) []byte {
	return append(frame(nil, scope, key, len(value)+4), value...)
}

// frame appends to buf[:0] an entry's head: its header, scope and key,
// growing it to hold room bytes more (the value and the trailer
// record.AppendChecksum adds).
func frame(buf []byte, scope, key string, room int) []byte {
	var e record.Encoder
	e.Append(slices.Grow(buf[:0], 3+2*binary.MaxVarintLen64+len(scope)+len(key)+room))
	e.Nest(record.KindLogEntry, entryLayout)
	e.String(scope)
	e.String(key)
	return e.Unfinished()
}

// unwrap returns an entry's scope, key and value (aliasing v) without
// checking the checksum: a look-up checks it too (intact), on every entry
// it meets, since a damaged key may name another record's.
func unwrap(v []byte) (scope, key, value []byte, ok bool) {
	if len(v) < 3+4 || !entryHeader(v) {
		return nil, nil, nil, false
	}
	return readIdentity(v[3 : len(v)-4])
}

// identity reads the scope and key at the start of an entry whose
// framing may be broken further on (cut short, its checksum or value
// damaged): the rebuild indexes such an entry under the key it names, so
// that a look-up of that key meets the damage (an error) instead of
// missing (which would run the work again).
func identity(v []byte) (scope, key []byte, ok bool) {
	if len(v) < 3 || !entryHeader(v) {
		return nil, nil, false
	}
	scope, key, _, ok = readIdentity(v[3:])
	return scope, key, ok
}

func entryHeader(v []byte) bool {
	return v[0] == record.Magic && v[1] == byte(record.KindLogEntry) && v[2] == entryLayout
}

// readIdentity splits body into its two length-prefixed fields, scope and
// key, and the rest.
func readIdentity(body []byte) (scope, key, rest []byte, ok bool) {
	n, w := binary.Uvarint(body)
	if w <= 0 || n > uint64(len(body)-w) {
		return nil, nil, nil, false
	}
	scope, body = body[w:w+int(n)], body[w+int(n):]
	n, w = binary.Uvarint(body)
	if w <= 0 || n > uint64(len(body)-w) {
		return nil, nil, nil, false
	}
	key, rest = body[w:w+int(n)], body[w+int(n):]
	return scope, key, rest, true
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// DamagedEntry is the error a listing reports for v, an entry List called
// damaged (ok false), of a record of kind: its checksum fails although it
// reads ("checksum mismatch"), or it does not read ("unreadable
// framing"), in the words of the look-up's error.
func DamagedEntry(kind record.Kind, v []byte) error {
	return &kv.CorruptError{Kind: kind, Reason: "damaged entry (" + why(v) + "): the scope and key it names cannot be trusted"}
}

func why(v []byte) string {
	if _, _, _, ok := unwrap(v); ok {
		return "checksum mismatch"
	}
	return "unreadable framing"
}

// intact reports whether an entry's checksum holds.
func intact(v []byte) bool {
	if len(v) < 4 {
		return false
	}
	return crc32.Checksum(v[:len(v)-4], castagnoli) == binary.LittleEndian.Uint32(v[len(v)-4:])
}
