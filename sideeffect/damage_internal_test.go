package sideeffect

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// One damaged intent once made Intents (and so every listing: the CLI,
// the console) fail as a whole, hiding the intents an operator needs to
// requeue or resolve. It is yielded as an *IntentError naming it, and the
// iteration goes on.
func TestIntentsGoesOnPastADamagedIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	x, err := New(db, &Config{Handlers: map[string]Handler{"charge": {Provider: ProviderFunc{}}}})
	require.NoError(t, err)
	var ids []string
	for _, key := range []string{"1", "2", "3"} {
		in, _, err := x.Create(ctx, Spec{Kind: "charge", Subject: "order/" + key, Key: key, Purpose: "charge"})
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	victim := ids[1]
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := intentsNS.Bucket(tx)
		v := kvtest.Damage(b.Get([]byte(victim)), 1, 20, []byte{0x40})
		return b.Put([]byte(victim), v)
	}))

	for _, state := range []State{0, StatePending, StateSucceeded} {
		var intents []*Intent
		var errs []error
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			intents, errs = kvtest.Split(Intents(tx, state))
			return nil
		}))
		var listed []string
		for _, in := range intents {
			listed = append(listed, in.ID)
		}
		require.Len(t, errs, 1, "state %v", state)
		var ie *IntentError
		require.ErrorAs(t, errs[0], &ie)
		require.ErrorIs(t, ie, kv.ErrCorrupt)
		require.Equal(t, victim, ie.ID)
		if state == StateSucceeded {
			require.Empty(t, listed)
		} else {
			require.ElementsMatch(t, []string{ids[0], ids[2]}, listed, "state %v", state)
		}
	}
	_, err = x.Get(ctx, victim)
	var ie *IntentError
	require.True(t, errors.As(err, &ie) && ie.ID == victim, "Get: %v", err)
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.NotEmpty(t, problems)
}

// An intent stored in a layout this version does not know (a newer
// oncekv's, or damage that kept the checksum) is refused by name, never
// decoded as if it were another layout.
func TestUnknownIntentLayoutIsRefused(t *testing.T) {
	t.Parallel()
	var e record.Encoder
	e.Reset(record.KindIntent, 99)
	e.String("charge")
	_, err := decodeIntent([]byte("id"), e.Finish())
	require.ErrorIs(t, err, kv.ErrCorrupt)
	require.ErrorContains(t, err, "unknown intent layout 99")
}

// A damaged intent that is due cannot be attempted: the reconciler logs it
// and leaves it alone for PollInterval instead of picking it at every pass,
// at once, for ever (the check reports it; an operator drops or mends it).
func TestDamagedDueIntentIsLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := kvtest.NewManualClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock})
	x, err := New(db, &Config{Handlers: map[string]Handler{"charge": {Provider: ProviderFunc{}}}})
	require.NoError(t, err)
	in, _, err := x.Create(ctx, Spec{Kind: "charge", Subject: "order/1", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := intentsNS.Bucket(tx)
		return b.Put([]byte(in.ID), kvtest.Damage(b.Get([]byte(in.ID)), 1, 20, []byte{0x40}))
	}))
	clock.Advance(time.Minute)

	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, RunStats{Examined: 1, Errors: 1}, st)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, RunStats{Held: 1}, st, "held")
	clock.Advance(x.Config().PollInterval)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, RunStats{Examined: 1, Errors: 1}, st, "tried again after the hold")
}
