package command

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

func TestGet(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "create-1")
	require.Equal(t, 0, code)
	require.Regexp(t, `status\s+completed`, out)
	require.Regexp(t, `response status\s+201`, out)
	require.Regexp(t, `header Content-Type\s+application/json`, out)
	require.Regexp(t, `fingerprint\s+01000000`, out)
	require.NotContains(t, out, `{"id":"ord_1"}`, "the body only with --body")

	out, _, _ = run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "create-1", "--body")
	require.Regexp(t, `body \(text\)\s+\{"id":"ord_1"\}`, out)
	out, _, _ = run("get", "--db", db, "--scope", "globex|POST /v1/orders", "--key", "create-1", "--body")
	require.Regexp(t, `body \(hex\)\s+00ff10`, out)

	out, _, code = run("get", "--db", db, "--scope", "acme|POST /v1/orders/{id}/pay", "--key", "pay-1", "--json")
	require.Equal(t, 0, code)
	var r inspect.Record
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "in_progress", r.Status)
	require.NotNil(t, r.LeaseExpiresAt)

	_, stderr, code := run("get", "--db", db, "--scope", "acme|POST /v1/orders", "--key", "missing")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `no record for key "missing"`)
	_, _, code = run("get", "--db", db, "--scope", "x")
	require.Equal(t, 2, code)
}
