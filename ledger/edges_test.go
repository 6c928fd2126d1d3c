package ledger_test

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// Keys at the edges of what is valid: 1 to MaxKeyLen bytes of visible
// ASCII, '!' (0x21) to '~' (0x7e).
func TestKeysAtTheEdges(t *testing.T) {
	for _, ok := range []string{"k", strings.Repeat("k", ledger.MaxKeyLen), "!", "~", "!~"} {
		require.NoError(t, ledger.ValidateKey(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("k", ledger.MaxKeyLen+1), " ", "\x7f", "a b", "é"} {
		require.ErrorIs(t, ledger.ValidateKey(bad), ledger.ErrInvalidKey, "%q", bad)
	}
}

func edgeLedger(t *testing.T, cfg *ledger.Config) *ledger.Ledger {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "e.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l, err := ledger.New(db, cfg)
	require.NoError(t, err)
	return l
}

func store(l *ledger.Ledger, key string, resp ledger.Response) (ledger.Result, error) {
	return l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: key, Fingerprint: ledger.Fingerprint{1}},
		func(kv.Tx) (ledger.Response, error) { return resp, nil })
}

// A body of exactly MaxResponseBytes is stored; one byte more is refused.
// Bodies longer than CompressThreshold are compressed, not those of
// exactly that size. A response without headers replays without headers.
func TestResponseSizeEdges(t *testing.T) {
	l := edgeLedger(t, &ledger.Config{MaxResponseBytes: 200, CompressThreshold: 100})
	_, err := store(l, "max", ledger.Response{Status: 201, Body: bytes.Repeat([]byte("a"), 200)})
	require.NoError(t, err)
	_, err = store(l, "over", ledger.Response{Status: 201, Body: bytes.Repeat([]byte("a"), 201)})
	require.ErrorIs(t, err, ledger.ErrResponseTooLarge)

	for n, compressed := range map[int]bool{100: false, 101: true} {
		key := strings.Repeat("c", n%7+1) + string(rune('0'+n%10))
		_, err := store(l, key, ledger.Response{Status: 200, Body: bytes.Repeat([]byte("z"), n)})
		require.NoError(t, err)
		r, err := l.Get(ctx, "acme|POST /x", key)
		require.NoError(t, err)
		require.Equal(t, compressed, r.Compressed, "%d bytes", n)
		require.Len(t, r.Response.Body, n)
	}
	r, err := l.Get(ctx, "acme|POST /x", "max")
	require.NoError(t, err)
	require.Nil(t, r.Response.Header, "no headers stored, none replayed")
}

// Headers with several values replay every value in order; a per-scope
// retention shorter than the lease is raised to the lease (a claim never
// outlives its record).
func TestMultiValueHeadersAndShortRetention(t *testing.T) {
	clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	db, err := kv.Open(filepath.Join(t.TempDir(), "h.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	defer db.Close()
	l, err := ledger.New(db, &ledger.Config{Lease: time.Minute, RetentionFor: func(scope string) time.Duration {
		if strings.HasPrefix(scope, "short|") {
			return time.Second
		}
		return 0
	}})
	require.NoError(t, err)
	h := http.Header{"Vary": {"Accept", "Accept-Encoding", "Origin"}, "Link": {"</a>; rel=next", "</b>; rel=prev"}, "X-One": {"1"}}
	_, err = l.Do(ctx, ledger.Request{Scope: "short|POST /x", Key: "k", Fingerprint: ledger.Fingerprint{1}},
		func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Header: h, Body: []byte("b")}, nil
		})
	require.NoError(t, err)
	r, err := l.Get(ctx, "short|POST /x", "k")
	require.NoError(t, err)
	require.Equal(t, h, r.Response.Header)
	require.Equal(t, clock.Now().Add(time.Minute), r.ExpiresAt, "raised to the lease")
}
