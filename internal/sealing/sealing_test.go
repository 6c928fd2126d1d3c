package sealing_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// Associated data names kind and parts unambiguously: moving bytes between
// parts, or between kinds, changes it.
func TestAADIsInjective(t *testing.T) {
	seen := map[string]string{}
	for _, c := range [][]string{
		{"k", "ab", "c"}, {"k", "a", "bc"}, {"k", "abc"}, {"k", "abc", ""}, {"k"}, {"k", ""},
		{"k2", "ab", "c"}, {"k\x00", "ab", "c"},
	} {
		got := string(sealing.AAD(c[0], c[1:]...))
		if prev, dup := seen[got]; dup {
			t.Fatalf("%q and %q share associated data", prev, c)
		}
		seen[got] = fmt.Sprint(c)
	}
}

func TestStale(t *testing.T) {
	r2 := sealtest.Ring(t, 2, 1)
	r1 := sealtest.Ring(t, 1)
	require.True(t, sealing.Stale(r2, r1.Seal(nil, []byte("x"), nil)), "sealed under an older key")
	require.False(t, sealing.Stale(r2, r2.Seal(nil, []byte("x"), nil)), "under the current key")
	require.False(t, sealing.Stale(r2, []byte("clear value")), "not sealed: nothing to rekey here")
}

// Rewrite visits at most limit keys per call, resumes after the cursor,
// replaces only the values fn returns, and ends with a nil cursor.
func TestRewriteBatches(t *testing.T) {
	ctx := context.Background()
	db, err := kv.Open(filepath.Join(t.TempDir(), "s.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		require.NoError(t, err)
		for i := range 7 {
			require.NoError(t, b.Put(fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)))
		}
		return nil
	}))
	var after []byte
	var visited []string
	total, calls := 0, 0
	for first := true; first || after != nil; first = false {
		var next []byte
		var n int
		var seen []string
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			var err error
			seen = seen[:0] // the committed run's
			next, n, err = sealing.Rewrite(tx.Bucket([]byte("b")), after, 3, func(k, v []byte) ([]byte, error) {
				seen = append(seen, string(k))
				if string(k) == "k1" || string(k) == "k5" {
					return []byte("new-" + string(v)), nil
				}
				return nil, nil
			})
			return err
		}))
		after, total, visited = next, total+n, append(visited, seen...)
		calls++
	}
	require.Equal(t, []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6"}, visited, "each key once, in order")
	require.Equal(t, 2, total)
	require.Equal(t, 3, calls, "3 + 3 + 1")
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		require.Equal(t, "new-v1", string(b.Get([]byte("k1"))))
		require.Equal(t, "new-v5", string(b.Get([]byte("k5"))))
		require.Equal(t, "v2", string(b.Get([]byte("k2"))))
		return nil
	}))
	next, n, err := sealing.Rewrite(nil, nil, 3, nil)
	require.NoError(t, err)
	require.Nil(t, next)
	require.Zero(t, n)
	// An error from fn stops the walk and writes nothing.
	require.Error(t, db.Update(ctx, func(tx kv.Tx) error {
		_, _, err := sealing.Rewrite(tx.Bucket([]byte("b")), nil, 10, func(k, _ []byte) ([]byte, error) {
			if string(k) == "k3" {
				return nil, fmt.Errorf("boom at %s", k)
			}
			return []byte("x"), nil
		})
		return err
	}))
}
