package inspect_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/outbox"
)

// On a backend that runs a read again after a failed attempt (etcd), every
// listing gives what one run gives: each key, intent, event and message
// once, each count once. They gathered into what a first run had left.
func TestListingsOnARetriedRead(t *testing.T) {
	// Both handles present the file as another backend would (records
	// under their keys, no directory): one reads once, one twice.
	file := kvtest.Open(t, &kv.Options{NoSync: true})
	db, err := kv.New(passthrough{file}, nil)
	require.NoError(t, err)
	fixtureOn(t, db)
	in := must(inbox.New(db, nil))
	_, err = in.Handle(ctx, "billing", "msg-1", func(kv.Tx) error { return nil })
	require.NoError(t, err)
	ob := outbox.New(db)
	for _, id := range []string{"ev-1", "ev-2"} {
		_, _, err := ob.Add(ctx, outbox.Event{ID: id, Topic: "orders"})
		require.NoError(t, err)
	}
	_, err = must(outbox.NewRelay(ob, &outbox.RelayConfig{MaxAttempts: 1,
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			if e.ID == "ev-2" {
				return errors.New("broker refuses it")
			}
			return nil
		})})).RunOnce(ctx)
	require.NoError(t, err)
	_, _, err = ob.Add(ctx, outbox.Event{ID: "ev-3", Topic: "orders"}) // pending
	require.NoError(t, err)

	retried, err := kv.New(kvtest.RetriedViews(file), nil)
	require.NoError(t, err)
	once, twice := must(inspect.New(db)), must(inspect.New(retried))

	keys, err := once.Keys(ctx, inspect.KeysQuery{})
	require.NoError(t, err)
	again, err := twice.Keys(ctx, inspect.KeysQuery{})
	require.NoError(t, err)
	require.Equal(t, keys, again)

	intents, err := once.Intents(ctx, "", 0)
	require.NoError(t, err)
	intentsAgain, err := twice.Intents(ctx, "", 0)
	require.NoError(t, err)
	require.Equal(t, intents, intentsAgain)

	o, err := once.Outbox(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, o.Pending)
	require.Equal(t, 1, o.Quarantined)
	oAgain, err := twice.Outbox(ctx)
	require.NoError(t, err)
	o.OldestAgeSeconds, oAgain.OldestAgeSeconds = 0, 0 // the clock moved
	require.Equal(t, o, oAgain)

	msgs, err := once.Inbox(ctx, "", 0)
	require.NoError(t, err)
	msgsAgain, err := twice.Inbox(ctx, "", 0)
	require.NoError(t, err)
	require.Equal(t, msgs, msgsAgain)

	st, err := once.Stats(ctx)
	require.NoError(t, err)
	stAgain, err := twice.Stats(ctx)
	require.NoError(t, err)
	st.Path, stAgain.Path = "", ""
	st.Buckets, stAgain.Buckets = nil, nil // page figures: the wrapper is no bbolt file
	st.FreePages, st.PendingPages, st.FreeBytes, st.FileBytes = 0, 0, 0, 0
	stAgain.FreePages, stAgain.PendingPages, stAgain.FreeBytes, stAgain.FileBytes = 0, 0, 0, 0
	require.Equal(t, st.Counts, stAgain.Counts)
	require.Equal(t, st.Tenants, stAgain.Tenants)
}

// passthrough presents a database as a backend of its own.
type passthrough struct{ kv.Backend }
