package sideeffect

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/retention"
)

// The sweepers re-check state before they delete; mutations that dropped
// the checks survived every test (issue 13, item 17). Here the expiry
// indexes say "due" for a pending intent and a parked one: both stay.
func TestSweepNeverRemovesLiveIntents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := kvtest.NewManualClock(t0)
	db, err := kv.Open(filepath.Join(t.TempDir(), "s.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	defer db.Close()
	x, err := New(db, &Config{Handlers: map[string]Handler{"charge": {Provider: ProviderFunc{}}}})
	require.NoError(t, err)
	pending, _, err := x.Create(ctx, Spec{Kind: "charge", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	parked, _, err := x.Create(ctx, Spec{Kind: "charge", Key: "2", Purpose: "charge"})
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
		return nil
	}))
	clock.Advance(time.Hour)
	st, err := retention.Sweep(ctx, db, nil, RecordKind)
	require.NoError(t, err)
	require.Zero(t, st.Deleted())
	require.Equal(t, map[string]int{"index mismatch": 2}, st.Kinds[retention.FinishedIntents].Skipped, "their expiry is zero, not the entry's time")

	// Even an index entry at the exact (bogus) expiry of a live intent.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for _, id := range []string{pending.ID, parked.ID} {
			in, err := loadIntent(tx, id)
			require.NoError(t, err)
			in.ExpiresAt = t0
			var e record.Encoder
			require.NoError(t, intentsNS.Bucket(tx).Put([]byte(id), encodeIntentWith(&e, nil, in)))
		}
		return nil
	}))
	st, err = retention.Sweep(ctx, db, nil, RecordKind)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"pending": 1, "needs_attention": 1}, st.Kinds[retention.FinishedIntents].Skipped)
	for _, id := range []string{pending.ID, parked.ID} {
		_, err := x.Get(ctx, id)
		require.NoError(t, err)
	}
}
