package command

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompact(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out := filepath.Join(t.TempDir(), "compact.db")
	stdout, _, code := run("compact", "--db", db, "--out", out, "--json")
	require.Equal(t, 0, code)
	var res struct {
		BytesBefore int64 `json:"bytes_before"`
		BytesAfter  int64 `json:"bytes_after"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Positive(t, res.BytesBefore)
	require.Positive(t, res.BytesAfter)
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
