package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
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

// quarantinedFile writes a database file whose outbox holds the events
// ids, every one quarantined (the broker refused each, MaxAttempts 1).
func quarantinedFile(t *testing.T, ids ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	ob := outbox.New(db)
	require.NoError(t, db.Update(context.Background(), func(tx kv.Tx) error {
		for _, id := range ids {
			if _, _, err := ob.AddTx(tx, outbox.Event{ID: id, Topic: "orders"}); err != nil {
				return err
			}
		}
		return nil
	}))
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{MaxAttempts: 1,
		Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error { return errors.New("broker down") })})
	require.NoError(t, err)
	st, err := relay.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(ids), st.Quarantined)
	require.NoError(t, db.Close())
	return path
}

// More quarantined events than the listing carries: the first ones, and a
// line that says how many more and what moves them all.
func TestOutboxListsTheFirstQuarantined(t *testing.T) {
	t.Parallel()
	n := inspect.MaxListedQuarantined + 7
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("ev-%04d", i))
	}
	path := quarantinedFile(t, ids...)
	out, _, code := run("outbox", "--db", path)
	require.Equal(t, 0, code)
	require.Regexp(t, fmt.Sprintf(`quarantined\s+%d`, n), out)
	require.Equal(t, inspect.MaxListedQuarantined, strings.Count(out, "broker down"))
	require.Contains(t, out, "... and 7 more")
}

// oncekv outbox requeue: one event by ID, then --all; an event not in
// quarantine is refused; the arguments are checked.
func TestOutboxRequeue(t *testing.T) {
	t.Parallel()
	path := quarantinedFile(t, "ev-a", "ev-b", "ev-c")
	out, _, code := run("outbox", "requeue", "--db", path, "ev-b")
	require.Equal(t, 0, code)
	require.Regexp(t, `requeued\s+1`, out)
	_, errOut, code := run("outbox", "requeue", "--db", path, "ev-b")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "not quarantined")
	_, _, code = run("outbox", "requeue", "--db", path)
	require.Equal(t, 2, code, "an ID or --all")
	_, _, code = run("outbox", "requeue", "--db", path, "--all", "ev-a")
	require.Equal(t, 2, code, "not both")
	out, _, code = run("outbox", "requeue", "--db", path, "--all")
	require.Equal(t, 0, code)
	require.Regexp(t, `requeued\s+2`, out)
	out, _, code = run("outbox", "--db", path)
	require.Equal(t, 0, code)
	require.Regexp(t, `pending\s+3`, out)
	require.Regexp(t, `quarantined\s+0`, out)
}
