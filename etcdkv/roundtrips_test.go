package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
)

// countingKV counts the requests a backend sends to etcd: each is a round
// trip.
type countingKV struct {
	clientv3.KV
	gets, txns atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.gets.Add(1)
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.txns.Add(1)
	return c.KV.Txn(ctx)
}

// count returns the requests sent since the last call.
func (c *countingKV) count() (gets, txns int64) { return c.gets.Swap(0), c.txns.Swap(0) }

// expect fails t unless want requests were sent since the last count.
func (c *countingKV) expect(t *testing.T, what string, want int64) {
	t.Helper()
	if gets, txns := c.count(); gets+txns != want {
		t.Errorf("%s: %d reads and %d transactions; want %d requests", what, gets, txns, want)
	}
}

// countedBackend returns a backend under prefix on a one-member cluster
// of its own, and the count of the requests it sends.
func countedBackend(t *testing.T, prefix string) (*etcdkv.Backend, *countingKV) {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Endpoints(), ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	counted := &countingKV{KV: cli.KV}
	cli.KV = counted
	b, err := etcdkv.New(cli, &etcdkv.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return b, counted
}

// countedDB is countedBackend opened as a kv.DB with opts, closed when
// the test ends.
func countedDB(t *testing.T, prefix string, opts *kv.Options) (*kv.DB, *countingKV) {
	t.Helper()
	b, counted := countedBackend(t, prefix)
	db, err := kv.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, counted
}

// On etcd, ledger.Do sends no read before its transaction: the
// transaction's own look-up answers a replay as cheaply (it writes
// nothing, so it sends no commit, and the observer counts none). That
// look-up reads the record and its tenant's usage counter in one request
// (a prefetch), so a new key costs two round trips, the read and the
// commit, and a replay one; so do a claim, its completion and a release.
func TestLedgerDoRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	var commits atomic.Int64
	db, counted := countedDB(t, "/trips/", &kv.Options{Observer: &observe.Observer{Commit: func(observe.Commit) { commits.Add(1) }}})
	l, err := ledger.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	do := func(key string) ledger.Result {
		t.Helper()
		req := ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: ledger.Fingerprint{1}}
		res, err := l.Do(ctx, req, func(tx kv.Tx) (ledger.Response, error) {
			bk, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err == nil {
				err = bk.Put([]byte(key), []byte("made"))
			}
			return ledger.Response{Status: 201, Body: []byte(key)}, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	do("warm-up") // the buckets, which the backend then knows exist
	counted.count()
	commits.Store(0)

	for i := range 3 {
		key := fmt.Sprintf("order-%d", i)
		if res := do(key); res.Replayed {
			t.Fatalf("%s: a new key replayed", key)
		}
		if gets, txns := counted.count(); gets+txns != 2 {
			t.Errorf("%s, new: %d reads and %d transactions; want 2 requests (the record and the usage counter in one, the commit)", key, gets, txns)
		}
		if n := commits.Swap(0); n != 1 {
			t.Errorf("%s, new: the observer counted %d commits, want 1", key, n)
		}
		if res := do(key); !res.Replayed || string(res.Response.Body) != key {
			t.Fatalf("%s: the retry got %+v, not the first answer", key, res)
		}
		if gets, txns := counted.count(); gets+txns != 1 {
			t.Errorf("%s, replayed: %d reads and %d transactions; want 1 request (the record)", key, gets, txns)
		}
		if n := commits.Swap(0); n != 0 {
			t.Errorf("%s, replayed: the observer counted %d commits, want none", key, n)
		}
	}

	req := ledger.Request{Scope: "acme|POST /v1/payments", Key: "pay-1", Fingerprint: ledger.Fingerprint{2}}
	out, err := l.Claim(ctx, req)
	if err != nil || out.Claim == nil {
		t.Fatalf("claim: %+v, %v", out, err)
	}
	if gets, txns := counted.count(); gets+txns != 2 {
		t.Errorf("claim: %d reads and %d transactions; want 2 requests", gets, txns)
	}
	if _, err := l.Complete(ctx, out.Claim, ledger.Response{Status: 200, Body: []byte("paid")}, nil); err != nil {
		t.Fatal(err)
	}
	if gets, txns := counted.count(); gets+txns != 2 {
		t.Errorf("complete: %d reads and %d transactions; want 2 requests", gets, txns)
	}
	out, err = l.Claim(ctx, ledger.Request{Scope: req.Scope, Key: "pay-2", Fingerprint: ledger.Fingerprint{3}})
	if err != nil || out.Claim == nil {
		t.Fatalf("claim: %+v, %v", out, err)
	}
	counted.count()
	if err := l.Release(ctx, out.Claim); err != nil {
		t.Fatal(err)
	}
	if gets, txns := counted.count(); gets+txns != 2 {
		t.Errorf("release: %d reads and %d transactions; want 2 requests", gets, txns)
	}
	u, err := l.Usage(ctx, "acme")
	if err != nil || u.Records != 5 {
		t.Errorf("usage %+v, %v: want the 5 records counted (the released claim's gone)", u, err)
	}
}

// Prefetch reads keys in one request at the transaction's revision, with
// the markers of buckets not known to exist: the Gets that follow send
// nothing and see the same values (absent included, and the
// transaction's own writes), and a key prefetched is compared at the
// commit like any key read: a write to it by another client in between
// makes the transaction run again.
func TestPrefetch(t *testing.T) {
	t.Parallel()
	b, counted := countedBackend(t, "/prefetch/")
	ctx := context.Background()
	k := func(bucket, key string) kv.BucketKey { return kv.BucketKey{Bucket: []byte(bucket), Key: []byte(key)} }
	prefetch := func(tx kv.Tx, keys ...kv.BucketKey) {
		tx.(interface{ Prefetch([]kv.BucketKey) }).Prefetch(keys)
	}
	if err := b.Update(ctx, func(tx kv.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("a"))
		if err != nil {
			return err
		}
		if err := bk.Put([]byte("x"), []byte("1")); err != nil {
			return err
		}
		return bk.Put([]byte("empty"), []byte{})
	}); err != nil {
		t.Fatal(err)
	}

	// The reads it serves.
	counted.count()
	if err := b.Update(ctx, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("a")) // known to exist: no request
		if err := bk.Put([]byte("own"), []byte("mine")); err != nil {
			return err
		}
		prefetch(tx, k("a", "x"), k("a", "empty"), k("a", "missing"), k("a", "own"), k("nobucket", "y"), k("a", "x"))
		if gets, txns := counted.count(); gets != 0 || txns != 1 {
			t.Errorf("the prefetch: %d reads and %d transactions, want one transaction", gets, txns)
		}
		if v := bk.Get([]byte("x")); string(v) != "1" {
			t.Errorf("x = %q after the prefetch", v)
		}
		if v := bk.Get([]byte("empty")); v == nil || len(v) != 0 {
			t.Errorf("empty = %#v after the prefetch, want an empty value, not absent", v)
		}
		if v := bk.Get([]byte("missing")); v != nil {
			t.Errorf("missing = %q after the prefetch", v)
		}
		if v := bk.Get([]byte("own")); string(v) != "mine" {
			t.Errorf("own = %q after the prefetch: the transaction's own write is what it reads", v)
		}
		if tx.Bucket([]byte("nobucket")) != nil {
			t.Error("a bucket that does not exist appeared")
		}
		if gets, txns := counted.count(); gets+txns != 0 {
			t.Errorf("the Gets after the prefetch: %d reads and %d transactions, want none (the unknown bucket's marker came with the prefetch)", gets, txns)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// A write by another client between the prefetch and the commit.
	runs := 0
	if err := b.Update(ctx, func(tx kv.Tx) error {
		runs++
		prefetch(tx, k("a", "x"))
		v := tx.Bucket([]byte("a")).Get([]byte("x"))
		if runs == 1 {
			if err := b.Update(ctx, func(tx kv.Tx) error { return tx.Bucket([]byte("a")).Put([]byte("x"), []byte("2")) }); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("a")).Put([]byte("copy"), append([]byte(nil), v...))
	}); err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Errorf("the transaction ran %d times, want 2: its prefetched read went stale", runs)
	}
	if err := b.View(ctx, func(tx kv.Tx) error {
		if v := tx.Bucket([]byte("a")).Get([]byte("copy")); string(v) != "2" {
			t.Errorf("copy = %q, want the value the second run read", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// conditional's writes prefetch as the ledger does: an insert, an upsert
// that inserts and a compare-and-set read the row and its unique index
// entries in one request before their commit, and an upsert that finds
// its row (a retry) sends that one request alone.
func TestConditionalRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	db, counted := countedDB(t, "/cond/", nil)
	type order struct {
		Ref, Tenant string
		Amount      int
	}
	orders, err := conditional.NewTable(db, "orders", &conditional.Options[order]{Indexes: []conditional.Index[order]{
		{Name: "by_ref", Key: func(o order) ([]byte, bool) { return conditional.Key(o.Tenant, o.Ref), true }},
		{Name: "by_amount", Key: func(o order) ([]byte, bool) { return []byte(fmt.Sprint(o.Amount)), o.Amount > 0 }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := orders.Insert(ctx, "o0", order{Ref: "r0", Tenant: "acme", Amount: 1}); err != nil { // the buckets
		t.Fatal(err)
	}
	counted.count()

	if _, err := orders.Insert(ctx, "o1", order{Ref: "r1", Tenant: "acme", Amount: 2}); err != nil {
		t.Fatal(err)
	}
	counted.expect(t, "insert", 2)
	res, err := orders.Upsert(ctx, "by_ref", "o2", order{Ref: "r2", Tenant: "acme", Amount: 3}, nil)
	if err != nil || !res.Created {
		t.Fatalf("upsert: %+v, %v", res, err)
	}
	counted.expect(t, "an upsert that inserts", 2)
	res, err = orders.Upsert(ctx, "by_ref", "o2", order{Ref: "r2", Tenant: "acme", Amount: 3}, nil)
	if err != nil || res.Created || res.Row.ID != "o2" {
		t.Fatalf("the upsert again: %+v, %v", res, err)
	}
	counted.expect(t, "the upsert again", 1)
	cas, err := orders.CompareAndSet(ctx, "o1", 1, order{Ref: "r1", Tenant: "acme", Amount: 4})
	if err != nil || !cas.Applied {
		t.Fatalf("compare-and-set: %+v, %v", cas, err)
	}
	counted.expect(t, "compare-and-set", 2)
	if _, err := orders.Insert(ctx, "o3", order{Ref: "r3", Tenant: "acme", Amount: 4}); !errors.Is(err, conditional.ErrUniqueViolation) {
		t.Fatalf("an insert whose amount o1 has: %v, want a unique violation", err)
	}
	counted.expect(t, "an insert refused", 1)
	row, err := orders.GetByIndex(ctx, "by_amount", []byte("4"))
	if err != nil || row.ID != "o1" || row.Version != 2 {
		t.Errorf("by amount 4: %+v, %v; want o1 at version 2", row, err)
	}
}

// An event added to the outbox on etcd reads its ID's index entry and the
// three places its drawn number may be taken in one request before its
// commit; a message the inbox handles reads its mark and commits, and a
// redelivery reads the mark alone.
func TestOutboxAndInboxRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	db, counted := countedDB(t, "/messages/", nil)
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := outbox.New(db)
	ctx := context.Background()
	apply := func(tx kv.Tx) error {
		_, _, err := out.AddTx(tx, outbox.Event{ID: "warm-up", Topic: "orders", Payload: []byte("{}")})
		return err
	}
	if _, err := in.Handle(ctx, "billing", "warm-up", apply); err != nil { // the buckets
		t.Fatal(err)
	}
	counted.count()
	for i := range 3 {
		seq, added, err := out.Add(ctx, outbox.Event{ID: fmt.Sprint("order.paid/", i), Topic: "orders", Payload: []byte("{}")})
		if err != nil || !added {
			t.Fatalf("add %d: %v, %v", i, added, err)
		}
		counted.expect(t, fmt.Sprint("add ", i), 2)
		if again, added, err := out.Add(ctx, outbox.Event{ID: fmt.Sprint("order.paid/", i), Topic: "orders"}); err != nil || added || again != seq {
			t.Fatalf("add %d again: %d, %v, %v; want the first's %d, not added", i, again, added, err, seq)
		}
		counted.count()
		d, err := in.Handle(ctx, "billing", fmt.Sprint("msg-", i), func(kv.Tx) error { return nil })
		if err != nil || d.Duplicate {
			t.Fatalf("handle %d: %+v, %v", i, d, err)
		}
		counted.expect(t, fmt.Sprint("handle ", i), 2)
		if d, err := in.Handle(ctx, "billing", fmt.Sprint("msg-", i), func(kv.Tx) error { return nil }); err != nil || !d.Duplicate {
			t.Fatalf("redelivery %d: %+v, %v", i, d, err)
		}
		counted.expect(t, fmt.Sprint("redelivery ", i), 1)
	}
}
