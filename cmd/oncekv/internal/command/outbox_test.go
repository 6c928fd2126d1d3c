package command

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

func TestOutbox(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("outbox", "--db", db)
	require.Equal(t, 0, code)
	require.Regexp(t, `pending\s+1`, out)
	require.Regexp(t, `quarantined\s+1`, out)
	require.Regexp(t, `ev-poison\s+order.paid\s+1\s+broker rejects ev-poison`, out)
	out, _, _ = run("outbox", "--db", db, "--json")
	var ob inspect.Outbox
	require.NoError(t, json.Unmarshal([]byte(out), &ob))
	require.Equal(t, 1, ob.Pending)
	require.Equal(t, 2, ob.Published)
	require.Equal(t, "ev-pending", ob.OldestPending[0].ID)
	require.Equal(t, "ev-poison", ob.QuarantinedEvents[0].ID)
}
