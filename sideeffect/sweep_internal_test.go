package sideeffect

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/retention"
)

// The sweepers re-check state before they delete; mutations that dropped
// the checks survived every test (issue 13, item 17). Here the expiry
// indexes say "due" for a pending intent, a parked one and an unpublished
// event: all must stay.
func TestSweepNeverRemovesLiveIntentsOrUnpublishedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := kv.NewManualClock(t0)
	db, err := kv.Open(filepath.Join(t.TempDir(), "s.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	defer db.Close()
	x, err := New(db, Config{Handlers: map[string]Handler{"charge": {Provider: ProviderFunc{}}}})
	require.NoError(t, err)
	o := NewOutbox(db)
	pending, _, err := x.Create(ctx, Spec{Kind: "charge", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	parked, _, err := x.Create(ctx, Spec{Kind: "charge", Key: "2", Purpose: "charge"})
	require.NoError(t, err)
	seq, _, err := o.Add(ctx, Event{ID: "unpublished", Topic: "t"})
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		in, err := loadIntent(tx, parked.ID)
		require.NoError(t, err)
		prev := *in
		in.State = StateNeedsAttention
		require.NoError(t, storeIntent(tx, in, &prev))
		// Index entries that should not exist, as a bug or a crash in an
		// older version could leave them.
		for _, id := range []string{pending.ID, parked.ID} {
			require.NoError(t, intentExp.Put(tx, t0, []byte(id)))
		}
		return publishedExpiry.Put(tx, t0, seqKey(seq))
	}))
	clock.Advance(time.Hour)
	st, err := retention.Sweep(ctx, db, &retention.Config{Kinds: []retention.Kind{retention.FinishedIntents, retention.PublishedEvents}})
	require.NoError(t, err)
	require.Zero(t, st.Deleted())
	require.Equal(t, map[string]int{"index mismatch": 2}, st.Kinds[retention.FinishedIntents].Skipped, "their expiry is zero, not the entry's time")
	require.Equal(t, map[string]int{"unpublished": 1}, st.Kinds[retention.PublishedEvents].Skipped)

	// Even an index entry at the exact (bogus) expiry of a live intent.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for _, id := range []string{pending.ID, parked.ID} {
			in, err := loadIntent(tx, id)
			require.NoError(t, err)
			in.ExpiresAt = t0
			var e kv.Encoder
			require.NoError(t, intentsNS.Bucket(tx).Put([]byte(id), encodeIntent(&e, in)))
		}
		return nil
	}))
	st, err = retention.Sweep(ctx, db, &retention.Config{Kinds: []retention.Kind{retention.FinishedIntents}})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pending": 1, "needs_attention": 1}, st.Kinds[retention.FinishedIntents].Skipped)
	for _, id := range []string{pending.ID, parked.ID} {
		_, err := x.Get(ctx, id)
		require.NoError(t, err)
	}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n := 0
		for range Events(tx, EventPending) {
			n++
		}
		require.Equal(t, 1, n)
		return nil
	}))
}

// An outbox ID counts as present until its published event's retention has
// passed, whether or not a sweep has run: a re-add before is refused, a
// re-add after is a new event.
func TestOutboxReAddRespectsRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := kv.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	db, err := kv.Open(filepath.Join(t.TempDir(), "o.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	defer db.Close()
	o := NewOutbox(db)
	r, err := NewRelay(o, RelayConfig{Publisher: PublishFunc(func(context.Context, Event) error { return nil }), Retention: time.Hour})
	require.NoError(t, err)
	_, added, err := o.Add(ctx, Event{ID: "e", Topic: "t"})
	require.NoError(t, err)
	require.True(t, added)
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	clock.Advance(59 * time.Minute)
	_, added, err = o.Add(ctx, Event{ID: "e", Topic: "t"})
	require.NoError(t, err)
	require.False(t, added, "still within the published event's retention")
	clock.Advance(time.Minute)
	seq, added, err := o.Add(ctx, Event{ID: "e", Topic: "t"})
	require.NoError(t, err)
	require.True(t, added, "past its retention the ID is forgotten")
	require.Equal(t, uint64(2), seq)
}
