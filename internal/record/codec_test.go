package record_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

func sample() []byte {
	var e record.Encoder
	e.Reset(record.KindIdempotency, 3)
	e.Uvarint(42)
	e.Varint(-7)
	e.Byte(9)
	e.Bytes([]byte("hello"))
	e.String("world")
	e.Fixed([]byte{1, 2, 3, 4})
	e.Time(time.Unix(1700000000, 123).UTC())
	e.Time(time.Time{})
	return bytes.Clone(e.Finish())
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	rec := sample()
	d, v, err := record.NewDecoder(record.KindIdempotency, rec)
	require.NoError(t, err)
	require.Equal(t, byte(3), v)
	require.Equal(t, uint64(42), d.Uvarint())
	require.Equal(t, int64(-7), d.Varint())
	require.Equal(t, byte(9), d.Byte())
	require.Equal(t, []byte("hello"), d.Bytes())
	require.Equal(t, "world", d.String())
	require.Equal(t, []byte{1, 2, 3, 4}, d.Fixed(4))
	require.Equal(t, time.Unix(1700000000, 123).UTC(), d.Time())
	require.True(t, d.Time().IsZero())
	require.NoError(t, d.Done())
}

func TestCodecRejectsCorruption(t *testing.T) {
	t.Parallel()
	rec := sample()
	cases := map[string][]byte{
		"empty":     nil,
		"short":     rec[:5],
		"truncated": rec[:len(rec)-1],
		"magic":     append([]byte{0}, rec[1:]...),
	}
	for i := range rec {
		flipped := bytes.Clone(rec)
		flipped[i] ^= 0x40
		cases["flip"+string(rune('a'+i%26))+string(rune('0'+i/26))] = flipped
	}
	for name, in := range cases {
		_, _, err := record.NewDecoder(record.KindIdempotency, in)
		require.ErrorIs(t, err, kv.ErrCorrupt, name)
		var ce *record.CorruptError
		require.ErrorAs(t, err, &ce, name)
		require.Equal(t, record.KindIdempotency, ce.Kind)
	}
	_, _, err := record.NewDecoder(record.KindIntent, rec)
	require.ErrorContains(t, err, "record is of kind idempotency")
}

func TestDecoderStickyErrorsAndTrailingBytes(t *testing.T) {
	t.Parallel()
	var e record.Encoder
	e.Reset(record.KindInbox, 1)
	e.Uvarint(1 << 40) // a length far past the end
	rec := bytes.Clone(e.Finish())
	d, _, err := record.NewDecoder(record.KindInbox, rec)
	require.NoError(t, err)
	require.Nil(t, d.Bytes())
	require.Zero(t, d.Uvarint())
	require.ErrorIs(t, d.Err(), kv.ErrCorrupt)

	e.Reset(record.KindInbox, 1)
	e.Uvarint(1)
	e.Uvarint(2)
	d, _, err = record.NewDecoder(record.KindInbox, e.Finish())
	require.NoError(t, err)
	d.Uvarint()
	require.ErrorContains(t, d.Done(), "1 trailing bytes")
}

func TestCompressRoundTripAndCorrupt(t *testing.T) {
	t.Parallel()
	src := bytes.Repeat([]byte("a response body that repeats. "), 200)
	c := record.Compress(nil, src)
	require.Less(t, len(c), len(src)/4)
	out, err := record.Decompress(record.KindIdempotency, nil, c)
	require.NoError(t, err)
	require.Equal(t, src, out)

	bad := bytes.Clone(c)
	bad[len(bad)/2] ^= 0xff
	bad[len(bad)/3] ^= 0xff
	_, err = record.Decompress(record.KindIdempotency, nil, bad)
	if err != nil {
		require.ErrorIs(t, err, kv.ErrCorrupt)
	}
	_, err = record.Decompress(record.KindIdempotency, nil, []byte("not zstd at all"))
	require.ErrorIs(t, err, kv.ErrCorrupt)

	r := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 5000)
	for i := range noise {
		noise[i] = byte(r.UintN(256))
	}
	out, err = record.Decompress(record.KindIdempotency, nil, record.Compress(nil, noise))
	require.NoError(t, err)
	require.Equal(t, noise, out)
}

// FuzzDecoder feeds arbitrary bytes to the decoder through every read
// method: it must never panic, and any successful decode of a record must
// survive a re-encode.
func FuzzDecoder(f *testing.F) {
	f.Add(sample())
	f.Add([]byte{})
	f.Add([]byte{0xB7, 0x10, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, _, err := record.NewDecoder(record.KindIdempotency, data)
		if err != nil {
			return
		}
		for i := 0; d.Err() == nil && i < 64; i++ {
			switch i % 7 {
			case 0:
				d.Uvarint()
			case 1:
				d.Varint()
			case 2:
				d.Bytes()
			case 3:
				d.Byte()
			case 4:
				d.Time()
			case 5:
				d.Fixed(i)
			case 6:
				_ = d.String()
			}
		}
		_ = d.Done()
	})
}

func FuzzDecompress(f *testing.F) {
	f.Add(record.Compress(nil, []byte("hello hello hello hello")))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := record.Decompress(record.KindIdempotency, nil, data)
		if err == nil {
			require.LessOrEqual(t, len(out), record.MaxDecompressedSize)
		}
	})
}

// DecompressSized reads a value past MaxDecompressedSize up to the size
// its record states, and no further; a stated size past bbolt's largest
// value is damage, and a small one is held to MaxDecompressedSize.
func TestDecompressSizedIsBoundedByTheStatedSize(t *testing.T) {
	big := bytes.Repeat([]byte("a"), record.MaxDecompressedSize+1)
	c := record.Compress(nil, big)
	out, err := record.DecompressSized(record.KindIdempotency, nil, c, uint64(len(big)))
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, out))
	_, err = record.DecompressSized(record.KindIdempotency, nil, record.Compress(nil, append(big, 'b')), uint64(len(big)))
	require.ErrorIs(t, err, kv.ErrCorrupt, "a value longer than stated")
	_, err = record.DecompressSized(record.KindIdempotency, nil, c, 1<<31-2)
	require.NoError(t, err, "up to bbolt's largest value")
	_, err = record.DecompressSized(record.KindIdempotency, nil, c, 1<<31-1)
	require.ErrorIs(t, err, kv.ErrCorrupt, "past bbolt's largest value")
	_, err = record.DecompressSized(record.KindIdempotency, nil, c, 10)
	require.ErrorIs(t, err, kv.ErrCorrupt, "a small stated size is held to MaxDecompressedSize")
	small := record.Compress(nil, []byte("hello hello hello hello"))
	out, err = record.DecompressSized(record.KindIdempotency, []byte("x"), small, 23)
	require.NoError(t, err)
	require.Equal(t, "xhello hello hello hello", string(out), "appended to dst")
	_, err = record.DecompressSized(record.KindIdempotency, nil, append([]byte{0x28, 0xb5, 0x2f, 0xfd}, big[:64]...), uint64(len(big)))
	require.ErrorIs(t, err, kv.ErrCorrupt, "garbage after a zstd magic")
}

// Times past what int64 Unix nanoseconds hold once wrapped round into the
// past: an expiry in 2318 read back as 1733 (issue 13, item 2).
func TestTimesOutsideTheEncodingAreClamped(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	require.True(t, keyspace.ExpiryAt(t0, math.MaxInt64).Equal(keyspace.Never))
	require.True(t, keyspace.ExpiryAt(t0, 250*365*24*time.Hour).Equal(keyspace.Never))
	require.True(t, keyspace.ExpiryAt(t0, -1).Equal(keyspace.Never))
	require.True(t, keyspace.ExpiryAt(time.Date(2199, 12, 31, 0, 0, 0, 0, time.UTC), 48*time.Hour).Equal(keyspace.Never))
	require.Equal(t, t0.Add(time.Hour), keyspace.ExpiryAt(t0, time.Hour))

	far := t0.Add(math.MaxInt64) // year 2318
	var e record.Encoder
	e.Reset(record.KindIdempotency, 1)
	e.Time(far)
	e.Time(time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC))
	d, _, err := record.NewDecoder(record.KindIdempotency, e.Finish())
	require.NoError(t, err)
	got := d.Time()
	require.True(t, got.After(t0.Add(200*365*24*time.Hour)), "read back %s", got)
	require.True(t, d.Time().Before(time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, d.Done())
}

// Reads that end exactly at the end of a record succeed; one byte more
// fails as corrupt (never reads past, never panics), and the failure names
// the offset. The smallest record (a header and a checksum) decodes.
func TestDecoderExactEnds(t *testing.T) {
	t.Parallel()
	var e record.Encoder
	e.Reset(record.KindInbox, 1)
	empty := bytes.Clone(e.Finish())
	require.Len(t, empty, 3+4)
	d, layout, err := record.NewDecoder(record.KindInbox, empty)
	require.NoError(t, err)
	require.Equal(t, byte(1), layout)
	require.NoError(t, d.Done())
	require.Zero(t, d.Uvarint(), "nothing left: the varint is missing")
	require.ErrorIs(t, d.Err(), kv.ErrCorrupt)
	d, _, _ = record.NewDecoder(record.KindInbox, empty)
	require.Zero(t, d.Varint())
	require.ErrorIs(t, d.Err(), kv.ErrCorrupt)

	e.Reset(record.KindInbox, 1)
	e.Fixed([]byte{1, 2, 3})
	rec := bytes.Clone(e.Finish())
	d, _, _ = record.NewDecoder(record.KindInbox, rec)
	require.Equal(t, []byte{1, 2, 3}, d.Fixed(3), "exactly what is left")
	require.NoError(t, d.Done())
	d, _, _ = record.NewDecoder(record.KindInbox, rec)
	require.Nil(t, d.Fixed(4))
	var ce *record.CorruptError
	require.ErrorAs(t, d.Err(), &ce)
	require.Equal(t, 3, ce.Offset, "the failure is at the first field, after the 3-byte header")
	d, _, _ = record.NewDecoder(record.KindInbox, rec)
	require.Nil(t, d.Fixed(-1))
	require.ErrorIs(t, d.Err(), kv.ErrCorrupt)
	d, _, _ = record.NewDecoder(record.KindInbox, rec)
	require.Empty(t, d.Fixed(0))
	require.NoError(t, d.Err(), "a zero-length field is fine")
	d.Fixed(2)
	require.Nil(t, d.Fixed(2), "one byte left, two asked")
	require.ErrorIs(t, d.Err(), kv.ErrCorrupt)
	d, _, _ = record.NewDecoder(record.KindInbox, rec)
	d.Fixed(2)
	require.Equal(t, byte(3), d.Byte(), "the last byte")
	require.Zero(t, d.Byte())
	require.ErrorAs(t, d.Err(), &ce)
	require.Equal(t, 3+3, ce.Offset)

	// A byte string that fills the record exactly, then one that claims a
	// byte more than there is.
	e.Reset(record.KindInbox, 1)
	e.Bytes([]byte("abc"))
	rec = bytes.Clone(e.Finish())
	d, _, _ = record.NewDecoder(record.KindInbox, rec)
	require.Equal(t, []byte("abc"), d.Bytes())
	require.NoError(t, d.Done())
	e.Reset(record.KindInbox, 1)
	e.Uvarint(4)
	e.Fixed([]byte("abc"))
	d, _, _ = record.NewDecoder(record.KindInbox, bytes.Clone(e.Finish()))
	require.Nil(t, d.Bytes())
	require.ErrorIs(t, d.Err(), kv.ErrCorrupt)
}

// Grow sizes the buffer once: a record encoded within the size given is
// written into the buffer Grow made (never reallocated), and the bytes are
// those of an encoder that grew as it went.
func TestEncoderGrowAllocatesOnce(t *testing.T) {
	body := make([]byte, 300)
	encode := func(e *record.Encoder) []byte {
		e.Reset(record.KindIdempotency, 1)
		e.Bytes(body)
		e.Fixed(make([]byte, 16))
		return e.Finish()
	}
	var grown, plain record.Encoder
	grown.Grow(3 + 10 + len(body) + 16 + 4)
	first := &grown.Finish()[0] // the buffer Grow made (Finish on an empty encoder returns it)
	out := encode(&grown)
	require.Equal(t, encode(&plain), out)
	require.Same(t, first, &out[0], "the record was written where Grow made room, without a reallocation")
}

// A record nested after an enclosing record's head (Append, Nest) has the
// bytes and checksum it has alone, and AppendChecksum closes the
// enclosing record: both decode, in the buffer given to Append.
func TestNestedRecordInOneBuffer(t *testing.T) {
	t.Parallel()
	buf := make([]byte, 0, 128)
	var e record.Encoder
	e.Append(buf)
	e.Nest(record.KindLogEntry, 1)
	e.String("scope")
	head := len(e.Unfinished())
	e.Nest(record.KindIdempotency, 3)
	e.Uvarint(42)
	e.String("inner")
	out := record.AppendChecksum(e.Finish())
	require.Same(t, &buf[:1][0], &out[0], "encoded in the buffer given")

	var alone record.Encoder
	alone.Reset(record.KindIdempotency, 3)
	alone.Uvarint(42)
	alone.String("inner")
	inner := alone.Finish()
	require.Equal(t, inner, out[head:len(out)-4], "the nested record is the record alone")

	d, v, err := record.NewDecoder(record.KindLogEntry, out)
	require.NoError(t, err, "the enclosing record's checksum covers its head and the nested record")
	require.Equal(t, byte(1), v)
	require.Equal(t, "scope", d.String())
	require.Equal(t, inner, d.Fixed(len(inner)))
	require.NoError(t, d.Done())
}
