package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/observe"
)

var ctx = context.Background()

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type bundle struct {
	db    *kv.DB
	clock *kvtest.ManualClock
}

func setup(t *testing.T) *bundle {
	t.Helper()
	clock := kvtest.NewManualClock(t0)
	return &bundle{db: kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, inbox.RecordKind), clock: clock}
}

// apply adds amount to the consumer's balance: the state change a message causes.
func apply(amount int) func(tx kv.Tx) error {
	return func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("balance"))
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(b.Get([]byte("total"))))
		return b.Put([]byte("total"), []byte(strconv.Itoa(n+amount)))
	}
}

func balance(t *testing.T, db *kv.DB) int {
	var n int
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		if b := tx.Bucket([]byte("balance")); b != nil {
			n, _ = strconv.Atoi(string(b.Get([]byte("total"))))
		}
		return nil
	}))
	return n
}

func TestInboxDeduplicatesRedeliveries(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	in, err := inbox.New(bb.db, nil)
	require.NoError(t, err)

	// The same message delivered five times: applied once, acked every time.
	for i := range 5 {
		d, err := in.Handle(ctx, "billing", "msg-1", apply(10))
		require.NoError(t, err)
		require.True(t, d.Ack)
		require.Equal(t, i > 0, d.Duplicate)
	}
	require.Equal(t, 10, balance(t, bb.db))

	// A batch of ten, then the same batch redelivered out of order.
	for i := range 10 {
		_, err := in.Handle(ctx, "billing", fmt.Sprint("batch-", i), apply(1))
		require.NoError(t, err)
	}
	for _, i := range rand.Perm(10) {
		d, err := in.Handle(ctx, "billing", fmt.Sprint("batch-", i), apply(1))
		require.NoError(t, err)
		require.True(t, d.Duplicate)
	}
	require.Equal(t, 20, balance(t, bb.db))

	// Another consumer has its own inbox.
	d, err := in.Handle(ctx, "analytics", "msg-1", apply(100))
	require.NoError(t, err)
	require.False(t, d.Duplicate)
	require.Equal(t, 120, balance(t, bb.db))
	seen, err := in.Seen(ctx, "billing", "msg-1")
	require.NoError(t, err)
	require.True(t, seen)
}

func TestInboxHandlerErrorRollsBackTheMark(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	in, _ := inbox.New(bb.db, nil)
	boom := errors.New("downstream table locked")
	d, err := in.Handle(ctx, "billing", "m", func(tx kv.Tx) error {
		_ = apply(5)(tx)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.False(t, d.Ack, "not acknowledged: the broker redelivers")
	seen, _ := in.Seen(ctx, "billing", "m")
	require.False(t, seen)
	require.Zero(t, balance(t, bb.db))

	d, err = in.Handle(ctx, "billing", "m", apply(5))
	require.NoError(t, err)
	require.True(t, d.Ack)
	require.False(t, d.Duplicate, "the redelivery is applied")
	require.Equal(t, 5, balance(t, bb.db))
}

func TestInboxWindowAndValidation(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	in, err := inbox.New(bb.db, &inbox.Config{Retention: time.Hour})
	require.NoError(t, err)
	_, err = in.Handle(ctx, "c", "m", apply(1))
	require.NoError(t, err)
	bb.clock.Advance(59 * time.Minute)
	d, _ := in.Handle(ctx, "c", "m", apply(1))
	require.True(t, d.Duplicate)
	// Past the window the ID is forgotten: a redelivery this late is applied
	// again. That is why the window must exceed the broker's redelivery horizon.
	bb.clock.Advance(time.Minute)
	d, _ = in.Handle(ctx, "c", "m", apply(1))
	require.False(t, d.Duplicate)
	require.Equal(t, 2, balance(t, bb.db))

	for _, c := range [][2]string{{"", "m"}, {"c", ""}, {"c\x00", "m"}, {"c", strings.Repeat("m", 1025)}, {strings.Repeat("c", 256), "m"}} {
		_, err := in.Handle(ctx, c[0], c[1], apply(1))
		require.ErrorIs(t, err, inbox.ErrInvalidMessage)
		err = bb.db.Update(ctx, func(tx kv.Tx) error { _, err := in.MarkTx(tx, c[0], c[1]); return err })
		require.ErrorIs(t, err, inbox.ErrInvalidMessage, "MarkTx")
	}
	_, err = inbox.New(bb.db, &inbox.Config{Retention: -1})
	require.Error(t, err)
}

// Concurrent redeliveries of the same messages in random order: each is
// applied exactly once.
func TestInboxConcurrentRedeliveries(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	in, _ := inbox.New(bb.db, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for _, i := range rand.Perm(50) {
				d, err := in.Handle(ctx, "billing", fmt.Sprint("m-", i), apply(1))
				require.NoError(t, err)
				require.True(t, d.Ack)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 50, balance(t, bb.db))
	n := 0
	require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error {
		n = 0 // a read run again (etcd) starts afresh
		for _, err := range inbox.Entries(tx, "billing") {
			require.NoError(t, err)
			n++
		}
		return nil
	}))
	require.Equal(t, 50, n)
}

// Retentions past the time encoding once wrapped round: the inbox applied a
// message three times (issue 13, item 2). Config rejects them; a per-consumer
// function returning one is clamped to keyspace.Never.
func TestInboxRetentionPastTheTimeEncoding(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour} {
		_, err := inbox.New(nil, &inbox.Config{Retention: d})
		require.ErrorIs(t, err, inbox.ErrInvalidConfig, d)
	}
	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour, keyspace.MaxRetention} {
		bb := setup(t)
		in, err := inbox.New(bb.db, &inbox.Config{RetentionFor: func(string) time.Duration { return d }})
		require.NoError(t, err)
		for range 3 {
			_, err := in.Handle(ctx, "billing", "msg-1", func(tx kv.Tx) error { return kvtest.Increment(tx, "applied", "msg-1") })
			require.NoError(t, err)
			bb.clock.Advance(24 * time.Hour)
		}
		var applied int
		require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error { applied = kvtest.Counter(tx, "applied", "msg-1"); return nil }))
		require.Equal(t, 1, applied, "retention %s: the message was applied once", d)
	}
}

// RetentionFor overrides the window per consumer; 0 falls back to
// Retention. A mutant that swapped the two survived every test before
// (make mutate).
func TestInboxRetentionPerConsumer(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	in, err := inbox.New(bb.db, &inbox.Config{Retention: 24 * time.Hour, RetentionFor: func(c string) time.Duration {
		if c == "short" {
			return time.Hour
		}
		return 0
	}})
	require.NoError(t, err)
	for _, c := range []string{"short", "default"} {
		_, err := in.Handle(ctx, c, "m", apply(1))
		require.NoError(t, err)
	}
	bb.clock.Advance(2 * time.Hour)
	d, err := in.Handle(ctx, "short", "m", apply(1))
	require.NoError(t, err)
	require.False(t, d.Duplicate, "an hour's window has passed")
	d, err = in.Handle(ctx, "default", "m", apply(1))
	require.NoError(t, err)
	require.True(t, d.Duplicate, "0 falls back to the 24h Retention")
	require.Equal(t, 3, balance(t, bb.db))
}

// Entries of one consumer never include another consumer whose name it
// prefixes ("billing" and "billing-eu"); every delivery reaches the
// observer, duplicates marked.
func TestInboxEntriesAndObserver(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	var mu sync.Mutex
	seen := map[string][]bool{}
	obs := &observe.Observer{Message: func(_ context.Context, m observe.Message) {
		mu.Lock()
		seen[m.Consumer] = append(seen[m.Consumer], m.Duplicate)
		mu.Unlock()
	}}
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, Observer: obs}, inbox.RecordKind)
	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	for _, c := range []string{"billing", "billing-eu", "billing"} {
		_, err := in.Handle(ctx, c, "m1", apply(1))
		require.NoError(t, err)
	}
	_, err = in.Handle(ctx, "billing", "m2", apply(1))
	require.NoError(t, err)
	require.Equal(t, map[string][]bool{"billing": {false, true, false}, "billing-eu": {false}}, seen)
	var ids []string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		ids = nil // a read run again (etcd) starts afresh
		for e, err := range inbox.Entries(tx, "billing") {
			require.NoError(t, err)
			require.Equal(t, "billing", e.Consumer)
			ids = append(ids, e.MessageID)
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"m1", "m2"}, ids)
}

// A redelivery of a message already applied is answered without a write
// transaction (bbolt would still write and sync its meta page for an empty
// commit), and Seen of an ID never recorded without a read transaction.
func TestInboxDuplicatesCostNoWrite(t *testing.T) {
	if kvtest.Remote() {
		t.Skip("the directory is bbolt's (a backend with several writers looks every key up)")
	}
	t.Parallel()
	bb := setup(t)
	in, err := inbox.New(bb.db, nil)
	require.NoError(t, err)
	_, err = in.Handle(ctx, "billing", "m1", apply(5))
	require.NoError(t, err)

	writes := func() int64 { st := bb.db.Bolt().Stats().TxStats; return st.GetWrite() }
	reads := func() int { return bb.db.Bolt().Stats().TxN }
	before, r := writes(), reads()
	d, err := in.Handle(ctx, "billing", "m1", func(kv.Tx) error { panic("a duplicate ran its state change") })
	require.NoError(t, err)
	require.Equal(t, inbox.Delivery{Ack: true, Duplicate: true}, d)
	require.Equal(t, before, writes(), "a duplicate committed a write transaction")
	require.Equal(t, r, reads(), "a duplicate of a mark this process just wrote opened a read transaction")
	require.Equal(t, 5, balance(t, bb.db))

	r = reads()
	seen, err := in.Seen(ctx, "billing", "never")
	require.NoError(t, err)
	require.False(t, seen)
	require.Equal(t, r, reads(), "Seen of a new ID opened a read transaction")
	_, err = in.Seen(ctx, "billing", "")
	require.ErrorIs(t, err, inbox.ErrInvalidMessage)

	// Past its window the mark no longer answers: the redelivery is applied.
	bb.clock.Advance(8 * 24 * time.Hour)
	d, err = in.Handle(ctx, "billing", "m1", apply(5))
	require.NoError(t, err)
	require.Equal(t, inbox.Delivery{Ack: true}, d)
	require.Equal(t, 10, balance(t, bb.db))
}

// A damaged mark is listed as an *EntryError and the listing goes on. On
// the log a bit flipped in the stored ID turned "b" into "c": the
// listing once showed "c" twice (the look-up never trusted it), and now
// shows the damage.
func TestEntriesShowDamageNotAnotherID(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true}) // no check at cleanup: the damage stays
	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		_, err := in.Handle(ctx, "billing", id, apply(1))
		require.NoError(t, err)
	}
	spec := recstore.Spec{Name: "inbox"}
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		if err := recstore.FlushTail(tx, spec); err != nil {
			return err
		}
		name, k, ok := recstore.Locate(tx, spec, "billing", "b")
		require.True(t, ok)
		b := keyspace.Raw(tx).Bucket(name)
		v := append([]byte(nil), b.Get(k)...)
		v[3+1+len("billing")+1] ^= 0x01 // the ID's byte, on the log: "b" becomes "c"
		return b.Put(k, v)
	}))
	for _, consumer := range []string{"", "billing", "shipping"} {
		var entries []inbox.Entry
		var damaged []error
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			entries, damaged = kvtest.Split(inbox.Entries(tx, consumer))
			return nil
		}))
		var ids []string
		for _, e := range entries {
			ids = append(ids, e.MessageID)
		}
		for _, err := range damaged {
			var ee *inbox.EntryError
			require.ErrorAs(t, err, &ee)
			require.ErrorIs(t, err, kv.ErrCorrupt)
		}
		if consumer == "shipping" {
			// On the log the damaged entry's consumer cannot be trusted, so
			// it shows under every filter; a keyed store's key is not
			// damaged, and its filter holds.
			if db.Bolt() != nil {
				require.Len(t, damaged, 1)
			} else {
				require.Empty(t, damaged)
			}
			require.Empty(t, ids)
			continue
		}
		require.Len(t, damaged, 1, "consumer %q", consumer)
		require.ElementsMatch(t, []string{"a", "c"}, ids, "consumer %q", consumer)
	}
}

// SeenTx answers in the caller's transaction: a mark made earlier in that
// transaction is seen before it commits, one from before too, an unknown
// ID is not, a mark past its window is not; an invalid consumer or ID is
// refused as Seen refuses it (it was passed to the store unchecked).
func TestSeenTxInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	bb := setup(t)
	in, _ := inbox.New(bb.db, nil)
	_, err := in.Handle(ctx, "billing", "before", apply(1))
	require.NoError(t, err)
	require.NoError(t, bb.db.Update(ctx, func(tx kv.Tx) error {
		dup, err := in.MarkTx(tx, "billing", "same-tx")
		require.NoError(t, err)
		require.False(t, dup)
		for id, want := range map[string]bool{"same-tx": true, "before": true, "never": false} {
			seen, err := in.SeenTx(tx, "billing", id)
			require.NoError(t, err)
			require.Equal(t, want, seen, id)
		}
		seen, err := in.SeenTx(tx, "shipping", "before")
		require.NoError(t, err)
		require.False(t, seen, "another consumer's inbox")
		for _, bad := range [][2]string{{"", "m"}, {"billing", ""}} {
			_, err := in.SeenTx(tx, bad[0], bad[1])
			require.ErrorIs(t, err, inbox.ErrInvalidMessage, "%q/%q", bad[0], bad[1])
		}
		return nil
	}))
	bb.clock.Advance(8 * 24 * time.Hour)
	require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error {
		seen, err := in.SeenTx(tx, "billing", "before")
		require.NoError(t, err)
		require.False(t, seen, "past its window")
		return nil
	}))
}

// A damaged mark that still names its message answers that message with
// an error (whether it was handled cannot be read), so a broker would
// redeliver it forever; DropDamaged (the operator's decision) removes it,
// and the message is handled again. An intact mark is refused.
func TestDropDamagedMarkLetsTheMessageRunAgain(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "inbox.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	handled := 0
	handle := func(in *inbox.Inbox, id string) error {
		_, err := in.Handle(ctx, "billing", id, func(kv.Tx) error {
			if kvtest.Counts() {
				handled++
			}
			return nil
		})
		return err
	}
	require.NoError(t, handle(in, "msg-1"))
	require.NoError(t, handle(in, "msg-2"))
	require.NoError(t, db.Close())

	var damaged, intact string
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) (err error) {
		if intact, err = kvtest.DamageLogEntry(tx, "inbox", kvtest.Naming("", "msg-2"), func(v []byte) []byte { return v }); err != nil {
			return err
		}
		damaged, err = kvtest.DamageLogEntry(tx, "inbox", kvtest.Naming("", "msg-1"), func(v []byte) []byte {
			v[len(v)-6] ^= 0xff
			return v
		})
		return err
	})

	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	in, err = inbox.New(db, nil)
	require.NoError(t, err)
	handled = 0
	require.ErrorIs(t, handle(in, "msg-1"), kv.ErrCorrupt)
	require.Zero(t, handled)
	_, err = inbox.DropDamaged(ctx, db, entry(t, intact))
	require.ErrorIs(t, err, kv.ErrNotDamaged)
	dropped, err := inbox.DropDamaged(ctx, db, entry(t, damaged))
	require.NoError(t, err)
	require.Equal(t, kv.DroppedEntry{Kind: "inbox", Entry: entry(t, damaged), Scope: "billing", Key: "msg-1", Reason: "checksum mismatch"}, dropped)
	problems, err := db.Check(ctx, inbox.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, handle(in, "msg-1"))
	require.Equal(t, 1, handled, "handled again")
	require.NoError(t, handle(in, "msg-2"))
	require.Equal(t, 1, handled, "msg-2 still a duplicate")
}

// entry parses a log position as the check names it.
func entry(t *testing.T, hex string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(hex, 16, 64)
	require.NoError(t, err, "no such entry")
	return n
}
