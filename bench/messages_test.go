package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
)

// BenchmarkInboxMark compares applying a message with its inbox mark in one
// transaction (inbox.Inbox.Handle) with the bare business write (NoSync).
func BenchmarkInboxMark(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	bare, db := openDB(b, "bare", opts), openDB(b, "oncekv", opts)
	in, err := inbox.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	writePairs(b, bare, func(i int, k []byte) error {
		_, err := in.Handle(ctx, "billing", string(key("msg", i)), func(tx kv.Tx) error { return putOrder(tx, k) })
		return err
	})
}

// BenchmarkInboxDuplicate compares answering the redelivery of a message
// already applied (inbox.Inbox.Handle of a recorded ID: a read
// transaction, no commit) with a bare bbolt View reading a value. Durable:
// a duplicate commits nothing, so the disk must not show up.
func BenchmarkInboxDuplicate(b *testing.B) {
	const n = 10000
	bare, db := openDB(b, "bare", &kv.Options{}), openDB(b, "oncekv", &kv.Options{})
	in, err := inbox.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	l, err := ledger.New(openDB(b, "fill", &kv.Options{NoSync: true}), nil)
	if err != nil {
		b.Fatal(err)
	}
	fillReplays(b, l, bare, n) // the bare side's values
	ids := make([]string, n)
	for i := range ids {
		ids[i] = string(key("msg", i))
	}
	for i := 0; i < n; i += 1000 {
		err := db.Update(ctx, func(tx kv.Tx) error {
			for _, id := range ids[i:min(i+1000, n)] {
				if _, err := in.MarkTx(tx, "billing", id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var p pair
	var sink []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := key("idem", i%n)
		p.timeBare(func() { sink = bareRead(bare, k, sink) })
		p.timeSubject(func() {
			d, err := in.Handle(ctx, "billing", ids[i%n], func(kv.Tx) error { return errors.New("bench: a duplicate ran") })
			if err != nil || !d.Duplicate {
				b.Fatalf("not a duplicate: %v", err)
			}
		})
	}
	_ = sink
	p.report(b)
}

// BenchmarkOutboxAdd compares the business write plus its outbox event in
// one transaction with the bare business write (NoSync).
func BenchmarkOutboxAdd(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	bare, db := openDB(b, "bare", opts), openDB(b, "oncekv", opts)
	ob := outbox.New(db)
	writePairs(b, bare, func(_ int, k []byte) error {
		return db.Update(ctx, func(tx kv.Tx) error {
			if err := putOrder(tx, k); err != nil {
				return err
			}
			_, _, err := ob.AddTx(tx, outbox.Event{ID: string(k), Topic: "order.created", Key: string(k), Payload: orderValue})
			return err
		})
	})
}

// BenchmarkRelayThroughput measures events per second from a filled outbox
// to an in-memory publisher, in batches, durable marks (fsync on).
func BenchmarkRelayThroughput(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db := openDB(b, "relay", nil)
			ob := outbox.New(db)
			err := db.Update(ctx, func(tx kv.Tx) error {
				for i := range b.N {
					if _, _, err := ob.AddTx(tx, outbox.Event{ID: fmt.Sprint("e-", i), Topic: "t", Payload: orderValue}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			sink := outbox.PublishFunc(func(context.Context, outbox.Event) error { return nil })
			r, _ := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: sink, BatchSize: batch})
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			st, err := r.RunOnce(ctx)
			if err != nil || st.Published != b.N {
				b.Fatalf("published %d of %d: %v", st.Published, b.N, err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkInboxWorkers is a consumer: 16 workers, each handling one
// message after another (inbox.Inbox.Handle: the business write and the
// message's mark in one group-committed transaction), durable, against 16
// workers doing the bare business write through the same group commit;
// without and with kv.Options.GatherCallers. It reports both rates, their
// ratio and the operations per commit of each side.
func BenchmarkInboxWorkers(b *testing.B) {
	const workers = 16
	for _, gather := range []bool{false, true} {
		b.Run(fmt.Sprint("gather=", gather), func(b *testing.B) {
			bare, bareCommits := openCounted(b, "bare", gather)
			db, commits := openCounted(b, "oncekv", gather)
			in, err := inbox.New(db, nil)
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			bareOps := func() error {
				k := key("ord", int(next.Add(1)))
				return bare.Batch(ctx, func(tx kv.Tx) error { return putOrder(tx, k) })
			}
			inboxOps := func() error {
				i := int(next.Add(1))
				k := key("ord", i)
				_, err := in.Handle(ctx, "billing", string(key("msg", i)), func(tx kv.Tx) error { return putOrder(tx, k) })
				return err
			}
			b.ResetTimer()
			bareTook, err := pool(workers, b.N, bareOps)
			if err != nil {
				b.Fatal(err)
			}
			took, err := pool(workers, b.N, inboxOps)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/bareTook.Seconds(), "bare-ops/s")
			b.ReportMetric(float64(b.N)/took.Seconds(), "oncekv-ops/s")
			b.ReportMetric(bareTook.Seconds()/took.Seconds(), "ratio")
			b.ReportMetric(float64(b.N)/float64(bareCommits.Load()), "bare-batch")
			b.ReportMetric(float64(b.N)/float64(commits.Load()), "batch")
		})
	}
}

// openCounted opens a durable database (with GatherCallers as gather)
// that counts its commits, as the harness does.
func openCounted(b *testing.B, name string, gather bool) (*kv.DB, *atomic.Int64) {
	cs := &commitStats{}
	cs.db = openDB(b, name, &kv.Options{GatherCallers: gather, Observer: &observe.Observer{Commit: cs.add}})
	return cs.db, &cs.n
}

// pool runs op n times from workers goroutines, each calling it again as
// soon as it returns, and returns how long that took.
func pool(workers, n int, op func() error) (time.Duration, error) {
	var left atomic.Int64
	left.Store(int64(n))
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := op(); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return 0, *e
	}
	return time.Since(start), nil
}
