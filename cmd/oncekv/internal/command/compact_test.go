package command

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

func TestCompact(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	// Grow the file, then free most of it: bbolt never shrinks a file in
	// place, so the compacted copy must be smaller (issue 13, item 17).
	bdb, err := bolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, bdb.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("scratch"))
		for i := 0; err == nil && i < 2000; i++ {
			err = bk.Put(fmt.Appendf(nil, "k%05d", i), make([]byte, 1000))
		}
		return err
	}))
	require.NoError(t, bdb.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("scratch")) }))
	require.NoError(t, bdb.Close())
	out := filepath.Join(t.TempDir(), "compact.db")
	stdout, _, code := run("compact", "--db", db, "--out", out, "--json")
	require.Equal(t, 0, code)
	var res struct {
		BytesBefore int64 `json:"bytes_before"`
		BytesAfter  int64 `json:"bytes_after"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Positive(t, res.BytesAfter)
	require.Less(t, res.BytesAfter*4, res.BytesBefore, "the copy holds no free pages: %d -> %d bytes", res.BytesBefore, res.BytesAfter)
	fi, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, res.BytesAfter, fi.Size())
	// The copy holds the same records and passes the checks.
	a, _, _ := run("keys", "--db", db, "--json")
	b, _, _ := run("keys", "--db", out, "--json")
	require.JSONEq(t, a, b)
	_, _, code = run("check", "--db", out)
	require.Equal(t, 0, code)
	_, stderr, code := run("compact", "--db", db, "--out", out)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "exists")
	_, _, code = run("compact", "--db", db)
	require.Equal(t, 2, code)
}
