package record

import (
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// MaxDecompressedSize bounds what Decompress will produce, so that a corrupt
// or hostile record cannot make a reader allocate without limit.
const MaxDecompressedSize = 64 << 20

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
