package record

import "fmt"

// ReservedPrefix starts the name of every top-level bucket oncekv owns. kv
// hides these names from applications; oncekv's packages reach them through
// internal/keyspace.
const ReservedPrefix = "\x00oncekv/"

// MetaBucket is the reserved bucket of the format record.
const MetaBucket = ReservedPrefix + "meta"

// FormatKey is the key of the format record in MetaBucket.
var FormatKey = []byte("format")

// EncodeFormat returns the format record for version v.
func EncodeFormat(v uint32) []byte {
	var e Encoder
	e.Reset(KindFormat, 1)
	e.Uvarint(uint64(v))
	return e.Finish()
}

// DecodeFormat returns the version a format record holds.
func DecodeFormat(b []byte) (uint32, error) {
	d, _, err := NewDecoder(KindFormat, b)
	if err != nil {
		return 0, err
	}
	n := d.Uvarint()
	if err := d.Done(); err != nil {
		return 0, err
	}
	if n == 0 || n > 1<<31 {
		return 0, d.Fail(fmt.Sprintf("format version %d out of range", n))
	}
	return uint32(n), nil
}
