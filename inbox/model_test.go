package inbox_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/retention"
)

const modelWindow = 2500 * time.Millisecond // times move in whole seconds: no expiry falls on "now"

var (
	modelConsumers = []string{"billing", "shipping"}
	modelMessages  = []string{"m1", "m2", "m3"}
	errHandler     = errors.New("handler failed")
)

// applyCount adds one to the message's count: the state change whose
// number of runs the model checks.
func applyCount(consumer, id string) func(tx kv.Tx) error {
	return func(tx kv.Tx) error { return kvtest.Increment(tx, "applied", consumer+"/"+id) }
}

// FuzzInboxAgainstAModel plays deliveries (handlers that succeed or fail),
// marks in a caller's transaction that commits or rolls back, Seen, clock
// moves, sweeps and reopens against a model of the inbox, and after each
// step compares every answer, the listing and the state changes: a
// message applied once per window, never again while its mark is live, a
// failed or rolled-back delivery leaving nothing behind, and a redelivery
// after the window (or a sweep) applied again.
func FuzzInboxAgainstAModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 2, 0, 3, 2, 0, 0})       // applied, a duplicate, Seen, past the window, applied again
	f.Add([]byte{0, 1, 0, 0, 1, 2, 1, 1, 2, 0})       // a failing handler, then a delivery that applies
	f.Add([]byte{1, 3, 1, 2, 3, 4, 0, 0, 0, 5, 0, 0}) // a rolled-back mark, a committed one, a sweep, a reopen
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 300 {
			return
		}
		clock := kvtest.NewManualClock(t0)
		path := filepath.Join(t.TempDir(), "in.db")
		opts := &kv.Options{NoSync: true, Clock: clock}
		db := kvtest.OpenPath(t, path, opts, inbox.RecordKind)
		open := func() *inbox.Inbox {
			in, err := inbox.New(db, &inbox.Config{Retention: modelWindow})
			if err != nil {
				t.Fatal(err)
			}
			return in
		}
		in := open()
		marks := map[string]time.Time{} // consumer/id -> expiry of its mark
		applied := map[string]int{}
		input := &kvtest.Input{Data: data}
		next := input.Next
		for step := 0; input.More(); step++ {
			op, arg := next()%6, next()
			c, id := modelConsumers[int(arg)%2], modelMessages[int(arg/2)%3]
			k := c + "/" + id
			now := clock.Now()
			exp, marked := marks[k]
			live := marked && now.Before(exp)
			what := fmt.Sprintf("step %d: op %d on %s", step, op, k)
			switch op {
			case 0: // a delivery; its handler fails when arg's high bit is set
				fn := applyCount(c, id)
				fails := arg&0x80 != 0
				if fails {
					fn = func(kv.Tx) error { return errHandler }
				}
				d, err := in.Handle(ctx, c, id, fn)
				switch {
				case live && (err != nil || !d.Duplicate || !d.Ack):
					t.Fatalf("%s: a live mark, but Handle gave %+v, %v", what, d, err)
				case live:
				case fails && !errors.Is(err, errHandler):
					t.Fatalf("%s: a failing handler, but Handle gave %+v, %v", what, d, err)
				case fails:
				case err != nil || d.Duplicate || !d.Ack:
					t.Fatalf("%s: a new delivery, but Handle gave %+v, %v", what, d, err)
				default:
					marks[k], applied[k] = now.Add(modelWindow), applied[k]+1
				}
			case 1: // a mark in the caller's transaction, rolled back when arg's high bit is set
				rollback := arg&0x80 != 0
				var dup bool
				err := db.Update(ctx, func(tx kv.Tx) error {
					var err error
					if dup, err = in.MarkTx(tx, c, id); err != nil || dup {
						return err
					}
					if err := applyCount(c, id)(tx); err != nil {
						return err
					}
					if rollback {
						return errHandler
					}
					return nil
				})
				switch {
				case live && (err != nil || !dup):
					t.Fatalf("%s: a live mark, but MarkTx gave duplicate %t, %v", what, dup, err)
				case live:
				case rollback && !errors.Is(err, errHandler):
					t.Fatalf("%s: rolled back, but Update gave %v", what, err)
				case rollback:
				case err != nil || dup:
					t.Fatalf("%s: a new mark, but MarkTx gave duplicate %t, %v", what, dup, err)
				default:
					marks[k], applied[k] = now.Add(modelWindow), applied[k]+1
				}
			case 2:
				seen, err := in.Seen(ctx, c, id)
				if err != nil || seen != live {
					t.Fatalf("%s: Seen %t, %v; the model's mark is live: %t", what, seen, err, live)
				}
			case 3:
				clock.Advance(time.Duration(int(arg)%3+1) * time.Second)
			case 4:
				if _, err := retention.Sweep(ctx, db, &retention.Config{MaxTxTime: time.Hour}, inbox.RecordKind); err != nil {
					t.Fatalf("%s: sweep: %v", what, err)
				}
				for k, exp := range marks {
					if !now.Before(exp) {
						delete(marks, k)
					}
				}
			case 5:
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db = kvtest.OpenPath(t, path, opts, inbox.RecordKind)
				in = open()
			}
			compareInbox(t, what, db, marks, applied)
		}
	})
}

// compareInbox checks the stored marks (expired ones not yet swept
// included) and the state changes against the model.
func compareInbox(t *testing.T, at string, db *kv.DB, marks map[string]time.Time, applied map[string]int) {
	t.Helper()
	stored := map[string]time.Time{}
	var counts map[string]int
	err := db.View(ctx, func(tx kv.Tx) error {
		entries, errs := kvtest.Split(inbox.Entries(tx, ""))
		if len(errs) > 0 {
			return errs[0]
		}
		for _, e := range entries {
			stored[e.Consumer+"/"+e.MessageID] = e.ExpiresAt
		}
		counts = kvtest.Counters(tx, "applied")
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", at, err)
	}
	if len(stored) != len(marks) {
		t.Fatalf("%s: %d marks stored, the model has %d: %v against %v", at, len(stored), len(marks), stored, marks)
	}
	for k, exp := range marks {
		if got, ok := stored[k]; !ok || !got.Equal(exp) {
			t.Fatalf("%s: mark %s stored %t expiring %v; the model's expires %v", at, k, ok, got, exp)
		}
	}
	for k, n := range applied {
		if counts[k] != n {
			t.Fatalf("%s: %s applied %d times; the model says %d", at, k, counts[k], n)
		}
	}
	if len(counts) != len(applied) {
		t.Fatalf("%s: state changes %v; the model's %v", at, counts, applied)
	}
}
