package ledger

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// damageEntry rewrites, with raw bbolt, the log entry of path that holds
// key, through garble, and returns its position.
func damageEntry(t *testing.T, path, key string, garble func([]byte) []byte) uint64 {
	t.Helper()
	var pos string
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) (err error) {
		pos, err = kvtest.DamageLogEntry(tx, "idempotency", kvtest.Naming("", key), garble)
		return err
	})
	n, err := strconv.ParseUint(pos, 16, 64)
	require.NoError(t, err, "no entry holds %s", key)
	return n
}

// A damaged record that still names its key answers that key with an
// error, for good: DropDamaged (the operator's decision) removes it, and
// the key runs again; usage and the check agree afterwards. An intact
// record (sealed ones read without the key ring included) and a position
// without a record are refused.
func TestDropDamagedLetsTheKeyRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, reason string
		framed       bool
		garble       func([]byte) []byte
	}{
		{"flipped byte", "checksum mismatch", true, func(v []byte) []byte { v[len(v)-10] ^= 0xff; return v }},
		{"replaced", "damaged framing", false, func([]byte) []byte { return []byte("garbage") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "d.db")
			db, l := openSealed(t, path, sealtest.Ring(t, 1))
			runs := 0
			do := func(l *Ledger, key string) (Result, error) {
				return l.Do(ctx, Request{Scope: "acme|POST /x", Key: key, Fingerprint: Fingerprint{1}}, func(tx kv.Tx) (Response, error) {
					if kvtest.Counts() {
						runs++
					}
					return Response{Status: 201, Body: []byte("ran " + key)}, nil
				})
			}
			for _, k := range []string{"key-a", "key-b", "key-c"} {
				_, err := do(l, k)
				require.NoError(t, err)
			}
			require.NoError(t, db.Close())
			pos := damageEntry(t, path, "key-b", tc.garble)
			intact := damageEntry(t, path, "key-a", func(v []byte) []byte { return v })

			db, l = openSealed(t, path, nil) // no key ring: sealed responses do not open
			defer db.Close()
			if tc.framed {
				_, err := do(l, "key-b")
				require.ErrorIs(t, err, kv.ErrCorrupt, "the key answers with an error, not a second run")
			}
			problems, err := db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.NotEmpty(t, problems)

			_, err = DropDamaged(ctx, db, intact)
			require.ErrorIs(t, err, kv.ErrNotDamaged, "a sealed record read without the ring is not damaged")
			_, err = DropDamaged(ctx, db, 1) // second 0 of 1970
			require.ErrorIs(t, err, kv.ErrNoEntry)
			dropped, err := DropDamaged(ctx, db, pos)
			require.NoError(t, err)
			want := kv.DroppedEntry{Kind: "idempotency", Entry: pos, Reason: tc.reason}
			if tc.framed {
				want.Scope, want.Key = "acme|POST /x", "key-b"
			}
			require.Equal(t, want, dropped)
			_, err = DropDamaged(ctx, db, pos)
			require.ErrorIs(t, err, kv.ErrNoEntry, "dropped once")

			problems, err = db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.Empty(t, problems, "usage was counted again")
			u, err := l.Usage(ctx, "acme")
			require.NoError(t, err)
			require.EqualValues(t, 2, u.Records)
			runs = 0
			res, err := do(l, "key-b")
			require.NoError(t, err)
			require.False(t, res.Replayed)
			require.Equal(t, 1, runs, "the key ran again")
		})
	}
}
