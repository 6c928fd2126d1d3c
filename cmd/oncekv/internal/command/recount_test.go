package command

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A usage counter that does not decode: check names it and says what
// mends it; recount mends it (and says what it changed); check is clean
// after, and a second recount has nothing to do.
func TestRecountMendsADamagedCounter(t *testing.T) {
	t.Parallel()
	path := fixture(t)
	out, _, code := run("stats", "--db", path, "--json")
	require.Equal(t, 0, code)
	var st inspect.Stats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	var acme inspect.TenantUsage
	for _, u := range st.Tenants {
		if u.Tenant == "acme" {
			acme = u
		}
	}
	require.NotZero(t, acme.Records)

	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("\x00oncekv/ledger.usage")).Put([]byte("acme"), []byte("garbage"))
	})

	out, _, code = run("check", "--db", path)
	require.Equal(t, 1, code)
	require.Contains(t, out, `usage of tenant "acme"`)
	require.Contains(t, out, "oncekv recount")

	out, stderr, code := run("recount", "--db", path)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `TENANT\s+WAS RECORDS\s+WAS BYTES\s+DAMAGED COUNTERS\s+RECORDS\s+BYTES`, out)
	require.Regexp(t, `acme\s+0\s+0\s+1\s+`, out)
	require.Contains(t, out, "(1 tenants mended)")

	out, _, code = run("check", "--db", path)
	require.Equal(t, 0, code, out)
	out, _, code = run("recount", "--db", path, "--json")
	require.Equal(t, 0, code)
	require.JSONEq(t, `[]`, out)
	out, _, code = run("stats", "--db", path, "--json")
	require.Equal(t, 0, code)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Contains(t, st.Tenants, acme, "counted as before the damage")
}
