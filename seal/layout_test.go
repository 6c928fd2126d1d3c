package seal_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// xaesValue lays out, as Seal does, a value that XAES-256-GCM sealed
// elsewhere: 0xE5 'S' 0x02, the key ID, the 24-byte nonce, the ciphertext
// and tag.
func xaesValue(id uint32, nonce, sealed []byte) []byte {
	v := binary.BigEndian.AppendUint32([]byte{0xE5, 'S', 0x02}, id)
	return append(append(v, nonce...), sealed...)
}

// The values Seal writes are XAES-256-GCM's: the C2SP specification's test
// vectors (https://c2sp.org/XAES-256-GCM), laid out as a sealed value,
// open with a ring holding the vector's key, and a value Seal writes is
// one byte longer than the vector's ciphertext for each byte of header
// and nonce, no more: another XAES-256-GCM implementation opens it.
func TestSealIsXAES256GCM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key            byte
		aad, sealedHex string
	}{
		{0x01, "", "ce546ef63c9cc60765923609b33a9a1974e96e52daf2fcf7075e2271"},
		{0x03, "c2sp.org/XAES-256-GCM", "986ec1832593df5443a179437fd083bf3fdb41abd740a21f71eb769d"},
	} {
		k := seal.Key{ID: 7}
		copy(k.Secret[:], bytes.Repeat([]byte{tc.key}, 32))
		r, err := seal.NewRing(k)
		require.NoError(t, err)
		sealed, err := hex.DecodeString(tc.sealedHex)
		require.NoError(t, err)
		v := xaesValue(7, []byte("ABCDEFGHIJKLMNOPQRSTUVWX"), sealed)
		p, err := r.Open(nil, v, []byte(tc.aad))
		require.NoError(t, err, "vector with key %#x", tc.key)
		require.Equal(t, "XAES-256-GCM", string(p))

		// A bit flipped in the derived half of the nonce fails: the nonce
		// derives the key.
		bad := bytes.Clone(v)
		bad[7] ^= 1
		_, err = r.Open(nil, bad, []byte(tc.aad))
		require.ErrorIs(t, err, seal.ErrTampered)

		own := r.Seal(nil, []byte("XAES-256-GCM"), []byte(tc.aad))
		require.Len(t, own, len(v))
		require.Equal(t, v[:7], own[:7], "header")
		require.Equal(t, seal.Overhead, len(own)-len("XAES-256-GCM"))
	}
}

// Values sealed in the first layout, before 2026-12-05, still open, under
// their key, bound to their associated data; new values use the XAES
// layout whatever the ring read before.
func TestFirstLayoutStillOpens(t *testing.T) {
	t.Parallel()
	k1, _ := seal.NewKey(1)
	k2, _ := seal.NewKey(2)
	r, err := seal.NewRing(k2, k1)
	require.NoError(t, err)
	old := sealtest.SealFirstLayout(k1, []byte("card 4242"), []byte("ledger\x00acme\x00k1"))
	require.True(t, seal.IsSealed(old))
	id, ok := seal.KeyID(old)
	require.True(t, ok)
	require.EqualValues(t, 1, id)
	p, err := r.Open(nil, old, []byte("ledger\x00acme\x00k1"))
	require.NoError(t, err)
	require.Equal(t, "card 4242", string(p))
	_, err = r.Open(nil, old, []byte("ledger\x00acme\x00k2"))
	require.ErrorIs(t, err, seal.ErrTampered)
	for i := 7; i < len(old); i++ {
		bad := bytes.Clone(old)
		bad[i] ^= 1
		_, err = r.Open(nil, bad, []byte("ledger\x00acme\x00k1"))
		require.ErrorIs(t, err, seal.ErrTampered, "byte %d", i)
	}
	// Its header alone is recognised (the key ID read) but does not open.
	require.True(t, seal.IsSealed(old[:3+4+12]))
	require.False(t, seal.IsSealed(old[:3+4+11]))
	_, err = r.Open(nil, old[:3+4+12], nil)
	require.ErrorIs(t, err, seal.ErrTampered)

	// An unknown layout byte is not a sealed value.
	unknown := bytes.Clone(old)
	unknown[2] = 0x03
	require.False(t, seal.IsSealed(unknown))
	_, err = r.Open(nil, unknown, []byte("ledger\x00acme\x00k1"))
	require.ErrorIs(t, err, seal.ErrTampered)

	require.EqualValues(t, 0x02, r.Seal(nil, []byte("x"), nil)[2])
}
