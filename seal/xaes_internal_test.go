package seal

import (
	"bytes"
	"crypto/sha3"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The accumulated test vector of the XAES-256-GCM specification
// (https://c2sp.org/XAES-256-GCM): 10,000 keys, nonces, plaintexts and
// associated data drawn from SHAKE-128, each sealed with the key
// derivation Seal uses and opened again; SHAKE-128 of every ciphertext in
// turn is the specification's. A mistake anywhere in the derivation (the
// CMAC subkey, the counter, the label) changes it.
func TestXAESAccumulatedVector(t *testing.T) {
	t.Parallel()
	const want = "e6b9edf2df6cec60c8cbd864e2211b597fb69a529160cd040d56c0c210081939"
	s, d := sha3.NewSHAKE128(), sha3.NewSHAKE128()
	read := func(n int) []byte {
		b := make([]byte, n)
		_, _ = s.Read(b)
		return b
	}
	for range 10_000 {
		var k Key
		copy(k.Secret[:], read(32))
		nonce := read(24)
		plain := read(int(read(1)[0]))
		aad := read(int(read(1)[0]))
		r, err := NewRing(k)
		require.NoError(t, err)
		rk := r.keys[k.ID]
		ct := rk.derive(nonce[:12]).Seal(nil, nonce[12:], plain, aad)
		p, err := rk.derive(nonce[:12]).Open(nil, nonce[12:], ct, aad)
		require.NoError(t, err)
		require.True(t, bytes.Equal(plain, p))
		_, _ = d.Write(ct)
	}
	sum := make([]byte, 32)
	_, _ = d.Read(sum)
	require.Equal(t, want, hex.EncodeToString(sum))
}

// prefix returns the nonce prefix a value was sealed under (its derived
// key's).
func prefix(v []byte) [12]byte { return [12]byte(v[7:19]) }

// Sealers racing across the end of an epoch all seal, under exactly two
// derived keys (the old epoch's and the one new epoch that won), each of
// them under epochValues values; every value opens, in another ring too.
func TestEpochEndsUnderConcurrentSealers(t *testing.T) {
	t.Parallel()
	k, _ := NewKey(1)
	r, err := NewRing(k)
	require.NoError(t, err)
	first := r.Seal(nil, []byte("first"), nil)
	rk := r.keys[1]
	rk.sealing.Load().used.Store(epochValues - 50)

	const workers, each = 8, 25
	out := make([][][]byte, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				out[w] = append(out[w], r.Seal(nil, []byte{byte(w), byte(i)}, []byte("aad")))
			}
		})
	}
	wg.Wait()

	other, err := NewRing(k) // opens by derivation alone: no epoch of its own
	require.NoError(t, err)
	prefixes := map[[12]byte]int{}
	for w := range workers {
		for i, v := range out[w] {
			prefixes[prefix(v)]++
			for _, ring := range []*Ring{r, other} {
				p, err := ring.Open(nil, v, []byte("aad"))
				require.NoError(t, err)
				require.Equal(t, []byte{byte(w), byte(i)}, p)
			}
		}
	}
	require.Len(t, prefixes, 2, "the old epoch and one new one")
	require.Equal(t, 50, prefixes[prefix(first)], "the old epoch's last 50 values")
	require.EqualValues(t, workers*each-50, rk.sealing.Load().used.Load(), "the new epoch counts the rest")
}

// sealedInEpochs seals n values, each in an epoch of its own (as n runs of
// a service would), the plaintext of value i its two low bytes.
func sealedInEpochs(t *testing.T, n int) (Key, [][]byte) {
	t.Helper()
	k, _ := NewKey(1)
	writer, err := NewRing(k)
	require.NoError(t, err)
	values := make([][]byte, 0, n)
	for i := range n {
		values = append(values, writer.Seal(nil, []byte{byte(i), byte(i >> 8)}, nil))
		writer.keys[1].sealing.Load().used.Store(epochValues) // the next value draws a new epoch
	}
	return k, values
}

// The derived keys kept to open values stay bounded: values of many
// epochs (a file written by many runs) all open, and the cache never holds
// more than maxOpened keys.
func TestOpenedKeysStayBounded(t *testing.T) {
	t.Parallel()
	k, values := sealedInEpochs(t, maxOpened+40)
	reader, err := NewRing(k)
	require.NoError(t, err)
	rk := reader.keys[1]
	kept := func() int {
		n := 0
		rk.opened.Range(func(any, any) bool { n++; return true })
		return n
	}
	for i, v := range values[:maxOpened] {
		_, err := reader.Open(nil, v, nil)
		require.NoError(t, err)
		require.Equal(t, i+1, kept(), "every derived key kept up to the bound")
	}
	for pass := range 2 {
		for i, v := range values {
			p, err := reader.Open(nil, v, nil)
			require.NoError(t, err, "pass %d, value %d", pass, i)
			require.Equal(t, []byte{byte(i), byte(i >> 8)}, p)
			require.LessOrEqual(t, kept(), maxOpened)
			require.LessOrEqual(t, int(rk.nOpened.Load()), maxOpened)
		}
	}
	_, cached := rk.opened.Load(prefix(values[len(values)-1]))
	require.True(t, cached, "the last opened value's key is kept")
}

// Readers opening values of many epochs at once, the cache starting again
// under them, all get their plaintexts (go test -race watches the cache).
func TestConcurrentOpensAcrossEpochs(t *testing.T) {
	t.Parallel()
	k, values := sealedInEpochs(t, maxOpened+60)
	reader, err := NewRing(k)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for j := range values {
				i := (j + w*37) % len(values)
				p, err := reader.Open(nil, values[i], nil)
				if err != nil || p[0] != byte(i) || p[1] != byte(i>>8) {
					t.Errorf("value %d: %x, %v", i, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
