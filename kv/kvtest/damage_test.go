package kvtest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// Naming matches an entry by the scope and key its framing names, not by
// its bytes: a record whose stored response holds another record's key
// is left alone, and damaging key d1 damages d1's record only.
func TestNamingMatchesTheEntrysKeyNotItsBytes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "n.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	do := func(scope, key, body string) error {
		_, err := l.Do(ctx, ledger.Request{Scope: scope, Key: key, Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Body: []byte(body)}, nil
		})
		return err
	}
	require.NoError(t, do("acme|POST /x", "d1", "first"))
	require.NoError(t, do("acme|POST /x", "other", "d1 d1 d1")) // its bytes hold d1
	require.NoError(t, do("globex|POST /x", "d1", "first"))     // d1 in another scope
	require.NoError(t, db.Close())

	matched := func(m func([]byte) bool) (n int) {
		kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
			_, err := kvtest.DamageLogEntry(tx, "idempotency", m, func(v []byte) []byte { n++; return v })
			return err
		})
		return n
	}
	require.Equal(t, 2, matched(kvtest.Naming("", "d1")), "d1 in both scopes, not other")
	require.Equal(t, 1, matched(kvtest.Naming("acme|POST /x", "d1")))
	require.Equal(t, 1, matched(kvtest.Naming("", "other")))
	require.Zero(t, matched(kvtest.Naming("", "d")), "a prefix of a key is not the key")
	require.Zero(t, matched(kvtest.Naming("", "first")), "nor is a response")

	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		_, err := kvtest.DamageLogEntry(tx, "idempotency", kvtest.Naming("acme|POST /x", "d1"), func(v []byte) []byte {
			v[len(v)-5] ^= 1
			return v
		})
		return err
	})
	db = kvtest.OpenPath(t, path, &kv.Options{NoSync: true})
	l, err = ledger.New(db, nil)
	require.NoError(t, err)
	require.ErrorIs(t, do("acme|POST /x", "d1", "first"), kv.ErrCorrupt)
	require.NoError(t, do("acme|POST /x", "other", "d1 d1 d1"), "other's record is intact: a replay")
	require.NoError(t, do("globex|POST /x", "d1", "first"))
}
