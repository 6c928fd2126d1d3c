package command

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/oldformat"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// A file of format 1 is refused by the read commands with a message naming
// migrate; migrate upgrades it; then the read commands work, and a second
// migrate says there is nothing to do.
func TestMigrate(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	oldformat.WriteFormat1(t, path, func(l *ledger.Ledger, _ *inbox.Inbox) {
		for i := range 5 {
			_, err := l.Do(context.Background(), ledger.Request{Scope: "acme|POST /v1/orders", Key: fmt.Sprintf("k-%d", i), Fingerprint: ledger.Fingerprint{1}},
				func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201, Body: []byte("{}")}, nil })
			require.NoError(t, err)
		}
	})
	_, stderr, code := run("keys", "--db", path)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "oncekv migrate --db "+path)

	out, stderr, code := run("migrate", "--db", path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "migrated from format 1 to 3: 5 idempotency records in the log")

	out, _, code = run("keys", "--db", path)
	require.Equal(t, 0, code)
	require.Contains(t, out, "k-4")
	out, _, code = run("migrate", "--db", path)
	require.Equal(t, 0, code)
	require.Contains(t, out, "already at format 3")
}
