package command

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSweep(t *testing.T) {
	t.Parallel()
	db := fixture(t) // old-1 expired 90 minutes ago
	out, stderr, code := run("sweep", "--db", db, "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "WOULD DELETE")
	before, _, _ := run("keys", "--db", db, "--expired")
	require.Contains(t, before, "old-1")

	out, _, code = run("sweep", "--db", db, "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"kind": "idempotency"`)
	after, _, _ := run("keys", "--db", db, "--expired")
	require.NotContains(t, after, "old-1")
	// The live claim and the parked intent are never swept.
	out, _, _ = run("keys", "--db", db, "--status", "in_progress")
	require.Contains(t, out, "pay-1")
	out, _, _ = run("intents", "--db", db, "--state", "needs_attention")
	require.Contains(t, out, "order/ord_2")
	_, _, code = run("check", "--db", db)
	require.Equal(t, 0, code)
}

// The SKIPPED column names each reason with its count, in a stable order.
func TestSweepSkippedColumn(t *testing.T) {
	t.Parallel()
	require.Equal(t, "-", skipped(nil))
	require.Equal(t, "live lease=2", skipped(map[string]int{"live lease": 2}))
	require.Equal(t, "live lease=1,pending=3", skipped(map[string]int{"pending": 3, "live lease": 1}))
}
