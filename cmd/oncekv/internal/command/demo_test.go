package command

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo runs the payments service under faults: zero duplicates, zero
// lost; the database it leaves lists its keys.
func TestDemo(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	out, stderr, code := run("demo", "--ops", "40", "--clients", "4", "--db", db, "--seed", "3", "--json")
	require.Equal(t, 0, code, stderr)
	// stdout is one JSON document; progress went to stderr (issue 13, item 13).
	var res demoResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Contains(t, stderr, "payments done")
	require.Equal(t, 40, res.Operations)
	require.Zero(t, res.Duplicates)
	require.Zero(t, res.Lost)
	require.Equal(t, 40, res.ProviderCharges)
	require.Greater(t, res.Attempts, int64(80))

	keys, _, code := run("keys", "--db", db, "--scope", "acme|POST /v1/orders", "--json")
	require.Equal(t, 0, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(keys), &list))
	require.Len(t, list, 80, "40 creates and 40 pays")
	_, _, code = run("check", "--db", db)
	require.Equal(t, 0, code)
}
