package command

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A usage counter an older version kept, damaged: on a bbolt file usage is
// counted from the records, so check does not read it and stats counts as
// before; recount removes the older version's counters (which it would
// trust again) and has nothing to mend; check is clean throughout.
func TestRecountOnAFileWithAnOlderVersionsCounters(t *testing.T) {
	t.Parallel()
	path := fixture(t)
	stats := func() inspect.TenantUsage {
		out, _, code := run("stats", "--db", path, "--json")
		require.Equal(t, 0, code)
		var st inspect.Stats
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		for _, u := range st.Tenants {
			if u.Tenant == "acme" {
				return u
			}
		}
		return inspect.TenantUsage{}
	}
	acme := stats()
	require.NotZero(t, acme.Records)

	usage := []byte("\x00oncekv/ledger.usage")
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(usage), "no counter is kept in the file")
		b, err := tx.CreateBucket(usage)
		if err != nil {
			return err
		}
		return b.Put([]byte("acme"), []byte("garbage"))
	})

	out, _, code := run("check", "--db", path)
	require.Equal(t, 0, code, out)
	require.Equal(t, acme, stats(), "counted from the records")

	out, stderr, code := run("recount", "--db", path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "every tenant's usage matched its records")
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(usage), "the older version's counters are gone")
		return nil
	})
	out, _, code = run("recount", "--db", path, "--json")
	require.Equal(t, 0, code)
	require.JSONEq(t, `[]`, out)
	out, _, code = run("check", "--db", path)
	require.Equal(t, 0, code, out)
}
