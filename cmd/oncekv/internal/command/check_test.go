package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("check", "--db", db)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok: no problems found")

	// Break an index entry: the check finds it and exits 1.
	b, err := bolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(record.ReservedPrefix+"table/orders/idx/by_ref")).Put([]byte("ghost-ref"), []byte("ord_ghost"))
	}))
	require.NoError(t, b.Close())
	out, stderr, code := run("check", "--db", db)
	require.Equal(t, 1, code)
	require.Contains(t, out, `orders: index "by_ref" key "ghost-ref" points to missing row "ord_ghost"`)
	require.Contains(t, stderr, "1 problems found")
	out, _, _ = run("check", "--db", db, "--json")
	var ps []inspect.Problem
	require.NoError(t, json.Unmarshal([]byte(out), &ps))
	require.Equal(t, "conditional", ps[0].Check)
}

func TestCorruptAndNewerFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	require.NoError(t, os.WriteFile(garbage, []byte("this is not a bbolt file, just some bytes......................"), 0o600))
	_, stderr, code := run("keys", "--db", garbage)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "is not a bbolt database")

	newer := filepath.Join(dir, "newer.db")
	kvtest.WriteFormat(t, newer, kv.FormatVersion+1)
	_, stderr, code = run("stats", "--db", newer)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, fmt.Sprintf("has oncekv format version %d, this build reads up to %d", kv.FormatVersion+1, kv.FormatVersion))

	missing := filepath.Join(dir, "missing.db")
	_, stderr, code = run("keys", "--db", missing)
	require.Equal(t, 1, code)
	_, notFound := os.Stat(missing) // the system's words: "no such file or directory" on Unix
	require.Contains(t, stderr, errors.Unwrap(notFound).Error())
}
