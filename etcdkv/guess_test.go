package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// twoProcesses returns two backends on one cluster and prefix, as two
// replicas of a service would have, the first with opts (its prefix
// replaced) and its requests counted.
func twoProcesses(t *testing.T, opts etcdkv.Options) (a, b *etcdkv.Backend, counted *countingKV) {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ca := client(t, c)
	counted = &countingKV{KV: ca.KV}
	ca.KV = counted
	opts.Prefix = "/guess/"
	var err error
	if a, err = etcdkv.New(ca, &opts); err != nil {
		t.Fatal(err)
	}
	if b, err = etcdkv.New(client(t, c), &etcdkv.Options{Prefix: opts.Prefix}); err != nil {
		t.Fatal(err)
	}
	return a, b, counted
}

// bk names key in bucket "a".
func bk(key string, absent bool) kv.BucketKey {
	return kv.BucketKey{Bucket: []byte("a"), Key: []byte(key), Absent: absent}
}

func prefetch(tx kv.Tx, keys ...kv.BucketKey) {
	tx.(interface{ Prefetch([]kv.BucketKey) }).Prefetch(keys)
}

func put(t *testing.T, b *etcdkv.Backend, key, val string) {
	t.Helper()
	if err := b.Update(context.Background(), func(tx kv.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("a"))
		if err != nil {
			return err
		}
		return bk.Put([]byte(key), []byte(val))
	}); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, b *etcdkv.Backend, key string) string {
	t.Helper()
	var v string
	if err := b.View(context.Background(), func(tx kv.Tx) error {
		v = string(tx.Bucket([]byte("a")).Get([]byte(key)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// copyOf is a transaction that reads key (prefetched, absent as marked)
// and writes what it read under "copy-"+key; runs counts its runs.
func copyOf(key string, absent bool, runs *int) func(kv.Tx) error {
	return func(tx kv.Tx) error {
		*runs++
		prefetch(tx, bk(key, absent))
		bucket := tx.Bucket([]byte("a"))
		v := bucket.Get([]byte(key))
		if v == nil {
			v = []byte("none")
		}
		return bucket.Put([]byte("copy-"+key), v)
	}
}

// A write transaction's first attempt guesses what its prefetch names:
// the value this process last wrote or read, or absent where the caller
// marked a key so. A guess another process made wrong never commits: the
// commit's compares fail, the same request reads back what the guesses
// should have been, and the second attempt commits on those. A guess that
// holds saves the prefetch's request.
func TestGuessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, counted := twoProcesses(t, etcdkv.Options{})
	put(t, a, "k", "1") // a remembers k = 1, and that bucket a exists
	put(t, a, "own", "x")

	// copyRuns runs copyOf(key, absent) on a and returns its runs.
	copyRuns := func(key string, absent bool) (runs int) {
		t.Helper()
		if err := a.Update(ctx, copyOf(key, absent, &runs)); err != nil {
			t.Fatal(err)
		}
		return runs
	}
	// A guess that holds: no read, one commit. (It also keeps the
	// stale guesses below from pausing guessing: TestGuessingPausesWhileItFails.)
	holds := func() {
		t.Helper()
		counted.count()
		runs := copyRuns("own", false)
		if gets, txns := counted.count(); gets+txns != 1 || runs != 1 {
			t.Errorf("a remembered key: %d reads and %d transactions in %d runs; want the commit alone, in one run", gets, txns, runs)
		}
	}
	holds()
	runs := copyRuns("new", true)
	if gets, txns := counted.count(); gets+txns != 1 || runs != 1 || get(t, a, "copy-new") != "none" {
		t.Errorf("a key marked absent: %d reads and %d transactions in %d runs; want the commit alone, in one run", gets, txns, runs)
	}

	// The other process makes the remembered value stale.
	put(t, b, "k", "2")
	counted.count()
	counted.failed.Store(0)
	runs = copyRuns("k", false)
	if gets, txns := counted.count(); gets != 0 || txns != 2 || runs != 2 || counted.failed.Load() != 1 {
		t.Errorf("a stale guess: %d reads and %d transactions (%d refused) in %d runs; want the refused commit, which reads k back, and the commit", gets, txns, counted.failed.Load(), runs)
	}
	if got := get(t, a, "copy-k"); got != "2" {
		t.Errorf("copy-k = %q after a stale guess, want 2 (the value when it committed)", got)
	}
	holds()

	// A key marked absent that the other process wrote.
	put(t, b, "late", "b")
	counted.count()
	counted.failed.Store(0)
	runs = copyRuns("late", true)
	if got := get(t, a, "copy-late"); got != "b" || runs != 2 || counted.failed.Load() != 1 {
		t.Errorf("copy-late = %q in %d runs (%d refused commits), want b, the value written by the other process, in 2 runs", got, runs, counted.failed.Load())
	}
	holds()

	// An error decided on a stale guess is not returned, though the
	// function wrote before it: the function runs again, reading for
	// real, and what it decides then is.
	put(t, b, "k", "3")
	errStale := errors.New("saw the stale value")
	var seen []string
	err := a.Update(ctx, func(tx kv.Tx) error {
		prefetch(tx, bk("k", false))
		v := string(tx.Bucket([]byte("a")).Get([]byte("k")))
		seen = append(seen, v)
		if err := tx.Bucket([]byte("a")).Put([]byte("scratch"), []byte(v)); err != nil {
			return err
		}
		if v == "2" {
			return errStale
		}
		return tx.Bucket([]byte("a")).Put([]byte("copy-k"), []byte(v))
	})
	if err != nil || fmt.Sprint(seen) != "[2 3]" || get(t, a, "copy-k") != "3" {
		t.Errorf("an error on a stale guess: %v after runs that saw %v; want no error, the second run seeing 3", err, seen)
	}

	// An answer decided on a guess, with nothing written, is read again:
	// no commit would have checked it.
	put(t, b, "k", "4")
	counted.count()
	seen = nil
	if err := a.Update(ctx, func(tx kv.Tx) error {
		prefetch(tx, bk("k", false))
		seen = append(seen, string(tx.Bucket([]byte("a")).Get([]byte("k"))))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if gets, txns := counted.count(); fmt.Sprint(seen) != "[3 4]" || gets+txns != 1 {
		t.Errorf("an answer without a write: runs saw %v in %d reads and %d transactions; want [3 4], the second read for real in one request", seen, gets, txns)
	}

	// A guess that a commit of this same process made wrong is a
	// conflict, as it would have been for a transaction that read k: it
	// is not counted against guessing.
	runs = 0
	if err := a.Update(ctx, func(tx kv.Tx) error {
		runs++
		prefetch(tx, bk("k", false))
		v := tx.Bucket([]byte("a")).Get([]byte("k"))
		if runs == 1 {
			put(t, a, "k", "5")
		}
		return tx.Bucket([]byte("a")).Put([]byte("copy-k"), append([]byte(nil), v...))
	}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, a, "copy-k"); got != "5" || runs != 2 {
		t.Errorf("copy-k = %q in %d runs after this process wrote k, want 5 in 2 runs", got, runs)
	}

	// The transactions above that guessed, counted.
	want := etcdkv.GuessStats{Guessed: 9, Committed: 4, Refused: 2, Conflicted: 1, Void: 2}
	if got := a.GuessStats(); got != want {
		t.Errorf("GuessStats = %+v, want %+v", got, want)
	}
}

// Guesses that keep failing (another process keeps writing what this one
// remembers) stop for a while: each costs a refused commit, dearer than
// the read it was to save.
func TestGuessingPausesWhileItFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, counted := twoProcesses(t, etcdkv.Options{})
	put(t, a, "k", "0")
	counted.failed.Store(0)
	for i := range 14 {
		put(t, b, "k", fmt.Sprint(i+1))
		runs := 0
		if err := a.Update(ctx, copyOf("k", false, &runs)); err != nil {
			t.Fatal(err)
		}
		if got := get(t, a, "copy-k"); got != fmt.Sprint(i+1) {
			t.Fatalf("round %d: copy-k = %q, want %d", i, got, i+1)
		}
	}
	// The moving average of the refused share passes a half at the
	// eleventh refusal.
	if n := counted.failed.Load(); n != 11 {
		t.Errorf("%d refused commits in 14 transactions whose guesses were all stale; want 11, then no guessing", n)
	}
	if got, want := a.GuessStats(), (etcdkv.GuessStats{Guessed: 11, Refused: 11, Paused: 3}); got != want {
		t.Errorf("GuessStats = %+v, want %+v", got, want)
	}
}

// Without guessing (Options.NoGuessing) a prefetch reads what it names,
// and a commit is never refused for a guess.
func TestNoGuessing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, counted := twoProcesses(t, etcdkv.Options{NoGuessing: true})
	put(t, a, "k", "1")
	put(t, b, "k", "2")
	counted.count()
	counted.failed.Store(0)
	runs := 0
	if err := a.Update(ctx, copyOf("k", false, &runs)); err != nil {
		t.Fatal(err)
	}
	if gets, txns := counted.count(); gets+txns != 2 || runs != 1 || counted.failed.Load() != 0 || get(t, a, "copy-k") != "2" {
		t.Errorf("%d reads and %d transactions (%d refused) in %d runs; want the prefetch and the commit, in one run", gets, txns, counted.failed.Load(), runs)
	}
}

// Transactions of two processes that increment one counter, prefetched,
// many at once: guesses go stale all the time, and no increment is lost
// or counted twice.
func TestGuessingUnderContention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := twoProcesses(t, etcdkv.Options{})
	put(t, a, "n", "0")
	const workers, each = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := range 2 * workers {
		backend := a
		if w%2 == 1 {
			backend = b
		}
		wg.Go(func() {
			for range each {
				if err := backend.Update(ctx, func(tx kv.Tx) error {
					prefetch(tx, bk("n", false))
					bucket := tx.Bucket([]byte("a"))
					var n int
					if _, err := fmt.Sscan(string(bucket.Get([]byte("n"))), &n); err != nil {
						return err
					}
					return bucket.Put([]byte("n"), []byte(fmt.Sprint(n+1)))
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := get(t, a, "n"), fmt.Sprint(2*workers*each); got != want {
		t.Errorf("n = %s after %s increments", got, want)
	}
	if g := a.GuessStats(); g.Guessed != g.Committed+g.Refused+g.Conflicted+g.Void || g.Void != 0 {
		t.Errorf("GuessStats = %+v: the outcomes do not add up, or a write came out void", g)
	}
}

// A retry that lands on another replica finds the record the first
// replica wrote, though its first attempt guessed the record absent and
// ran the work: that attempt's commit is refused, and the retry answers
// with the first attempt's response. The work's writes commit once.
func TestGuessedAbsentRecordOfAnotherReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := twoProcesses(t, etcdkv.Options{})
	ledgerOn := func(backend *etcdkv.Backend) *ledger.Ledger {
		l, err := ledger.New(dbOn(t, backend, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	la, lb := ledgerOn(a), ledgerOn(b)
	req := ledger.Request{Scope: "acme|POST /v1/orders", Key: "order-1", Fingerprint: ledger.Fingerprint{1}}
	work := func(order, replica string, ran *int) ledger.Work {
		return func(tx kv.Tx) (ledger.Response, error) {
			*ran++
			bucket, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return ledger.Response{}, err
			}
			v := bucket.Get([]byte(order)) // every replica that commits appends its name
			if err := bucket.Put([]byte(order), append(append([]byte(nil), v...), replica...)); err != nil {
				return ledger.Response{}, err
			}
			return ledger.Response{Status: 201, Body: []byte("made by " + replica)}, nil
		}
	}
	var ranB, ranA int
	if _, err := lb.Do(ctx, ledger.Request{Scope: req.Scope, Key: "warm-up", Fingerprint: req.Fingerprint}, work("warm-up", "b", &ranB)); err != nil {
		t.Fatal(err) // b knows the buckets, and guesses from here on
	}
	if res, err := la.Do(ctx, req, work("order-1", "a", &ranA)); err != nil || res.Replayed {
		t.Fatalf("first attempt on a: %+v, %v", res, err)
	}
	ranB = 0
	before := b.GuessStats()
	res, err := lb.Do(ctx, req, work("order-1", "b", &ranB))
	if err != nil || !res.Replayed || string(res.Response.Body) != "made by a" {
		t.Fatalf("the retry on b: %+v, %v; want a's answer replayed", res, err)
	}
	var order string
	if err := b.View(ctx, func(tx kv.Tx) error {
		order = string(tx.Bucket([]byte("orders")).Get([]byte("order-1")))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if order != "a" {
		t.Errorf("order-1 = %q: the work's writes committed other than once, by a", order)
	}
	if ranB != 1 {
		t.Errorf("the work ran %d times on b; want once, in the attempt that guessed the record absent (its writes refused)", ranB)
	}
	if refused := b.GuessStats().Refused - before.Refused; refused != 1 {
		t.Errorf("%d of b's commits refused for a stale guess, want 1 (the record guessed absent)", refused)
	}
}

// A commit that a guess made too large for one etcd transaction is
// refused before it is sent, and that refusal, decided on a guess, is not
// returned: the function runs again, reading for real, and commits what
// the true value asks.
func TestGuessTooLargeIsVoid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b, _ := twoProcesses(t, etcdkv.Options{})
	put(t, a, "k", "many") // a remembers k = many
	put(t, b, "k", "one")
	var seen []string
	err := a.Update(ctx, func(tx kv.Tx) error {
		prefetch(tx, bk("k", false))
		bucket := tx.Bucket([]byte("a"))
		v := string(bucket.Get([]byte("k")))
		seen = append(seen, v)
		n := 1
		if v == "many" {
			n = etcdkv.DefaultMaxTxOps + 1 // more writes than one Txn takes
		}
		for i := range n {
			if err := bucket.Put([]byte(fmt.Sprint("w-", i)), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil || fmt.Sprint(seen) != "[many one]" || get(t, a, "w-0") != "one" {
		t.Errorf("%v after runs that saw %v; want no error, the second run seeing one and committing", err, seen)
	}
	if g := a.GuessStats(); g.Void != 1 {
		t.Errorf("GuessStats = %+v, want the too-large first attempt void", g)
	}
}
