package record

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// MaxDecompressedSize bounds what Decompress will produce, so that a corrupt
// or hostile record cannot make a reader allocate without limit. Writers
// compress no value larger than this; DecompressSized reads the larger
// ones that writers before that rule stored.
const MaxDecompressedSize = 64 << 20

// maxSizedDecompression bounds DecompressSized: 2 GiB, the largest value
// bbolt stores. A ledger holds a response whole in memory before storing
// it; a record that states more is taken as damaged.
const maxSizedDecompression = 1<<31 - 2

// DefaultCompressThreshold is the value size, in bytes, above which oncekv
// compresses stored values (responses, payloads) with zstd. Below it the cost
// of compression outweighs the saving.
const DefaultCompressThreshold = 1024

// One encoder and one decoder serve the whole process: zstd's EncodeAll and
// DecodeAll are safe for concurrent use and keep their own pools of state, so
// no call allocates a new coder.
var (
	zenc = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderCRC(false), // records carry their own CRC-32C
			zstd.WithZeroFrames(true))
		if err != nil {
			panic(err) // only invalid options fail
		}
		return e
	})
	zdec = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(MaxDecompressedSize))
		if err != nil {
			panic(err)
		}
		return d
	})
)

// Compress appends the zstd compression of src to dst.
func Compress(dst, src []byte) []byte { return zenc().EncodeAll(src, dst) }

// Decompress appends the decompression of src to dst. A corrupt input, or one
// that would expand past MaxDecompressedSize, returns a *CorruptError for
// kind k.
func Decompress(k Kind, dst, src []byte) ([]byte, error) {
	out, err := zdec().DecodeAll(src, dst)
	if err != nil {
		return dst, &CorruptError{Kind: k, Reason: fmt.Sprintf("compressed value: %v", err)}
	}
	return out, nil
}

// DecompressSized is Decompress for a value whose decompressed size the
// record states, under its checksum: it expands src to at most size bytes
// (MaxDecompressedSize when size is smaller). A record written before
// writers kept to MaxDecompressedSize (a response body over 64 MiB,
// compressed) is read this way, with a decoder of its own for the one call,
// bounded by what the record says rather than by the shared decoder's
// limit.
func DecompressSized(k Kind, dst, src []byte, size uint64) ([]byte, error) {
	if size <= MaxDecompressedSize {
		return Decompress(k, dst, src)
	}
	if size > maxSizedDecompression {
		return dst, &CorruptError{Kind: k, Reason: fmt.Sprintf("compressed value of %d bytes is larger than any value stored", size)}
	}
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(size))
	if err != nil {
		return dst, err
	}
	defer d.Close()
	out, err := d.DecodeAll(src, dst)
	if err != nil {
		return dst, &CorruptError{Kind: k, Reason: fmt.Sprintf("compressed value: %v", err)}
	}
	return out, nil
}
