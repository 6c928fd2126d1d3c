package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// countingKV counts the requests a backend sends to etcd (each is a round
// trip), and the keys its reads name: a Get's, and those of a Txn without
// compares (a prefetch).
type countingKV struct {
	clientv3.KV
	gets, txns atomic.Int64
	failed     atomic.Int64 // Txns whose compares failed
	mu         sync.Mutex
	read       []string
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.gets.Add(1)
	c.mu.Lock()
	c.read = append(c.read, key)
	c.mu.Unlock()
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.txns.Add(1)
	return &countingTxn{Txn: c.KV.Txn(ctx), c: c}
}

// countingTxn records the keys of a Txn that only reads.
type countingTxn struct {
	clientv3.Txn
	c        *countingKV
	compared bool
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.compared = true
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	if !t.compared {
		t.c.mu.Lock()
		for _, op := range ops {
			t.c.read = append(t.c.read, string(op.KeyBytes()))
		}
		t.c.mu.Unlock()
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && !resp.Succeeded {
		t.c.failed.Add(1)
	}
	return resp, err
}

// count returns the requests sent since the last call.
func (c *countingKV) count() (gets, txns int64) {
	c.mu.Lock()
	c.read = nil
	c.mu.Unlock()
	return c.gets.Swap(0), c.txns.Swap(0)
}

// reads returns the keys read since the last count.
func (c *countingKV) reads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.read)
}

// expect fails t unless want requests were sent since the last count.
func (c *countingKV) expect(t *testing.T, what string, want int64) {
	t.Helper()
	if gets, txns := c.count(); gets+txns != want {
		t.Errorf("%s: %d reads and %d transactions; want %d requests", what, gets, txns, want)
	}
}

// countedBackend returns a backend with opts on a one-member cluster of
// its own, and the count of the requests it sends.
func countedBackend(t *testing.T, opts *etcdkv.Options) (*etcdkv.Backend, *countingKV) {
	t.Helper()
	cli := client(t, etcdtest.Start(t, etcdtest.Options{Members: 1}))
	counted := &countingKV{KV: cli.KV}
	cli.KV = counted
	b, err := etcdkv.New(cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b, counted
}

// client returns a client of cluster c, closed when the test ends.
func client(t *testing.T, c interface{ Endpoints() string }) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Endpoints(), ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// withGuessing runs test with guessing on and off (etcdkv.Options.NoGuessing),
// in parallel subtests.
func withGuessing(t *testing.T, test func(t *testing.T, guessing bool)) {
	for _, guessing := range []bool{true, false} {
		t.Run(fmt.Sprint("guessing=", guessing), func(t *testing.T) {
			t.Parallel()
			test(t, guessing)
		})
	}
}

// countedDB is countedBackend opened as a kv.DB with opts, closed when
// the test ends.
func countedDB(t *testing.T, backend *etcdkv.Options, opts *kv.Options) (*kv.DB, *countingKV) {
	t.Helper()
	b, counted := countedBackend(t, backend)
	return dbOn(t, b, opts), counted
}

// dbOn opens b as a kv.DB with opts, closed when the test ends.
func dbOn(t *testing.T, b kv.Backend, opts *kv.Options) *kv.DB {
	t.Helper()
	db, err := kv.New(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// On etcd, ledger.Do sends no read before its transaction: the
// transaction's own look-up answers a replay as cheaply (it writes
// nothing, so it sends no commit, and the observer counts none). That
// look-up guesses that a new request's record is absent, and takes its
// tenant's usage counter as this process last wrote it (etcdkv's
// guessing), so a new key costs one round trip, the commit, once the
// counter has been read once; a replay costs one, the record's read, and
// so do a claim's completion and a release, whose record and counter the
// claim's commit left known. With guessing off, the look-up reads the
// record and the counter in one request (a prefetch): a new key costs two
// round trips, and a claim, its completion and a release two each.
func TestLedgerDoRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	withGuessing(t, ledgerRoundTrips)
}

func ledgerRoundTrips(t *testing.T, guessing bool) {
	var commits atomic.Int64
	db, counted := countedDB(t, &etcdkv.Options{Prefix: "/trips/", NoGuessing: !guessing},
		&kv.Options{Observer: &observe.Observer{Commit: func(observe.Commit) { commits.Add(1) }}})
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
	// expect checks the requests since the last count: want of them, or
	// with guessing, want and one read more of a usage counter not read
	// before (never the record of key).
	expect := func(what, key string, want, wantGuessing int64) {
		t.Helper()
		reads := counted.reads()
		gets, txns := counted.count()
		if !guessing {
			if gets+txns != want {
				t.Errorf("%s: %d reads and %d transactions; want %d requests", what, gets, txns, want)
			}
			return
		}
		counters := int64(0)
		for _, k := range reads {
			if strings.Contains(k, key) {
				t.Errorf("%s: read %q, the record its first attempt should have guessed", what, k)
			}
			if strings.Contains(k, "acme\x00") {
				counters++
			}
		}
		if gets+txns != wantGuessing+counters || counters > 1 {
			t.Errorf("%s: %d reads and %d transactions, %d of them reads of usage counters; want %d requests and at most one such read", what, gets, txns, counters, wantGuessing)
		}
	}
	do("warm-up") // the buckets, which the backend then knows exist
	counted.count()
	commits.Store(0)

	for i := range 3 {
		key := fmt.Sprintf("order-%d", i)
		if res := do(key); res.Replayed {
			t.Fatalf("%s: a new key replayed", key)
		}
		expect(key+", new", key, 2, 1)
		if n := commits.Swap(0); n != 1 {
			t.Errorf("%s, new: the observer counted %d commits, want 1", key, n)
		}
		if res := do(key); !res.Replayed || string(res.Response.Body) != key {
			t.Fatalf("%s: the retry got %+v, not the first answer", key, res)
		}
		// With guessing, the retry's first attempt finds the record this
		// process wrote, and decides on it; since it then writes
		// nothing, nothing confirms the guess, and the record is read.
		counted.expect(t, key+", replayed", 1)
		if n := commits.Swap(0); n != 0 {
			t.Errorf("%s, replayed: the observer counted %d commits, want none", key, n)
		}
	}

	req := ledger.Request{Scope: "acme|POST /v1/payments", Key: "pay-1", Fingerprint: ledger.Fingerprint{2}}
	out, err := l.Claim(ctx, req)
	if err != nil || out.Claim == nil {
		t.Fatalf("claim: %+v, %v", out, err)
	}
	expect("claim", "pay-1", 2, 1)
	if _, err := l.Complete(ctx, out.Claim, ledger.Response{Status: 200, Body: []byte("paid")}, nil); err != nil {
		t.Fatal(err)
	}
	expect("complete", "pay-1", 2, 1)
	out, err = l.Claim(ctx, ledger.Request{Scope: req.Scope, Key: "pay-2", Fingerprint: ledger.Fingerprint{3}})
	if err != nil || out.Claim == nil {
		t.Fatalf("claim: %+v, %v", out, err)
	}
	counted.count()
	if err := l.Release(ctx, out.Claim); err != nil {
		t.Fatal(err)
	}
	expect("release", "pay-2", 2, 1)
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
	b, counted := countedBackend(t, &etcdkv.Options{Prefix: "/prefetch/", NoGuessing: true}) // guess_test.go tests its guesses
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
// its row (a retry) sends that one request alone. With guessing, an
// insert and an upsert that inserts take the row and its entries as
// absent, and commit in one request; a compare-and-set reads the entries
// of its new values (the row is the one this process wrote).
func TestConditionalRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	withGuessing(t, conditionalRoundTrips)
}

func conditionalRoundTrips(t *testing.T, guessing bool) {
	db, counted := countedDB(t, &etcdkv.Options{Prefix: "/cond/", NoGuessing: !guessing}, nil)
	news := int64(2) // an insert's requests
	if guessing {
		news = 1
	}
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
	counted.expect(t, "insert", news)
	res, err := orders.Upsert(ctx, "by_ref", "o2", order{Ref: "r2", Tenant: "acme", Amount: 3}, nil)
	if err != nil || !res.Created {
		t.Fatalf("upsert: %+v, %v", res, err)
	}
	counted.expect(t, "an upsert that inserts", news)
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
// commit, and a message the inbox handles reads its mark so; with
// guessing, both take what they read as absent and commit in one
// request. A redelivery reads the mark alone.
func TestOutboxAndInboxRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	withGuessing(t, messageRoundTrips)
}

func messageRoundTrips(t *testing.T, guessing bool) {
	db, counted := countedDB(t, &etcdkv.Options{Prefix: "/messages/", NoGuessing: !guessing}, nil)
	adds := int64(2) // the requests of an event's add, and of a message's handling
	if guessing {
		adds = 1
	}
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
		counted.expect(t, fmt.Sprint("add ", i), adds)
		if again, added, err := out.Add(ctx, outbox.Event{ID: fmt.Sprint("order.paid/", i), Topic: "orders"}); err != nil || added || again != seq {
			t.Fatalf("add %d again: %d, %v, %v; want the first's %d, not added", i, again, added, err, seq)
		}
		counted.count()
		d, err := in.Handle(ctx, "billing", fmt.Sprint("msg-", i), func(kv.Tx) error { return nil })
		if err != nil || d.Duplicate {
			t.Fatalf("handle %d: %+v, %v", i, d, err)
		}
		counted.expect(t, fmt.Sprint("handle ", i), adds)
		if d, err := in.Handle(ctx, "billing", fmt.Sprint("msg-", i), func(kv.Tx) error { return nil }); err != nil || !d.Duplicate {
			t.Fatalf("redelivery %d: %+v, %v", i, d, err)
		}
		counted.expect(t, fmt.Sprint("redelivery ", i), 1)
	}
}

// A new side-effect intent on etcd reads its key before its commit, or
// with guessing takes it as absent and commits in one request; creating
// it again (a retry) reads it and writes nothing.
func TestIntentRoundTripsOnEtcd(t *testing.T) {
	t.Parallel()
	withGuessing(t, func(t *testing.T, guessing bool) {
		db, counted := countedDB(t, &etcdkv.Options{Prefix: "/intents/", NoGuessing: !guessing}, nil)
		x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: providertest.New(providertest.Rates{}, 1)}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		spec := func(key string) sideeffect.Spec {
			return sideeffect.Spec{Kind: "charge", Subject: "order/" + key, Scope: "acme|POST /v1/orders", Key: key, Purpose: "charge", Payload: []byte("100")}
		}
		if _, _, err := x.Create(ctx, spec("warm-up")); err != nil { // the buckets
			t.Fatal(err)
		}
		counted.count()
		news := int64(2)
		if guessing {
			news = 1
		}
		for i := range 3 {
			key := fmt.Sprint("o-", i)
			if _, created, err := x.Create(ctx, spec(key)); err != nil || !created {
				t.Fatalf("%s: created %v, %v", key, created, err)
			}
			counted.expect(t, key+", new", news)
			if _, created, err := x.Create(ctx, spec(key)); err != nil || created {
				t.Fatalf("%s again: created %v, %v", key, created, err)
			}
			counted.expect(t, key+", again", 1)
		}
	})
}
