package outbox

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A damaged entry of the ID index (event ID -> sequence) once panicked
// Add (a value shorter than a sequence), and one naming another event's
// sequence made Add treat the other event as this one's: a published,
// expired event was deleted in its place and the ID added a second time,
// and a requeue put the other event back in the queue. Each is now an
// error wrapping kv.ErrCorrupt, and nothing is written.
func TestADamagedIDIndexIsAnError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o := withEvents(t, "a", "b", "c")
	setIndex := func(id string, v []byte) {
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return outboxIDsNS.Bucket(tx).Put([]byte(id), v) }))
	}
	counts := func() map[EventState]int {
		m := map[EventState]int{}
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			for _, st := range []EventState{EventPending, EventPublished, EventQuarantined} {
				for _, err := range Events(tx, st) {
					require.NoError(t, err)
					m[st]++
				}
			}
			return nil
		}))
		return m
	}
	before := counts()

	setIndex("a", []byte{1, 2, 3}) // not a sequence
	var err error
	require.NotPanics(t, func() { _, _, err = o.Add(ctx, Event{ID: "a", Topic: "t"}) })
	require.ErrorIs(t, err, kv.ErrCorrupt)

	setIndex("a", seqKey(2)) // b's sequence
	_, added, err := o.Add(ctx, Event{ID: "a", Topic: "t"})
	require.ErrorIs(t, err, kv.ErrCorrupt)
	require.False(t, added)
	require.ErrorContains(t, err, `"b"`)

	setIndex("a", seqKey(99)) // no event at all
	_, _, err = o.Add(ctx, Event{ID: "a", Topic: "t"})
	require.ErrorIs(t, err, kv.ErrCorrupt)

	setIndex("a", seqKey(2))
	require.ErrorIs(t, o.Requeue(ctx, "a"), kv.ErrCorrupt)
	require.Equal(t, before, counts(), "nothing was written")

	setIndex("a", seqKey(1)) // repaired: a retry of a is a duplicate again
	_, added, err = o.Add(ctx, Event{ID: "a", Topic: "t"})
	require.NoError(t, err)
	require.False(t, added)
}

// One damaged event is yielded by Events as an *EventError naming its
// sequence, and the iteration goes on: a listing (the CLI's, the
// console's) shows the others and the damage.
func TestEventsGoesOnPastADamagedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := withEvents(t, "a", "b", "c")
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := outboxNS.Bucket(tx)
		v := append([]byte(nil), b.Get(seqKey(2))...)
		return b.Put(seqKey(2), v[:len(v)-3])
	}))
	var evs []*Event
	var errs []error
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		evs, errs = kvtest.Split(Events(tx, EventPending))
		return nil
	}))
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.ID)
	}
	require.Len(t, errs, 1)
	var ee *EventError
	require.ErrorAs(t, errs[0], &ee)
	require.ErrorIs(t, ee, kv.ErrCorrupt)
	require.Equal(t, []string{"a", "c"}, ids)
	require.Equal(t, uint64(2), ee.Seq)
	require.Contains(t, ee.Error(), "seq 2")
}

// withEvents opens a database and adds pending events with these IDs
// (sequences 1, 2, ...).
func withEvents(t *testing.T, ids ...string) (*kv.DB, *Outbox) {
	t.Helper()
	db, _ := openClocked(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	o := New(db)
	for _, id := range ids {
		_, _, err := o.Add(context.Background(), Event{ID: id, Topic: "t"})
		require.NoError(t, err)
	}
	return db, o
}

// One damaged pending event stopped the relay for good: its pass failed
// on it before publishing anything, the events before it included, and
// every pass after. The relay now passes over it (as it passes over a
// quarantined one) and says so in PassStats.Damaged; the lag still counts
// it, and the check names it.
func TestTheRelayGoesOnPastADamagedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o := withEvents(t, "a", "b", "c")
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := outboxNS.Bucket(tx)
		v := append([]byte(nil), b.Get(seqKey(2))...)
		return b.Put(seqKey(2), v[:len(v)-3])
	}))
	var published []string
	var logged bytes.Buffer
	r, err := NewRelay(o, &RelayConfig{Publisher: PublishFunc(func(_ context.Context, ev Event) error {
		published = append(published, ev.ID)
		return nil
	}), Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	require.NoError(t, err)
	st, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, published, "in order, past the damage")
	require.Equal(t, 2, st.Published)
	require.Equal(t, 1, st.Damaged)
	logs := func() int { return strings.Count(logged.String(), "outbox events damaged on disk are passed over") }
	require.Equal(t, 1, logs(), "logged at the first pass that meets it")
	st, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, PassStats{Damaged: 1}, st, "nothing more to publish; the damage is still there")
	require.Equal(t, 1, logs(), "logged once, not at every pass: %s", logged.String())
	lag, err := o.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, Lag{Damaged: 1}, lag, "damaged, apart from the events waiting to be published")
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.NotEmpty(t, problems)

	// The operator drops it (a published event that decodes is refused).
	_, err = DropDamaged(ctx, db, 1)
	require.ErrorIs(t, err, kv.ErrNotDamaged)
	dropped, err := DropDamaged(ctx, db, 2)
	require.NoError(t, err)
	require.Equal(t, "outbox", dropped.Kind)
	require.Equal(t, uint64(2), dropped.Entry)
	require.NotEmpty(t, dropped.Reason)
	_, err = DropDamaged(ctx, db, 2)
	require.ErrorIs(t, err, kv.ErrNoEntry)
	lag, err = o.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, Lag{}, lag)
	problems, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems, "its ID index entry went with it")
	st, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, PassStats{}, st)
	require.Equal(t, 1, logs(), "nothing to say once it is gone")
}

// A damaged published event is dropped with its expiry-index entry: the
// check is clean after.
func TestDropADamagedPublishedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o := withEvents(t, "a", "b")
	r, err := NewRelay(o, &RelayConfig{Publisher: PublishFunc(func(context.Context, Event) error { return nil })})
	require.NoError(t, err)
	st, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Published)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		return publishedNS.Bucket(tx).Put(seqKey(1), []byte("garbage"))
	}))
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.NotEmpty(t, problems)
	_, err = DropDamaged(ctx, db, 1)
	require.NoError(t, err)
	problems, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// RequeueAll moves the quarantined events that decode and leaves a
// damaged one where it is, for DropDamaged; its batches go on past it.
func TestRequeueAllLeavesADamagedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o := withEvents(t, "a", "b", "c", "d", "e")
	r, err := NewRelay(o, &RelayConfig{Publisher: PublishFunc(func(context.Context, Event) error { return errors.New("down") }), MaxAttempts: 1})
	require.NoError(t, err)
	st, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, st.Quarantined)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := quarantineNS.Bucket(tx)
		v := append([]byte(nil), b.Get(seqKey(2))...)
		return b.Put(seqKey(2), v[:len(v)-3])
	}))
	var moved, batches int
	var after []byte
	for {
		var n int
		var next []byte
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			var err error
			n, next, err = o.requeueSome(tx, after, 2) // two a transaction: the damaged one shares a batch
			return err
		}))
		moved += n
		batches++
		if next == nil {
			break
		}
		after = next
	}
	require.Equal(t, 4, moved)
	require.Equal(t, 3, batches)
	n, err := o.RequeueAll(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the damaged one stays")
	lag, err := o.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, Lag{Pending: 4, Quarantined: 1}, lag)
	_, err = DropDamaged(ctx, db, 2)
	require.NoError(t, err)
}

// With several writers too (the whole queue read at once), a damaged
// pending event is passed over and counted, and the others go out.
func TestAReadingPassesOverADamagedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, o := severalWritersOutbox(t)
	var seqs []uint64
	for _, id := range []string{"a", "b", "c"} {
		seq, _, err := o.Add(ctx, Event{ID: id, Topic: "t"})
		require.NoError(t, err)
		seqs = append(seqs, seq)
	}
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := outboxNS.Bucket(tx)
		v := append([]byte(nil), b.Get(seqKey(seqs[1]))...)
		return b.Put(seqKey(seqs[1]), v[:len(v)-3])
	}))
	var published []string
	r, err := NewRelay(o, &RelayConfig{Publisher: PublishFunc(func(_ context.Context, ev Event) error {
		published = append(published, ev.ID)
		return nil
	})})
	require.NoError(t, err)
	st, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, published)
	require.Equal(t, 1, st.Damaged)
}
