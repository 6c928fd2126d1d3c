package kv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// NewestMeta returns the root page and the freelist page (noFreelist: none)
// that the newer meta page of the database in raw names.
func NewestMeta(raw []byte) (root, freelist uint64) {
	m0, _ := parseMeta(raw)
	metas := []boltMeta{m0}
	if m1, ok := parseMeta(raw[m0.pageSize:]); ok {
		metas = append(metas, m1)
	}
	m := newest(metas)
	return m.root, m.freelist
}

// WriteSample writes a small real database at path, for the tests of this
// package and its external tests: the format record and a bucket of 300
// keys (several leaf pages under a branch). It is closed cleanly.
func WriteSample(t testing.TB, path string) {
	t.Helper()
	db, err := Open(path, &Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Update(context.Background(), func(tx Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		for i := range 300 {
			if err := b.Put(fmt.Appendf(nil, "order-%04d", i), []byte(strings.Repeat("v", 40))); err != nil {
				return err
			}
		}
		return nil
	}))
	require.NoError(t, db.Close())
}

// SetNoSpaceWait bounds the pause of db's commits after one fails for lack
// of space (space.go). Call it between calls, not during one.
func SetNoSpaceWait(db *DB, minWait, maxWait time.Duration) {
	db.space.minWait, db.space.maxWait = minWait, maxWait
}
