package sealing

import (
	"bytes"
	"encoding/binary"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// AAD returns the associated data of a value of kind (the package and
// field: "ledger.response") stored under the given parts (scope and key,
// an intent ID...): each part length-prefixed, so no two places share it.
func AAD(kind string, parts ...string) []byte {
	n := len(kind) + 1
	for _, p := range parts {
		n += len(p) + binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = append(b, kind...)
	b = append(b, 0)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// Stale reports whether blob, a sealed value, should be rewritten by a
// rekey to ring's current key.
func Stale(ring *seal.Ring, blob []byte) bool {
	id, ok := seal.KeyID(blob)
	return ok && id != ring.Current()
}

// Rewrite walks b's keys after the cursor after (nil: from the first) and
// calls fn with each key and value; a non-nil value fn returns replaces the
// stored one. fn's error (which should name the record) ends the walk. It stops after limit keys and returns the key to resume
// after (nil when the bucket is done) and how many values it replaced.
// Replacements are written after the walk: the cursor never sees a bucket
// it is changing.
func Rewrite(b kv.Bucket, after []byte, limit int, fn func(k, v []byte) ([]byte, error)) (next []byte, rewritten int, err error) {
	if b == nil {
		return nil, 0, nil
	}
	c := b.Cursor()
	var k, v []byte
	if after == nil {
		k, v = c.First()
	} else if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
		k, v = c.Next()
	}
	type put struct{ k, v []byte }
	var puts []put
	n := 0
	for ; k != nil && n < limit; k, v = c.Next() {
		n++
		nv, err := fn(k, v)
		if err != nil {
			return nil, 0, err
		}
		if nv != nil {
			puts = append(puts, put{bytes.Clone(k), nv})
		}
		next = bytes.Clone(k)
	}
	if k == nil {
		next = nil
	}
	for _, p := range puts {
		if err := b.Put(p.k, p.v); err != nil {
			return nil, 0, err
		}
	}
	return next, len(puts), nil
}
