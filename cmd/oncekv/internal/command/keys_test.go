package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

func TestKeys(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("keys", "--db", db)
	require.Equal(t, 0, code)
	require.Contains(t, out, "SCOPE")
	require.Regexp(t, `acme\|POST /v1/orders\s+create-1\s+completed\s+1\s+201`, out)
	require.Regexp(t, `acme\|POST /v1/orders/\{id\}/pay\s+pay-1\s+in_progress`, out)
	require.NotContains(t, out, "old-1", "expired records are not listed by default")
	require.Contains(t, out, "(4 keys)")

	out, _, code = run("keys", "--db", db, "--json")
	require.Equal(t, 0, code)
	var keys []inspect.Key
	require.NoError(t, json.Unmarshal([]byte(out), &keys))
	require.Len(t, keys, 4)
	require.Equal(t, "acme|POST /v1/orders", keys[0].Scope)
	require.Equal(t, "create-1", keys[0].Key)
	require.Equal(t, 201, keys[0].ResponseStatus)
	for _, field := range []string{`"scope"`, `"key"`, `"status"`, `"version"`, `"created_at"`, `"expires_at"`, `"stored_bytes"`} {
		require.Contains(t, out, field)
	}

	out, _, _ = run("keys", "--db", db, "--scope", "globex|", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &keys))
	require.Len(t, keys, 1)
	out, _, _ = run("keys", "--db", db, "--status", "in_progress")
	require.Contains(t, out, "pay-1")
	require.Contains(t, out, "(1 keys)")
	out, _, _ = run("keys", "--db", db, "--expired")
	require.Contains(t, out, "old-1")
	require.Contains(t, out, "completed (expired)")
	out, _, _ = run("keys", "--db", db, "--limit", "2")
	require.Contains(t, out, "(2 keys)")

	_, stderr, code := run("keys", "--db", db, "--status", "done")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--status must be in_progress or completed")
	for _, cmd := range []string{"keys", "inbox"} {
		// With --addr the admin endpoint refuses it; the file said "all".
		_, stderr, code = run(cmd, "--db", db, "--limit", "-1")
		require.Equal(t, 2, code, cmd)
		require.Contains(t, stderr, "--limit must be 0 (all) or more, not -1", cmd)
	}
	_, _, code = run("keys", "--db", db, "--nope")
	require.Equal(t, 2, code)
	_, stderr, code = run("keys")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--db FILE (or --etcd ENDPOINTS) is required")
	out, _, code = run("keys", "--help")
	require.Equal(t, 0, code)
	require.True(t, strings.Contains(out, "Examples:") || strings.Contains(out, "Example"))
}
