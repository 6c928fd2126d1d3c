package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

var ctx = context.Background()

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type bundle struct {
	db    *kv.DB
	clock *kvtest.ManualClock
	path  string
}

func setup(t *testing.T, cfg *ledger.Config) (*ledger.Ledger, *bundle) {
	t.Helper()
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "ledger.db")
	db := kvtest.OpenPath(t, path, &kv.Options{NoSync: true, Clock: clock}, ledger.RecordKind)
	l, err := ledger.New(db, cfg)
	require.NoError(t, err)
	return l, &bundle{db: db, clock: clock, path: path}
}

func fp(s string) ledger.Fingerprint {
	f, err := (&fingerprint.Fingerprinter{}).Sum("POST", "/v1/orders", "text/plain", []byte(s))
	if err != nil {
		panic(err)
	}
	return f
}

func req(key, body string) ledger.Request {
	return ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: fp(body)}
}

// order is the business write used by the tests: it stores an order and
// counts how many orders exist.
func order(id string, runs *int) ledger.Work {
	return func(tx kv.Tx) (ledger.Response, error) {
		if runs != nil && kvtest.Counts() {
			*runs++
		}
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return ledger.Response{}, err
		}
		if err := b.Put([]byte(id), []byte("pending")); err != nil {
			return ledger.Response{}, err
		}
		return ledger.Response{
			Status: http.StatusCreated,
			Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/orders/" + id}},
			Body:   []byte(`{"id":"` + id + `","status":"pending"}`),
		}, nil
	}
}

func orders(t *testing.T, db *kv.DB) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("orders"))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			m[string(k)] = string(v)
		}
		return nil
	}))
	return m
}

func TestDoOutcomes(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, &ledger.Config{Retention: time.Hour, Lease: time.Minute})

	// New key: the work runs and the response is stored.
	runs := 0
	res, err := l.Do(ctx, req("k1", "body"), order("o1", &runs))
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.Equal(t, uint64(1), res.Version)
	require.Equal(t, 1, runs)
	rec, err := l.Get(ctx, "acme|POST /v1/orders", "k1")
	require.NoError(t, err)
	require.Equal(t, ledger.StatusCompleted, rec.Status)
	require.Equal(t, fp("body"), rec.Fingerprint)
	require.Equal(t, []byte(`{"id":"o1","status":"pending"}`), rec.Response.Body)
	require.Equal(t, http.StatusCreated, rec.Response.Status)
	require.Equal(t, "/v1/orders/o1", rec.Response.Header.Get("Location"))
	require.Equal(t, t0, rec.CompletedAt)
	require.Equal(t, t0.Add(time.Hour), rec.ExpiresAt)
	require.Equal(t, bb.db.Incarnation(), rec.Owner)

	// Same key, same request: replayed byte for byte; the work does not run.
	res2, err := l.Do(ctx, req("k1", "body"), order("o1-again", &runs))
	require.NoError(t, err)
	require.True(t, res2.Replayed)
	require.Equal(t, 1, runs)
	require.Equal(t, res.Response, res2.Response)
	require.Equal(t, map[string]string{"o1": "pending"}, orders(t, bb.db))

	// Same key, different request: rejected with both fingerprints.
	_, err = l.Do(ctx, req("k1", "other body"), order("o2", &runs))
	var me *ledger.MismatchError
	require.ErrorAs(t, err, &me)
	require.ErrorIs(t, err, ledger.ErrMismatch)
	require.Equal(t, fp("body"), me.Stored)
	require.Equal(t, fp("other body"), me.Got)
	require.Contains(t, err.Error(), fp("body").Short())
	require.Contains(t, err.Error(), fp("other body").Short())
	require.Equal(t, 1, runs)

	// In progress: a two-phase claim holds the key.
	out, err := l.Claim(ctx, req("k2", "body"))
	require.NoError(t, err)
	require.NotNil(t, out.Claim)
	_, err = l.Do(ctx, req("k2", "body"), order("o3", &runs))
	var ip *ledger.InProgressError
	require.ErrorAs(t, err, &ip)
	require.Equal(t, ledger.DefaultRetryAfter, ip.RetryAfter)
	require.Equal(t, t0.Add(time.Minute), ip.LeaseExpiresAt)
	require.Equal(t, 1, runs)

	// Expired: past retention the record is absent, the work runs again
	// with the next version.
	bb.clock.Advance(time.Hour)
	_, err = l.Get(ctx, "acme|POST /v1/orders", "k1")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	res3, err := l.Do(ctx, req("k1", "other body"), order("o4", &runs))
	require.NoError(t, err)
	require.False(t, res3.Replayed)
	require.Equal(t, uint64(2), res3.Version)
	require.Equal(t, 2, runs)
}

func TestDoRollsBackOnErrorAndPanic(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	boom := errors.New("provider said no")
	_, err := l.Do(ctx, req("k", "b"), func(tx kv.Tx) (ledger.Response, error) {
		_, _ = order("o1", nil)(tx)
		return ledger.Response{}, boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, orders(t, bb.db))
	_, err = l.Get(ctx, "acme|POST /v1/orders", "k")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	require.Panics(t, func() {
		_, _ = l.Do(ctx, req("k", "b"), func(tx kv.Tx) (ledger.Response, error) {
			_, _ = order("o1", nil)(tx)
			panic("handler bug")
		})
	})
	require.Empty(t, orders(t, bb.db))

	// The retry runs again and succeeds.
	res, err := l.Do(ctx, req("k", "b"), order("o1", nil))
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.Equal(t, map[string]string{"o1": "pending"}, orders(t, bb.db))
}

// The single-transaction path works inside a caller's own bbolt transaction.
func TestDoTxInCallerTransaction(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	kvtest.RequireBolt(t, bb.db)
	err := bb.db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := l.DoTx(ctx, kv.WrapTx(btx), req("k", "b"), order("o1", nil))
		if err != nil {
			return err
		}
		return errors.New("caller rolls back")
	})
	require.Error(t, err)
	require.Empty(t, orders(t, bb.db))
	_, err = l.Get(ctx, "acme|POST /v1/orders", "k")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	require.NoError(t, bb.db.Update(ctx, func(tx kv.Tx) error {
		_, err := l.DoTx(ctx, tx, req("k", "b"), order("o1", nil))
		return err
	}))
	require.Equal(t, map[string]string{"o1": "pending"}, orders(t, bb.db))
}

// A Do inside the caller's own Update, with the caller's (unmarked)
// context, waits for ever for the writer that Update holds; with
// kv.Options.CheckNesting it is refused with kv.ErrNestedTx, and nothing
// of it is written.
func TestDoInsideTheCallersUpdateWithCheckNesting(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true, CheckNesting: true}, ledger.RecordKind)
	kvtest.RequireSingleWriter(t, db)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	unmarked, cancel := context.WithTimeout(context.Background(), testwait.Bound) // a broken check fails here, not hangs
	defer cancel()
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, err := l.Do(unmarked, req("k", "b"), order("o1", nil))
		require.ErrorIs(t, err, kv.ErrNestedTx)
		_, err = l.DoTx(unmarked, tx, req("k", "b"), order("o1", nil))
		return err // the Tx form is the way: it writes through the caller's transaction
	}))
	res, err := l.Do(ctx, req("k", "b"), order("o2", nil))
	require.NoError(t, err)
	require.True(t, res.Replayed, "the DoTx's record")
	require.Equal(t, map[string]string{"o1": "pending"}, orders(t, db))
}

// atOnce runs do(i) for i in [0, n) from n goroutines released together,
// and returns their results.
func atOnce(n int, do func(i int) (ledger.Result, error)) ([]ledger.Result, []error) {
	results, errs := make([]ledger.Result, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = do(i)
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

// 64 goroutines send the same key and payload at once: the work commits once
// and every caller gets identical bytes.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	const n = 64
	results, errs := atOnce(n, func(int) (ledger.Result, error) {
		return l.Do(ctx, req("same-key", "same body"), func(tx kv.Tx) (ledger.Response, error) {
			b, err := tx.CreateBucketIfNotExists([]byte("counter"))
			if err != nil {
				return ledger.Response{}, err
			}
			n, _ := strconv.Atoi(string(b.Get([]byte("executions"))))
			if err := b.Put([]byte("executions"), []byte(strconv.Itoa(n+1))); err != nil {
				return ledger.Response{}, err
			}
			return ledger.Response{Status: 201, Body: []byte(fmt.Sprintf(`{"execution":%d}`, n+1))}, nil
		})
	})
	fresh := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, []byte(`{"execution":1}`), results[i].Response.Body)
		require.Equal(t, 201, results[i].Response.Status)
		if !results[i].Replayed {
			fresh++
		}
	}
	require.Equal(t, 1, fresh)
	require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error {
		require.Equal(t, "1", string(tx.Bucket([]byte("counter")).Get([]byte("executions"))))
		return nil
	}))
}

// 64 goroutines send the same key at once, half with one body and half
// with another, in several rounds of keys: each key's work commits once,
// every caller with the winner's body gets the winner's bytes, and every
// caller with the other body gets a *MismatchError, never a success.
// (Group commit takes the late callers into the running batch, where the
// mismatches are rejections among commits.)
func TestConcurrentMismatchesAreRejected(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	const n, rounds = 64, 5
	for r := range rounds {
		key := fmt.Sprint("contested-", r)
		results, errs := atOnce(n, func(i int) (ledger.Result, error) {
			body := []string{"a", "b"}[i%2]
			return l.Do(ctx, req(key, body), func(tx kv.Tx) (ledger.Response, error) {
				b, err := tx.CreateBucketIfNotExists([]byte("executions"))
				if err != nil {
					return ledger.Response{}, err
				}
				if err := b.Put([]byte(key), []byte(body)); err != nil {
					return ledger.Response{}, err
				}
				return ledger.Response{Status: 201, Body: []byte(body)}, nil
			})
		})
		var winner string
		require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error {
			winner = string(tx.Bucket([]byte("executions")).Get([]byte(key)))
			return nil
		}))
		fresh := 0
		for i := range n {
			if body := []string{"a", "b"}[i%2]; body != winner {
				var me *ledger.MismatchError
				require.ErrorAs(t, errs[i], &me, "caller %d of %s", i, key)
				continue
			}
			require.NoError(t, errs[i])
			require.Equal(t, []byte(winner), results[i].Response.Body)
			if !results[i].Replayed {
				fresh++
			}
		}
		require.Equal(t, 1, fresh, key)
	}
}

// A crash between claim and completion: the process state is dropped and
// the file reopened. Before the lease expires a retry is told "in progress";
// after, it takes over with version+1; the stale worker's completion is
// rejected and its business writes are not applied.
func TestTwoPhaseCrashBetweenClaimAndCompletion(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "crash.db")
	cfg := &ledger.Config{Lease: 30 * time.Second}

	db1 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock})
	l1, err := ledger.New(db1, cfg)
	require.NoError(t, err)
	out, err := l1.Claim(ctx, req("pay-1", "charge 2500"))
	require.NoError(t, err)
	stale := out.Claim
	require.Equal(t, uint64(1), stale.Version)
	require.False(t, stale.Takeover)
	require.NoError(t, db1.Close()) // the process "dies": nothing but the file survives

	db2 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock}, ledger.RecordKind)
	l2, err := ledger.New(db2, cfg)
	require.NoError(t, err)
	rec, err := l2.Get(ctx, "acme|POST /v1/orders", "pay-1")
	require.NoError(t, err)
	require.Equal(t, ledger.StatusInProgress, rec.Status)
	require.Equal(t, db1.Incarnation(), rec.Owner)

	clock.Advance(10 * time.Second)
	_, err = l2.Claim(ctx, req("pay-1", "charge 2500"))
	var ip *ledger.InProgressError
	require.ErrorAs(t, err, &ip)
	require.Equal(t, uint64(1), ip.Version)

	clock.Advance(21 * time.Second) // lease expired
	out2, err := l2.Claim(ctx, req("pay-1", "charge 2500"))
	require.NoError(t, err)
	require.NotNil(t, out2.Claim)
	require.True(t, out2.Claim.Takeover)
	// Orphaned (an earlier process's claim) only where one process writes:
	// with several writers the other owner may be a live replica.
	require.Equal(t, db2.Traits().SingleWriter, out2.Claim.Orphaned)
	require.Equal(t, db1.Incarnation(), out2.Claim.PreviousOwner)
	require.Equal(t, uint64(2), out2.Claim.Version)

	// The stale worker wakes up and tries to complete through the live handle.
	_, err = l2.Complete(ctx, stale, ledger.Response{Status: 200, Body: []byte("stale")}, func(tx kv.Tx) error {
		_, err := order("stale-order", nil)(tx)
		return err
	})
	var lost *ledger.LeaseLostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, uint64(1), lost.Claimed)
	require.Equal(t, uint64(2), lost.Current)
	require.Empty(t, orders(t, db2), "a stale completion writes nothing")

	// The new owner completes.
	res, err := l2.Complete(ctx, out2.Claim, ledger.Response{Status: 200, Body: []byte("paid")}, func(tx kv.Tx) error {
		_, err := order("o1", nil)(tx)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, uint64(2), res.Version)
	require.Equal(t, map[string]string{"o1": "pending"}, orders(t, db2))
	rec, err = l2.Get(ctx, "acme|POST /v1/orders", "pay-1")
	require.NoError(t, err)
	require.Equal(t, ledger.StatusCompleted, rec.Status)
	require.Equal(t, []byte("paid"), rec.Response.Body)
	require.Equal(t, t0, rec.CreatedAt, "a takeover keeps the original creation time")

	// And a retry now replays.
	out3, err := l2.Claim(ctx, req("pay-1", "charge 2500"))
	require.NoError(t, err)
	require.NotNil(t, out3.Replay)
	require.Equal(t, []byte("paid"), out3.Replay.Response.Body)
}

func TestRecoverOrphansTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "a dead incarnation is told from a live replica only where one process writes")
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "orphan.db")
	cfg := &ledger.Config{RecoverOrphans: true}
	db1, err := kv.Open(path, &kv.Options{Clock: clock})
	require.NoError(t, err)
	l1, _ := ledger.New(db1, cfg)
	_, err = l1.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	// Within the same incarnation the lease still protects the claim.
	_, err = l1.Claim(ctx, req("k", "b"))
	require.ErrorIs(t, err, ledger.ErrInProgress)
	require.NoError(t, db1.Close())

	db2 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock}, ledger.RecordKind)
	l2, _ := ledger.New(db2, cfg)
	out, err := l2.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	require.True(t, out.Claim.Takeover)
	require.True(t, out.Claim.Orphaned)
	require.Equal(t, uint64(2), out.Claim.Version)
}

// A duplicate that asks to wait is woken by the first attempt's completion.
func TestWaitForInProgress(t *testing.T) {
	t.Parallel()
	l, _ := setup(t, nil)
	out, err := l.Claim(ctx, req("k", "b"))
	require.NoError(t, err)

	r := req("k", "b")
	r.Wait = time.Minute
	done := make(chan ledger.Outcome)
	go func() {
		o, err := l.Claim(ctx, r)
		require.NoError(t, err)
		done <- o
	}()
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 201, Body: []byte("done")}, nil)
	require.NoError(t, err)
	o := testwait.Receive(t, done, "the waiting claim's outcome")
	require.NotNil(t, o.Replay)
	require.Equal(t, []byte("done"), o.Replay.Response.Body)

	// Do waits too, and a release lets the waiter run the work itself.
	out, err = l.Claim(ctx, req("k2", "b"))
	require.NoError(t, err)
	r2 := req("k2", "b")
	r2.Wait = time.Minute
	res := make(chan ledger.Result)
	go func() {
		rr, err := l.Do(ctx, r2, order("o1", nil))
		require.NoError(t, err)
		res <- rr
	}()
	require.NoError(t, l.Release(ctx, out.Claim))
	rr := testwait.Receive(t, res, "the waiting Do's result")
	require.False(t, rr.Replayed)
	require.Equal(t, uint64(1), rr.Version, "a released key starts again at version 1")
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	l, _ := setup(t, nil)
	_, err := l.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	r := req("k", "b")
	r.Wait = 20 * time.Millisecond
	_, err = l.Claim(ctx, r)
	require.ErrorIs(t, err, ledger.ErrInProgress)

	c, cancel := context.WithCancel(ctx)
	cancel()
	r.Wait = time.Minute
	_, err = l.Do(c, r, order("x", nil))
	require.ErrorIs(t, err, context.Canceled)
}

func TestExtendAndRelease(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, &ledger.Config{Lease: 10 * time.Second})
	out, err := l.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	c := out.Claim
	bb.clock.Advance(8 * time.Second)
	require.NoError(t, l.Extend(ctx, c))
	require.Equal(t, t0.Add(18*time.Second), c.LeaseExpiresAt)
	bb.clock.Advance(8 * time.Second) // 16s: past the first lease, within the extended one
	_, err = l.Claim(ctx, req("k", "b"))
	require.ErrorIs(t, err, ledger.ErrInProgress)

	bb.clock.Advance(5 * time.Second) // 21s: the extended lease is over
	out2, err := l.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	require.True(t, out2.Claim.Takeover)
	require.False(t, out2.Claim.Orphaned)
	require.ErrorIs(t, l.Extend(ctx, c), ledger.ErrLeaseLost)
	require.ErrorIs(t, l.Release(ctx, c), ledger.ErrLeaseLost)

	require.NoError(t, l.Release(ctx, out2.Claim))
	_, err = l.Get(ctx, "acme|POST /v1/orders", "k")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = l.Complete(ctx, out2.Claim, ledger.Response{}, nil)
	var lost *ledger.LeaseLostError
	require.ErrorAs(t, err, &lost)
	require.Zero(t, lost.Current)
}

// ExtendTx renews a claim inside the caller's transaction: committed, the
// stored lease is the one c reports and holds off another claim; rolled
// back, the stored record is left as it was (lease, version, place), and
// the claim still completes.
func TestExtendTxHoldsOnceCommitted(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, &ledger.Config{Lease: 10 * time.Second})
	out, err := l.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	c := out.Claim
	stored := func() *ledger.Record {
		r, err := l.Get(ctx, "acme|POST /v1/orders", "k")
		require.NoError(t, err)
		return r
	}

	bb.clock.Advance(8 * time.Second)
	require.NoError(t, bb.db.Update(ctx, func(tx kv.Tx) error { return l.ExtendTx(ctx, tx, c) }))
	require.Equal(t, t0.Add(18*time.Second), c.LeaseExpiresAt)
	require.Equal(t, c.LeaseExpiresAt, stored().LeaseExpiresAt)
	bb.clock.Advance(8 * time.Second) // past the first lease, within the extended one
	_, err = l.Claim(ctx, req("k", "b"))
	require.ErrorIs(t, err, ledger.ErrInProgress)

	before := stored()
	rollback := errors.New("caller rolls back")
	err = bb.db.Update(ctx, func(tx kv.Tx) error {
		require.NoError(t, l.ExtendTx(ctx, tx, c))
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	require.Equal(t, t0.Add(26*time.Second), c.LeaseExpiresAt, "c is updated at once, as documented")
	after := stored()
	require.Equal(t, before.LeaseExpiresAt, after.LeaseExpiresAt, "the rolled-back extension is not stored")
	require.Equal(t, before.Version, after.Version)
	require.Equal(t, before.ExpiresAt, after.ExpiresAt)

	res, err := l.Complete(ctx, c, ledger.Response{Status: 201, Body: []byte("done")}, nil)
	require.NoError(t, err)
	require.Equal(t, "done", string(res.Response.Body))
}

// PeekTx answers in the caller's transaction, read-only included: a
// completed request's replay, a mismatch for another request under the
// key, nothing for a key never used or still in progress; it writes
// nothing.
func TestPeekTxInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	_, err := l.Do(ctx, req("done", "b"), order("o1", nil))
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("busy", "b"))
	require.NoError(t, err)
	require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error {
		res, err := l.PeekTx(tx, req("done", "b"))
		require.NoError(t, err)
		require.NotNil(t, res)
		require.True(t, res.Replayed)
		require.Equal(t, 201, res.Response.Status)

		_, err = l.PeekTx(tx, req("done", "another body"))
		require.ErrorIs(t, err, ledger.ErrMismatch)

		res, err = l.PeekTx(tx, req("never", "b"))
		require.NoError(t, err)
		require.Nil(t, res)

		_, err = l.PeekTx(tx, req("busy", "b"))
		require.ErrorIs(t, err, ledger.ErrInProgress)
		return nil
	}))
}

func TestCompleteWorkErrorKeepsClaim(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	out, err := l.Claim(ctx, req("k", "b"))
	require.NoError(t, err)
	boom := errors.New("boom")
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 200}, func(tx kv.Tx) error {
		_, _ = order("o", nil)(tx)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, orders(t, bb.db))
	rec, err := l.Get(ctx, "acme|POST /v1/orders", "k")
	require.NoError(t, err)
	require.Equal(t, ledger.StatusInProgress, rec.Status)
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 200}, nil)
	require.NoError(t, err)
}

func TestLargeResponsesAreCompressedAndBounded(t *testing.T) {
	t.Parallel()
	l, _ := setup(t, &ledger.Config{MaxResponseBytes: 1 << 20})
	body := bytes.Repeat([]byte(`{"line":"a repeated response line"},`), 2000)
	_, err := l.Do(ctx, req("big", "b"), func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 200, Body: body}, nil
	})
	require.NoError(t, err)
	rec, err := l.Get(ctx, "acme|POST /v1/orders", "big")
	require.NoError(t, err)
	require.True(t, rec.Compressed)
	require.Less(t, rec.StoredBytes, len(body)/10)
	require.Equal(t, body, rec.Response.Body)
	res, err := l.Do(ctx, req("big", "b"), order("x", nil))
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, body, res.Response.Body)

	_, err = l.Do(ctx, req("huge", "b"), func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 200, Body: make([]byte, 1<<20+1)}, nil
	})
	require.ErrorIs(t, err, ledger.ErrResponseTooLarge)
	_, err = l.Get(ctx, "acme|POST /v1/orders", "huge")
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

// A body past the decompression limit (64 MiB), which a larger
// MaxResponseBytes lets through, is stored as it is: compressed, it was
// stored and then refused by every replay, and by the consistency check,
// as corrupt. bbolt only: etcd bounds a transaction far below it.
func TestBodyPastTheDecompressionLimitReplays(t *testing.T) {
	l, bb := setup(t, &ledger.Config{MaxResponseBytes: 2 * record.MaxDecompressedSize})
	kvtest.RequireBolt(t, bb.db)
	// At the limit a body is compressed, and read back; past it, not.
	for key, size := range map[string]int{"at-limit": record.MaxDecompressedSize, "past-limit": record.MaxDecompressedSize + 1} {
		body := bytes.Repeat([]byte("a"), size)
		work := func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 200, Body: body}, nil }
		_, err := l.Do(ctx, req(key, "b"), work)
		require.NoError(t, err)
		rec, err := l.Get(ctx, "acme|POST /v1/orders", key)
		require.NoError(t, err)
		require.Equal(t, key == "at-limit", rec.Compressed, key)
		res, err := l.Do(ctx, req(key, "b"), work)
		require.NoError(t, err)
		require.True(t, res.Replayed)
		require.True(t, bytes.Equal(body, res.Response.Body), "%s: the body replayed", key)
	}
}

func TestInvalidInputIsRejectedBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, nil)
	for _, r := range []ledger.Request{
		{Scope: "s", Key: ""},
		{Scope: "s", Key: "has space"},
		{Scope: "s", Key: string(make([]byte, 256))},
		{Scope: "", Key: "k"},
		{Scope: "a\x00b", Key: "k"},
	} {
		_, err := l.Do(ctx, r, order("x", nil))
		require.Error(t, err)
		require.True(t, errors.Is(err, ledger.ErrInvalidKey) || errors.Is(err, ledger.ErrInvalidScope), err)
		_, err = l.Claim(ctx, r)
		require.Error(t, err)
		err = bb.db.Update(ctx, func(tx kv.Tx) error { _, err := l.DoTx(ctx, tx, r, order("x", nil)); return err })
		require.True(t, errors.Is(err, ledger.ErrInvalidKey) || errors.Is(err, ledger.ErrInvalidScope), "DoTx: %v", err)
	}
	require.Empty(t, orders(t, bb.db))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, bb := setup(t, nil)
	for _, c := range []ledger.Config{
		{Retention: -1}, {Lease: -1}, {Retention: time.Second, Lease: time.Minute}, {RetryAfter: -1}, {MaxResponseBytes: -1},
	} {
		_, err := ledger.New(bb.db, &c)
		require.ErrorIs(t, err, ledger.ErrInvalidConfig)
	}
}

func TestRecordsIteration(t *testing.T) {
	t.Parallel()
	l, bb := setup(t, &ledger.Config{Retention: time.Hour, Lease: time.Minute})
	for _, s := range []string{"acme|POST /a", "acme|POST /b", "globex|POST /a"} {
		for i := range 3 {
			_, err := l.Do(ctx, ledger.Request{Scope: s, Key: fmt.Sprint("k", i), Fingerprint: fp("x")}, order(fmt.Sprint(s, i), nil))
			require.NoError(t, err)
		}
	}
	_, err := l.Claim(ctx, ledger.Request{Scope: "acme|POST /c", Key: "pending", Fingerprint: fp("x")})
	require.NoError(t, err)

	collect := func(o ledger.ListOptions) []string {
		var out []string
		require.NoError(t, bb.db.View(ctx, func(tx kv.Tx) error {
			out = nil // a read run again (etcd) starts afresh
			for r, err := range l.Records(tx, o) {
				require.NoError(t, err)
				out = append(out, r.Scope+"/"+r.Key)
			}
			return nil
		}))
		return out
	}
	require.Len(t, collect(ledger.ListOptions{}), 10)
	require.Equal(t, []string{"acme|POST /a/k0", "acme|POST /a/k1", "acme|POST /a/k2", "acme|POST /b/k0", "acme|POST /b/k1", "acme|POST /b/k2", "acme|POST /c/pending"},
		collect(ledger.ListOptions{ScopePrefix: "acme|"}))
	require.Equal(t, []string{"acme|POST /c/pending"}, collect(ledger.ListOptions{Status: ledger.StatusInProgress}))
	require.Len(t, collect(ledger.ListOptions{Limit: 4}), 4)

	bb.clock.Advance(time.Hour)
	require.Empty(t, collect(ledger.ListOptions{}))
	require.Len(t, collect(ledger.ListOptions{ExpiredOnly: true}), 10)
	require.Len(t, collect(ledger.ListOptions{IncludeExpired: true}), 10)
}

// Many distinct keys committed in shared group-commit batches: every record
// keeps its own bytes. (Regression: a pooled encode buffer handed to bbolt's
// Put, which keeps the slice until commit, made records of one batch
// overwrite each other; the CRC caught it.)
func TestBatchedRecordsKeepTheirOwnBytes(t *testing.T) {
	t.Parallel()
	l, _ := setup(t, nil)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				k := fmt.Sprintf("k-%d-%d", g, i)
				_, err := l.Do(ctx, req(k, k), func(kv.Tx) (ledger.Response, error) {
					return ledger.Response{Status: 201, Body: []byte("body of " + k)}, nil
				})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	for g := range 16 {
		for i := range 20 {
			k := fmt.Sprintf("k-%d-%d", g, i)
			rec, err := l.Get(ctx, "acme|POST /v1/orders", k)
			require.NoError(t, err)
			require.Equal(t, "body of "+k, string(rec.Response.Body))
		}
	}
}

// TestConcurrentReplaysKeepTheirOwnAnswers replays many keys from many
// goroutines, interleaved with mismatches and new keys: the read path
// reuses its look-up state between calls (a pool), and a state not reset
// would hand one key's answer, or a stale replay flag, to another call.
func TestConcurrentReplaysKeepTheirOwnAnswers(t *testing.T) {
	l, b := setup(t, nil)
	const keys = 64
	for i := range keys {
		id := fmt.Sprintf("ord-%d", i)
		_, err := l.Do(ctx, req("k-"+id, id), order(id, nil))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 300 {
				i := (g*131 + n*7) % keys
				id := fmt.Sprintf("ord-%d", i)
				switch n % 3 {
				case 0, 1: // a replay: its own body and Location, never another's
					res, err := l.Do(ctx, req("k-"+id, id), order(id, nil))
					if err != nil || !res.Replayed || string(res.Response.Body) != `{"id":"`+id+`","status":"pending"}` ||
						res.Response.Header.Get("Location") != "/v1/orders/"+id {
						errs <- fmt.Errorf("replay of %s: replayed %v, body %q, location %q, err %v", id, res.Replayed, res.Response.Body, res.Response.Header.Get("Location"), err)
						return
					}
				case 2: // a reused key right after a replay: a mismatch, not a replay
					if _, err := l.Do(ctx, req("k-"+id, "other"), order(id, nil)); !errors.Is(err, ledger.ErrMismatch) {
						errs <- fmt.Errorf("reused key %s: want a mismatch, got %v", id, err)
						return
					}
					fresh := fmt.Sprintf("new-%d-%d", g, n)
					res, err := l.Do(ctx, req("k-"+fresh, fresh), order(fresh, nil))
					if err != nil || res.Replayed {
						errs <- fmt.Errorf("new key %s: replayed %v, err %v", fresh, res.Replayed, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Len(t, orders(t, b.db), keys+8*100)
}

// A key the directory has never seen is answered without a read
// transaction, by Peek as by Do; a key it has seen is read and replayed.
func TestNewKeysCostNoReadTransaction(t *testing.T) {
	kvtest.RequireOneRun(t, "counts bbolt's read transactions")
	if kvtest.Remote() {
		t.Skip("the directory is bbolt's (a backend with several writers looks every key up)")
	}
	l, b := setup(t, nil)
	reads := func() int { return b.db.Bolt().Stats().TxN }
	before := reads()
	r, err := l.Peek(ctx, req("never-seen", "x"))
	require.NoError(t, err)
	require.Nil(t, r)
	require.Equal(t, before, reads(), "Peek of a new key opened a read transaction")

	_, err = l.Do(ctx, req("k1", "x"), order("o1", nil))
	require.NoError(t, err)
	before = reads()
	r, err = l.Peek(ctx, req("k1", "x"))
	require.NoError(t, err)
	require.NotNil(t, r)
	require.True(t, r.Replayed)
	require.Equal(t, before, reads(), "a replay of a record this process just wrote opened a read transaction")
	_, err = l.Peek(ctx, req("k1", "other"))
	require.ErrorIs(t, err, ledger.ErrMismatch)
	require.Equal(t, before, reads())

	_, err = l.Peek(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: ""})
	require.ErrorIs(t, err, ledger.ErrInvalidKey, "an invalid key is still refused before any look-up")

	// A record this process did not write (here: written before the file
	// was opened again) is read from the log: one read transaction.
	require.NoError(t, b.db.Close())
	db := kvtest.OpenPath(t, b.path, &kv.Options{NoSync: true, Clock: b.clock}, ledger.RecordKind)
	l, err = ledger.New(db, nil)
	require.NoError(t, err)
	require.Zero(t, l.Stats().Cached)
	before = db.Bolt().Stats().TxN
	r, err = l.Peek(ctx, req("k1", "x"))
	require.NoError(t, err)
	require.True(t, r.Replayed)
	require.Equal(t, before+1, db.Bolt().Stats().TxN)
	st := l.Stats()
	require.Equal(t, uint64(1), st.CacheMisses, "the cold replay is not counted as a miss")
	require.Zero(t, st.CacheHits)
}

// A retry of a record this process committed is answered from the cache
// of recent entries; every change to the record (completion, release,
// expiry, takeover) is seen at once, and a closed database or a canceled
// context answers as the read transaction would. With the cache off
// (kv.Options.RecentCacheBytes negative) every answer is the same, read
// from the file.
func TestRecentRecordsAnswerFromMemory(t *testing.T) {
	kvtest.RequireOneRun(t, "counts bbolt's read transactions")
	if kvtest.Remote() {
		t.Skip("the cache is bbolt's (a backend with several writers reads every record)")
	}
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("cache=%t", !off), func(t *testing.T) { recentRecords(t, off) })
	}
}

func recentRecords(t *testing.T, off bool) {
	b := &bundle{clock: kvtest.NewManualClock(t0), path: filepath.Join(t.TempDir(), "ledger.db")}
	opts := &kv.Options{NoSync: true, Clock: b.clock}
	fromFile := 0 // read transactions per replay
	if off {
		opts.RecentCacheBytes, fromFile = -1, 1
	}
	b.db = kvtest.OpenPath(t, b.path, opts, ledger.RecordKind)
	l, err := ledger.New(b.db, &ledger.Config{Lease: time.Minute, Retention: time.Hour})
	require.NoError(t, err)
	reads := func() int { return b.db.Bolt().Stats().TxN }

	// A claim, then its duplicate: in progress, from memory.
	out, err := l.Claim(ctx, req("k", "x"))
	require.NoError(t, err)
	before := reads()
	_, err = l.Do(ctx, req("k", "x"), mustNotRun(t))
	require.ErrorIs(t, err, ledger.ErrInProgress)
	require.Equal(t, before+fromFile, reads())

	// Completed: the completion replaces the cached claim at once.
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 201, Body: []byte(`{"id":1}`)}, nil)
	require.NoError(t, err)
	res, err := l.Do(ctx, req("k", "x"), mustNotRun(t))
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, `{"id":1}`, string(res.Response.Body))
	res.Response.Body[0] = 'X' // the caller owns what it was given
	res, err = l.Do(ctx, req("k", "x"), mustNotRun(t))
	require.NoError(t, err)
	require.Equal(t, `{"id":1}`, string(res.Response.Body))
	require.Equal(t, before+3*fromFile, reads(), "replays of a recent record opened a read transaction")
	st := l.Stats()
	if off {
		require.Zero(t, st.Cached)
		require.Zero(t, st.CachedBytes)
		require.Zero(t, st.CacheHits)
		require.Equal(t, uint64(3), st.CacheMisses, "the duplicate and two replays")
	} else {
		require.Equal(t, 1, st.Cached)
		require.Positive(t, st.CachedBytes)
		require.Equal(t, uint64(3), st.CacheHits, "the duplicate and two replays")
		require.Zero(t, st.CacheMisses)
	}

	// Released: the work runs again.
	out, err = l.Claim(ctx, req("r", "x"))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, out.Claim))
	runs := 0
	_, err = l.Do(ctx, req("r", "x"), order("r", &runs))
	require.NoError(t, err)
	require.Equal(t, 1, runs, "a released claim was answered from memory")

	// A claim whose lease ran out is taken over, not reported in progress.
	_, err = l.Claim(ctx, req("t", "x"))
	require.NoError(t, err)
	b.clock.Advance(2 * time.Minute)
	runs = 0
	_, err = l.Do(ctx, req("t", "x"), order("t", &runs))
	require.NoError(t, err)
	require.Equal(t, 1, runs)

	// Expired: the request runs again.
	b.clock.Advance(2 * time.Hour)
	runs = 0
	res, err = l.Do(ctx, req("k", "x"), order("k2", &runs))
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.Equal(t, 1, runs)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Do(canceled, req("k", "x"), mustNotRun(t))
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, b.db.Close())
	_, err = l.Do(ctx, req("k", "x"), mustNotRun(t))
	require.ErrorIs(t, err, kv.ErrClosed)
}

// Do encodes each record into a buffer allocated before its transaction,
// sized after the record before: a record much larger than the last, or
// smaller, or the same size again is stored whole and replayed as
// answered, after a reopen too (read from the file, not from the cache).
func TestRecordsOfChangingSizesAreStoredWhole(t *testing.T) {
	t.Parallel()
	l, b := setup(t, nil)
	bodies := map[string][]byte{}
	for i, n := range []int{10, 5000, 20, 20, 300, 70000, 1} {
		key := fmt.Sprint("size-", i)
		body := bytes.Repeat([]byte{byte('a' + i)}, n)
		bodies[key] = body
		res, err := l.Do(ctx, req(key, key), func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Header: http.Header{"X-N": {fmt.Sprint(n)}}, Body: body}, nil
		})
		require.NoError(t, err)
		require.False(t, res.Replayed)
	}
	check := func(l *ledger.Ledger) {
		for key, body := range bodies {
			res, err := l.Do(ctx, req(key, key), func(kv.Tx) (ledger.Response, error) {
				t.Fatalf("%s ran again", key)
				return ledger.Response{}, nil
			})
			require.NoError(t, err)
			require.True(t, res.Replayed, key)
			require.Equal(t, body, res.Response.Body, key)
			require.Equal(t, fmt.Sprint(len(body)), res.Response.Header.Get("X-N"), key)
		}
	}
	check(l)
	require.NoError(t, b.db.Close())
	db := kvtest.OpenPath(t, b.path, &kv.Options{NoSync: true, Clock: b.clock}, ledger.RecordKind)
	l2, err := ledger.New(db, nil)
	require.NoError(t, err)
	check(l2)
}
