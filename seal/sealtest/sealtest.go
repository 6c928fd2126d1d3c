package sealtest

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// Key returns the test key with the given ID: its secret is derived from
// the ID, so every call returns the same key. Never use it outside tests.
func Key(id uint32) seal.Key {
	k := seal.Key{ID: id}
	copy(k.Secret[:], fmt.Sprintf("sealtest key %d --------------------------------", id))
	return k
}

// Ring returns a ring sealing with the test key current and opening the
// test keys older too.
func Ring(t testing.TB, current uint32, older ...uint32) *seal.Ring {
	t.Helper()
	keys := make([]seal.Key, 0, len(older))
	for _, id := range older {
		keys = append(keys, Key(id))
	}
	r, err := seal.NewRing(Key(current), keys...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// SealFirstLayout seals plaintext, bound to aad, under k as oncekv did
// before 2026-12-05 (AES-256-GCM under the key itself, a random 96-bit
// nonce, layout byte 0x01), for tests that values written then still
// open. seal.Ring.Seal writes the XAES-256-GCM layout.
func SealFirstLayout(k seal.Key, plaintext, aad []byte) []byte {
	b, err := aes.NewCipher(k.Secret[:])
	if err != nil {
		panic(err) // a 32-byte key
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	v := binary.BigEndian.AppendUint32([]byte{0xE5, 'S', 0x01}, k.ID)
	nonce := make([]byte, g.NonceSize())
	_, _ = rand.Read(nonce)
	return g.Seal(append(v, nonce...), nonce, plaintext, aad)
}

// ResealFunc is one package's part of a rekey (ledger.Reseal,
// sideeffect.Reseal, outbox.Reseal, conditional.Reseal).
type ResealFunc func(tx kv.Tx, ring *seal.Ring, after []byte, limit int) (next []byte, resealed int, err error)

// Reseal runs reseal over db with db's ring, in transactions of batch
// records, as inspect.Rekey does for every kind, and returns the records
// rewritten and the transactions committed. It starts from an empty
// cursor, not nil: a cursor kept between runs (in JSON, say) comes back
// empty, and every Reseal must take it for the start as it takes nil.
func Reseal(t testing.TB, db *kv.DB, reseal ResealFunc, batch int) (resealed, batches int) {
	t.Helper()
	after := []byte{}
	for first := true; first || after != nil; first = false {
		var next []byte
		var n int
		err := db.Update(context.Background(), func(tx kv.Tx) error {
			var err error
			next, n, err = reseal(tx, db.Cipher(), after, batch) // what the committed run did
			return err
		})
		if err != nil {
			t.Fatalf("reseal, batch %d: %v", batches+1, err)
		}
		after, resealed = next, resealed+n
		batches++
	}
	return resealed, batches
}
