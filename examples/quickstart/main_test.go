package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuickstartRuns(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	runErr := run(context.Background(), filepath.Join(t.TempDir(), "q.db"))
	os.Stdout = stdout
	require.NoError(t, w.Close())
	out, _ := io.ReadAll(r)
	require.NoError(t, runErr)
	for _, want := range []string{
		"attempt 1: 201",
		"attempt 2: 201 {\"id\":\"ord_1\",\"status\":\"pending\"} (replayed=true)",
		"attempt 3: rejected: ledger: idempotency key",
		"a retry during the lease: ledger: idempotency key \"pay-ord-1\"",
		"version 2 (takeover=true)",
		"worker A wakes up and completes: ledger: claim on key \"pay-ord-1\"",
		"a late retry is replayed: 200",
		"consistency check: 0 problems",
	} {
		require.True(t, bytes.Contains(out, []byte(want)), "missing %q in:\n%s", want, out)
	}
}
