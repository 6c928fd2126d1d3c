package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"time"
)

// Kind identifies the type of a stored record. Each oncekv package owns its
// kinds; the kind byte is checked on decode so that a record of one type is
// never misread as another.
type Kind byte

// Record kinds used by oncekv's packages.
const (
	KindFormat      Kind = 0x01
	KindIdempotency Kind = 0x10
	KindInbox       Kind = 0x11
	KindUsage       Kind = 0x12
	KindLogEntry    Kind = 0x13
	KindIntent      Kind = 0x20
	KindOutbox      Kind = 0x21
	KindKeyStore    Kind = 0x22
	KindVersioned   Kind = 0x30
)

func (k Kind) String() string {
	switch k {
	case KindFormat:
		return "format"
	case KindIdempotency:
		return "idempotency"
	case KindInbox:
		return "inbox"
	case KindUsage:
		return "usage"
	case KindLogEntry:
		return "log entry"
	case KindIntent:
		return "intent"
	case KindOutbox:
		return "outbox"
	case KindKeyStore:
		return "keystore"
	case KindVersioned:
		return "versioned"
	}
	return fmt.Sprintf("kind(0x%02x)", byte(k))
}

// recordMagic starts every encoded record. It makes a value written by other
// code in an oncekv bucket fail loudly instead of decoding as garbage.
const recordMagic = 0xB7

// Magic is the first byte of every encoded record, for code that frames
// records of its own (recstore's log entries).
const Magic = recordMagic

// headerLen is magic + kind + version; trailerLen is the CRC-32C.
const (
	headerLen  = 3
	trailerLen = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encoder builds one binary record: a header naming its kind and layout
// version, fields appended in order, and a CRC-32C trailer added by Finish.
// Integers are varints, byte strings are length-prefixed, times are Unix
// nanoseconds. The zero value is not usable; call Reset first.
type Encoder struct {
	buf   []byte
	start int // where the record Finish closes begins
}

// Reset starts a new record of kind k at layout version v, reusing the
// Encoder's buffer.
func (e *Encoder) Reset(k Kind, v byte) {
	e.buf, e.start = append(e.buf[:0], recordMagic, byte(k), v), 0
}

// Append makes the Encoder write after buf's contents, into buf's spare
// capacity: a buffer allocated ahead, or the head of an enclosing record
// (see Nest).
func (e *Encoder) Append(buf []byte) { e.buf, e.start = buf, 0 }

// Nest starts a record of kind k at layout version v after what the
// Encoder holds: Finish checksums that record alone and returns the whole
// buffer, so an enclosing record (a log entry around the record it
// frames) is built in one buffer and closed with AppendChecksum.
func (e *Encoder) Nest(k Kind, v byte) {
	e.start = len(e.buf)
	e.buf = append(e.buf, recordMagic, byte(k), v)
}

// Unfinished returns what the Encoder holds so far, without a trailer.
func (e *Encoder) Unfinished() []byte { return e.buf }

// AppendChecksum closes the record b holds (a header and its fields) with
// its CRC-32C trailer, as Finish does.
func AppendChecksum(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Grow makes room for n more bytes, so that a record whose size the caller
// can estimate is encoded into one allocation instead of a growing buffer.
func (e *Encoder) Grow(n int) { e.buf = slices.Grow(e.buf, n) }

// Uvarint appends an unsigned integer.
func (e *Encoder) Uvarint(x uint64) { e.buf = binary.AppendUvarint(e.buf, x) }

// Varint appends a signed integer.
func (e *Encoder) Varint(x int64) { e.buf = binary.AppendVarint(e.buf, x) }

// Byte appends one byte.
func (e *Encoder) Byte(b byte) { e.buf = append(e.buf, b) }

// Bytes appends a length-prefixed byte string.
func (e *Encoder) Bytes(b []byte) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(b)))
	e.buf = append(e.buf, b...)
}

// String appends a length-prefixed string.
func (e *Encoder) String(s string) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// Fixed appends b without a length prefix; the decoder must know its size.
func (e *Encoder) Fixed(b []byte) { e.buf = append(e.buf, b...) }

// Time appends a time with nanosecond precision. The zero time round-trips;
// times outside what int64 Unix nanoseconds can hold (before 1678, after
// 2262) are clamped to the nearest end instead of wrapping round.
func (e *Encoder) Time(t time.Time) {
	if t.IsZero() {
		e.buf = binary.AppendVarint(e.buf, math.MinInt64)
		return
	}
	e.buf = binary.AppendVarint(e.buf, unixNano(t))
}

var (
	minEncodable = time.Unix(0, math.MinInt64+1)
	maxEncodable = time.Unix(0, math.MaxInt64)
)

// unixNano is t.UnixNano saturated at the ends of its range: t.UnixNano is
// undefined (it wraps) outside them.
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(minEncodable):
		return minEncodable.UnixNano()
	case t.After(maxEncodable):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// Finish appends the checksum of the record begun by Reset or Nest and
// returns the Encoder's whole buffer, which the next Reset overwrites.
// bbolt does NOT copy values on Put: it keeps the slice until the
// transaction commits. So a buffer handed to Put must not be reused in the
// same transaction — use a fresh Encoder per stored record (a pooled one
// once corrupted records that shared a group-commit batch).
func (e *Encoder) Finish() []byte {
	e.buf = binary.LittleEndian.AppendUint32(e.buf, crc32.Checksum(e.buf[e.start:], castagnoli))
	return e.buf
}

// Decoder reads the fields of one record in the order they were written. The
// first failure is sticky: later reads return zero values and Err reports the
// failure as a *CorruptError. Decoding never panics, whatever the input.
type Decoder struct {
	kind Kind
	data []byte // fields only: header and trailer stripped
	off  int
	err  error
}

// NewDecoder checks the header and checksum of rec, which must be a record of
// kind k, and returns a Decoder positioned at its first field together with
// the record's layout version.
func NewDecoder(k Kind, rec []byte) (*Decoder, byte, error) {
	d := &Decoder{}
	v, err := d.Reset(k, rec)
	return d, v, err
}

// Reset re-initialises d for rec, like NewDecoder, without allocating.
func (d *Decoder) Reset(k Kind, rec []byte) (byte, error) {
	*d = Decoder{kind: k}
	if len(rec) < headerLen+trailerLen {
		d.err = d.corrupt(0, fmt.Sprintf("record is %d bytes, shorter than its header and checksum", len(rec)))
		return 0, d.err
	}
	if rec[0] != recordMagic {
		d.err = d.corrupt(0, fmt.Sprintf("bad magic byte 0x%02x", rec[0]))
		return 0, d.err
	}
	if Kind(rec[1]) != k {
		d.err = d.corrupt(1, fmt.Sprintf("record is of kind %s", Kind(rec[1])))
		return 0, d.err
	}
	body := len(rec) - trailerLen
	want := binary.LittleEndian.Uint32(rec[body:])
	if got := crc32.Checksum(rec[:body], castagnoli); got != want {
		d.err = d.corrupt(body, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", want, got))
		return 0, d.err
	}
	d.data = rec[headerLen:body]
	return rec[2], nil
}

func (d *Decoder) corrupt(off int, reason string) error {
	return &CorruptError{Kind: d.kind, Offset: off, Reason: reason}
}

func (d *Decoder) fail(reason string) {
	if d.err == nil {
		d.err = d.corrupt(headerLen+d.off, reason)
	}
}

// Err returns the first decoding failure, or nil.
func (d *Decoder) Err() error { return d.err }

// Fail records a semantic failure found by the caller (an out-of-range enum,
// an unsupported version) as a *CorruptError at the current offset.
func (d *Decoder) Fail(reason string) error {
	d.fail(reason)
	return d.err
}

// Done reports an error if any bytes are left unread or a read failed.
func (d *Decoder) Done() error {
	if d.err == nil && d.off != len(d.data) {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.data)-d.off))
	}
	return d.err
}

// Offset returns the current position in the record, counted from its
// first byte; a field read by Bytes ends at Offset. Decoders that want to
// turn several fields into one string allocation use it.
func (d *Decoder) Offset() int { return headerLen + d.off }

// Uvarint reads an unsigned integer.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.data[d.off:])
	if n <= 0 {
		d.fail("bad unsigned varint")
		return 0
	}
	d.off += n
	return x
}

// Varint reads a signed integer.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Varint(d.data[d.off:])
	if n <= 0 {
		d.fail("bad signed varint")
		return 0
	}
	d.off += n
	return x
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.data) {
		d.fail("unexpected end of record")
		return 0
	}
	b := d.data[d.off]
	d.off++
	return b
}

// Bytes reads a length-prefixed byte string. The result aliases the record:
// copy it if it must outlive the transaction.
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.data)-d.off) {
		d.fail(fmt.Sprintf("byte string of length %d runs past the end", n))
		return nil
	}
	b := d.data[d.off : d.off+int(n) : d.off+int(n)]
	d.off += int(n)
	return b
}

// String reads a length-prefixed string (copied).
func (d *Decoder) String() string { return string(d.Bytes()) }

// Fixed reads exactly n bytes without a length prefix. The result aliases the
// record.
func (d *Decoder) Fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.data)-d.off {
		d.fail(fmt.Sprintf("fixed field of %d bytes runs past the end", n))
		return nil
	}
	b := d.data[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

// Time reads a time written by Encoder.Time. Times are returned in UTC.
func (d *Decoder) Time() time.Time {
	x := d.Varint()
	if d.err != nil || x == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, x).UTC()
}

// ErrCorrupt is returned (wrapped in a *CorruptError) when a stored record
// cannot be decoded. kv.ErrCorrupt is the same value.
var ErrCorrupt = errors.New("kv: corrupt record")

// CorruptError reports a stored record that failed to decode: a bad
// checksum, an unknown kind or version, or a field that runs past the end.
// errors.Is(err, ErrCorrupt) is true for it.
type CorruptError struct {
	Kind   Kind   // record kind expected by the caller
	Offset int    // byte offset where decoding failed
	Reason string // what was wrong
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("kv: corrupt %s record at byte %d: %s", e.Kind, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
