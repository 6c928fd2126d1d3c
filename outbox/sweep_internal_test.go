package outbox

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/retention"
)

// The sweeper re-checks state before it deletes (issue 13, item 17): an
// expiry-index entry for an event still pending never removes it.
func TestSweepNeverRemovesUnpublishedEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	db, clock := openClocked(t, t0)
	o := New(db)
	seq, _, err := o.Add(ctx, Event{ID: "unpublished", Topic: "t"})
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return publishedExpiry.Put(tx, t0, seqKey(seq)) }))
	clock.Advance(time.Hour)
	st, err := retention.Sweep(ctx, db, nil, RecordKind)
	require.NoError(t, err)
	require.Zero(t, st.Deleted())
	require.Equal(t, map[string]int{"unpublished": 1}, st.Kinds[retention.PublishedEvents].Skipped)
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
	db, clock := openClocked(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	o := New(db)
	r, err := NewRelay(o, &RelayConfig{Publisher: PublishFunc(func(context.Context, Event) error { return nil }), Retention: time.Hour})
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

// openClocked opens a database on a new file whose clock is a manual one
// at t0, closed when the test ends.
func openClocked(t *testing.T, t0 time.Time) (*kv.DB, *kvtest.ManualClock) {
	t.Helper()
	clock := kvtest.NewManualClock(t0)
	db, err := kv.Open(filepath.Join(t.TempDir(), "o.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db, clock
}
