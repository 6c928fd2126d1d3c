package seal_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

func TestRoundTripRotationAndTamper(t *testing.T) {
	t.Parallel()
	k1, _ := seal.NewKey(1)
	k2, s2 := seal.NewKey(2)
	old, err := seal.NewRing(k1)
	require.NoError(t, err)
	v1 := old.Seal(nil, []byte("card 4242"), []byte("ledger\x00acme\x00k1"))
	require.True(t, seal.IsSealed(v1))
	id, _ := seal.KeyID(v1)
	require.EqualValues(t, 1, id)
	require.NotContains(t, string(v1), "4242")

	parsed, err := seal.ParseKey(s2)
	require.NoError(t, err)
	require.Equal(t, k2, parsed)
	r, err := seal.NewRing(k2, k1) // rotated: seals with 2, opens 1 and 2
	require.NoError(t, err)
	p, err := r.Open(nil, v1, []byte("ledger\x00acme\x00k1"))
	require.NoError(t, err)
	require.Equal(t, "card 4242", string(p))
	v2 := r.Seal(nil, []byte("x"), nil)
	id, _ = seal.KeyID(v2)
	require.EqualValues(t, 2, id)

	// Moved to another record: the associated data differs.
	_, err = r.Open(nil, v1, []byte("ledger\x00acme\x00k2"))
	require.ErrorIs(t, err, seal.ErrTampered)
	// One flipped byte anywhere after the header.
	for i := 7; i < len(v1); i++ {
		bad := bytes.Clone(v1)
		bad[i] ^= 1
		_, err = r.Open(nil, bad, []byte("ledger\x00acme\x00k1"))
		require.ErrorIs(t, err, seal.ErrTampered, "byte %d", i)
	}
	// The key it needs is gone.
	only2, _ := seal.NewRing(k2)
	_, err = only2.Open(nil, v1, []byte("ledger\x00acme\x00k1"))
	var oe *seal.OpenError
	require.ErrorAs(t, err, &oe)
	require.ErrorIs(t, err, seal.ErrUnknownKey)
	require.EqualValues(t, 1, oe.KeyID)
	var none *seal.Ring
	_, err = none.Open(nil, v1, nil)
	require.ErrorIs(t, err, seal.ErrUnknownKey)

	_, err = seal.NewRing(k1, k1)
	require.ErrorIs(t, err, seal.ErrInvalidKey)
}

func TestKeyFiles(t *testing.T) {
	t.Parallel()
	_, s := seal.NewKey(7)
	path := filepath.Join(t.TempDir(), "k")
	require.NoError(t, os.WriteFile(path, []byte(s+"\n"), 0o600))
	k, err := seal.ReadKeyFile(path)
	require.NoError(t, err)
	require.EqualValues(t, 7, k.ID)
	for _, bad := range []string{"", "7", "x:00", "7:zz", "7:" + s[2:10], "4294967296:" + s[2:]} {
		_, err := seal.ParseKey(bad)
		require.ErrorIs(t, err, seal.ErrInvalidKey, bad)
	}
}

// Whatever the bytes, Open answers with an error or the plaintext, never
// a panic; and nothing but a sealed value opens.
func FuzzOpen(f *testing.F) {
	k, _ := seal.NewKey(3)
	r, _ := seal.NewRing(k)
	f.Add(r.Seal(nil, []byte("hello"), []byte("aad")), []byte("aad"))
	f.Add([]byte{0xE5, 'S', 1, 0, 0, 0, 3}, []byte(nil))
	f.Add([]byte{0xE5, 'S', 2, 0, 0, 0, 3}, []byte(nil))
	f.Add(sealtest.SealFirstLayout(k, []byte("hello"), []byte("aad")), []byte("aad"))
	f.Add([]byte("plain"), []byte("aad"))
	f.Fuzz(func(t *testing.T, v, aad []byte) {
		p, err := r.Open(nil, v, aad)
		if err == nil {
			overhead := seal.Overhead // the XAES-256-GCM layout's
			if v[2] == 1 {
				overhead = 3 + 4 + 12 + 16 // the first layout's: a 96-bit nonce
			}
			if !seal.IsSealed(v) || len(v) != len(p)+overhead {
				t.Fatalf("opened something that is not a sealed value: %x", v)
			}
			return
		}
		if !errors.Is(err, seal.ErrTampered) && !errors.Is(err, seal.ErrUnknownKey) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// BenchmarkSeal and BenchmarkOpen: one 100-byte value (a typical stored
// response body) with its associated data.
func BenchmarkSeal(b *testing.B) {
	k, _ := seal.NewKey(1)
	r, _ := seal.NewRing(k)
	plain, aad := make([]byte, 100), []byte("ledger.response\x00acme|POST /v1/orders\x00key-1")
	b.ReportAllocs()
	for b.Loop() {
		r.Seal(nil, plain, aad)
	}
}

func BenchmarkOpen(b *testing.B) {
	k, _ := seal.NewKey(1)
	r, _ := seal.NewRing(k)
	plain, aad := make([]byte, 100), []byte("ledger.response\x00acme|POST /v1/orders\x00key-1")
	sealed := r.Seal(nil, plain, aad)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Open(nil, sealed, aad); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenFromAnotherRun opens a value another process sealed (its
// derived key comes from the ring's cache, not from the epoch it seals
// under).
func BenchmarkOpenFromAnotherRun(b *testing.B) {
	k, _ := seal.NewKey(1)
	writer, _ := seal.NewRing(k)
	reader, _ := seal.NewRing(k)
	plain, aad := make([]byte, 100), []byte("ledger.response\x00acme|POST /v1/orders\x00key-1")
	sealed := writer.Seal(nil, plain, aad)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reader.Open(nil, sealed, aad); err != nil {
			b.Fatal(err)
		}
	}
}

func TestKeyFromEnv(t *testing.T) {
	want, line := seal.NewKey(9)
	t.Setenv("SEAL_TEST_KEY", line)
	k, ok, err := seal.KeyFromEnv("SEAL_TEST_KEY")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, want, k)
	t.Setenv("SEAL_TEST_KEY", "")
	_, ok, err = seal.KeyFromEnv("SEAL_TEST_KEY")
	require.NoError(t, err)
	require.False(t, ok)
	t.Setenv("SEAL_TEST_KEY", "9:zz")
	_, _, err = seal.KeyFromEnv("SEAL_TEST_KEY")
	require.ErrorIs(t, err, seal.ErrInvalidKey)
	require.ErrorContains(t, err, "$SEAL_TEST_KEY")
}

// The edges of the layout: an empty plaintext seals to exactly Overhead
// bytes and opens; a header alone is recognised (its key ID read) but does
// not open.
func TestLayoutEdges(t *testing.T) {
	k, _ := seal.NewKey(3)
	r, err := seal.NewRing(k)
	require.NoError(t, err)
	empty := r.Seal(nil, nil, []byte("aad"))
	require.Len(t, empty, seal.Overhead)
	p, err := r.Open(nil, empty, []byte("aad"))
	require.NoError(t, err)
	require.Empty(t, p)
	header := empty[:seal.Overhead-16]
	require.True(t, seal.IsSealed(header))
	id, ok := seal.KeyID(header)
	require.True(t, ok)
	require.Equal(t, uint32(3), id)
	require.False(t, seal.IsSealed(header[:len(header)-1]))
	_, err = r.Open(nil, header, []byte("aad"))
	require.ErrorIs(t, err, seal.ErrTampered)
}

// LoadRing: files first (the first current), the environment otherwise,
// nothing when neither names a key.
func TestLoadRing(t *testing.T) {
	dir := t.TempDir()
	write := func(id uint32) (seal.Key, string) {
		k, line := seal.NewKey(id)
		p := filepath.Join(dir, fmt.Sprint("key", id))
		require.NoError(t, os.WriteFile(p, []byte(line), 0o600))
		return k, p
	}
	k1, p1 := write(1)
	_, p2 := write(2)
	t.Setenv("SEAL_LOAD_KEY", "")
	r, err := seal.LoadRing("SEAL_LOAD_KEY")
	require.NoError(t, err)
	require.Nil(t, r, "no key anywhere: no encryption")
	r, err = seal.LoadRing("SEAL_LOAD_KEY", p2, p1)
	require.NoError(t, err)
	require.Equal(t, uint32(2), r.Current())
	require.True(t, r.Has(1))
	_, line := seal.NewKey(5)
	t.Setenv("SEAL_LOAD_KEY", line)
	r, err = seal.LoadRing("SEAL_LOAD_KEY")
	require.NoError(t, err)
	require.Equal(t, uint32(5), r.Current())
	r, err = seal.LoadRing("SEAL_LOAD_KEY", p1)
	require.NoError(t, err)
	require.Equal(t, k1.ID, r.Current(), "files win over the environment")
	_, err = seal.LoadRing("SEAL_LOAD_KEY", filepath.Join(dir, "missing"))
	require.Error(t, err)
	_, err = seal.LoadRing("SEAL_LOAD_KEY", p1, p1)
	require.ErrorIs(t, err, seal.ErrInvalidKey, "one key ID twice")
}
