package ledger_test

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// Retentions past the time encoding (int64 Unix nanoseconds end in 2262)
// once wrapped round into the past: every record was expired at once and Do
// ran its work again (issue 13, item 2). Configurations reject them; a
// per-scope function that returns one is clamped to keyspace.Never.
func TestRetentionPastTheTimeEncoding(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour} {
		_, err := ledger.New(nil, &ledger.Config{Retention: d})
		require.ErrorIs(t, err, ledger.ErrInvalidConfig, d)
		_, err = ledger.New(nil, &ledger.Config{Lease: d, Retention: d})
		require.ErrorIs(t, err, ledger.ErrInvalidConfig, d)
	}

	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour, keyspace.MaxRetention} {
		l, b := setup(t, &ledger.Config{RetentionFor: func(string) time.Duration { return d }})
		runs := 0
		for range 3 {
			res, err := l.Do(ctx, req("k", "body"), order("ord_1", &runs))
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status)
			b.clock.Advance(24 * time.Hour)
		}
		require.Equal(t, 1, runs, "retention %s: the work ran once", d)
		r, err := l.Get(ctx, "acme|POST /v1/orders", "k")
		require.NoError(t, err)
		require.False(t, r.ExpiresAt.Before(t0.Add(99*365*24*time.Hour)), "expires %s", r.ExpiresAt)
	}
}

// A response status outside 100-999 was stored, and every replay of it then
// failed as corrupt (issue 13, item 5); an informational one (1xx) was
// stored and replayed as an interim response followed by a 200 net/http
// makes up. Both are refused before anything is written; 0 stays allowed
// for responses that are not HTTP.
func TestInvalidResponseStatusIsNeverStored(t *testing.T) {
	t.Parallel()
	l, b := setup(t, nil)
	for _, st := range []int{1000, -1, 99, 1, 100, 101, 103, 199} {
		runs := 0
		_, err := l.Do(ctx, req(fmt.Sprint("k", st), "body"), func(tx kv.Tx) (ledger.Response, error) {
			if kvtest.Counts() {
				runs++
			}
			if _, err := order("ord", nil)(tx); err != nil {
				return ledger.Response{}, err
			}
			return ledger.Response{Status: st, Body: []byte("x")}, nil
		})
		require.ErrorIs(t, err, ledger.ErrInvalidResponse, "status %d", st)
		require.Empty(t, orders(t, b.db), "the work's writes rolled back")
		_, err = l.Get(ctx, "acme|POST /v1/orders", fmt.Sprint("k", st))
		require.ErrorIs(t, err, ledger.ErrNotFound)
	}
	out, err := l.Claim(ctx, req("two-phase", "body"))
	require.NoError(t, err)
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 1000}, nil)
	require.ErrorIs(t, err, ledger.ErrInvalidResponse)
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 103}, nil)
	require.ErrorIs(t, err, ledger.ErrInvalidResponse)
	require.ErrorContains(t, err, "informational")
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 204}, nil)
	require.NoError(t, err, "the claim is still held after the refusals")
	for _, st := range []int{0, 200, 999} {
		res, err := l.Do(ctx, req(fmt.Sprint("ok", st), "body"), func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: st}, nil })
		require.NoError(t, err)
		again, err := l.Do(ctx, req(fmt.Sprint("ok", st), "body"), func(kv.Tx) (ledger.Response, error) { return ledger.Response{}, nil })
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, res.Response.Status, again.Response.Status)
	}
}

// Errors that say what happened (issue 13, item 14).
func TestMisuseErrorsSayWhatHappened(t *testing.T) {
	t.Parallel()
	_, err := ledger.New(nil, nil)
	require.ErrorIs(t, err, ledger.ErrInvalidConfig)
	require.ErrorContains(t, err, "nil *kv.DB")

	l, b := setup(t, nil)
	_, err = l.Do(ctx, req("k", "b"), nil)
	require.ErrorIs(t, err, ledger.ErrInvalidRequest)
	require.ErrorContains(t, err, "nil ledger.Work")
	require.NoError(t, b.db.Update(ctx, func(tx kv.Tx) error {
		_, err := l.DoTx(ctx, tx, req("k", "b"), nil)
		require.ErrorIs(t, err, ledger.ErrInvalidRequest)
		return nil
	}))
	_, err = l.Complete(ctx, nil, ledger.Response{}, nil)
	require.ErrorIs(t, err, ledger.ErrInvalidRequest)
	require.ErrorContains(t, err, "nil *Claim")
	err = l.Release(ctx, nil)
	require.ErrorIs(t, err, ledger.ErrInvalidRequest)
	require.ErrorContains(t, err, "nil *Claim")
	err = l.Extend(ctx, nil)
	require.ErrorIs(t, err, ledger.ErrInvalidRequest)
	require.ErrorContains(t, err, "nil *Claim")

	out, err := l.Claim(ctx, req("twice", "b"))
	require.NoError(t, err)
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 200}, nil)
	require.NoError(t, err)
	_, err = l.Complete(ctx, out.Claim, ledger.Response{Status: 200}, nil)
	require.ErrorIs(t, err, ledger.ErrLeaseLost)
	require.ErrorContains(t, err, "is already completed: Complete, Release or Extend was called again")

	_, err = ledger.Scope("ac|me", "POST", "/x")
	require.ErrorContains(t, err, "scope separator")
}

// The rejections a caller meets name the key, the scope and what to do,
// each as it is met: a key in progress, a claim released or superseded
// before its Complete, a tenant at its quota. Status names round-trip.
func TestRejectionsSayWhatHappened(t *testing.T) {
	t.Parallel()
	var limit atomic.Int64 // the tenant's quota of records, lowered below its usage below
	limit.Store(5)
	l, b := setup(t, &ledger.Config{Quota: &ledger.Quota{RetryAfter: time.Minute,
		For: func(string) (int64, int64) { return limit.Load(), 0 }}})

	first, err := l.Claim(ctx, req("busy", "b"))
	require.NoError(t, err)
	_, err = l.Do(ctx, req("busy", "b"), order("o1", nil))
	require.ErrorIs(t, err, ledger.ErrInProgress)
	require.EqualError(t, err, fmt.Sprintf(`ledger: idempotency key "busy" in scope "acme|POST /v1/orders" is in progress (version 1, lease until %s); retry after 1s`,
		t0.Add(ledger.DefaultLease).Format(time.RFC3339Nano)))

	// The lease runs out and another attempt takes the claim over: the
	// first one's Complete is refused, naming the version that replaced it.
	b.clock.Advance(ledger.DefaultLease + time.Second)
	second, err := l.Claim(ctx, req("busy", "b"))
	require.NoError(t, err)
	require.True(t, second.Claim.Takeover)
	_, err = l.Complete(ctx, first.Claim, ledger.Response{Status: 200}, nil)
	require.ErrorIs(t, err, ledger.ErrLeaseLost)
	require.EqualError(t, err, `ledger: claim on key "busy" in scope "acme|POST /v1/orders" (version 1) was superseded: now version 2, in_progress`)

	// Released, the record is gone.
	require.NoError(t, l.Release(ctx, second.Claim))
	_, err = l.Complete(ctx, second.Claim, ledger.Response{Status: 200}, nil)
	require.ErrorIs(t, err, ledger.ErrLeaseLost)
	require.EqualError(t, err, `ledger: claim on key "busy" in scope "acme|POST /v1/orders" (version 2) is gone`)

	for i := range 3 {
		_, err = l.Do(ctx, req(fmt.Sprint("q", i), "b"), order(fmt.Sprint("q", i), nil))
		require.NoError(t, err)
	}
	limit.Store(2)
	_, err = l.Do(ctx, req("q3", "b"), order("q3", nil))
	require.ErrorIs(t, err, ledger.ErrQuotaExceeded)
	var qe *ledger.QuotaError
	require.ErrorAs(t, err, &qe)
	require.Equal(t, time.Minute, qe.RetryAfter)
	require.Regexp(t, `^ledger: tenant "acme" is at its quota: 3 records \(limit 2\), [1-9][0-9]* bytes \(limit 0\)$`, err.Error())

	for _, s := range []ledger.Status{ledger.StatusInProgress, ledger.StatusCompleted} {
		got, err := ledger.ParseStatus(s.String())
		require.NoError(t, err)
		require.Equal(t, s, got)
	}
	require.Equal(t, "status(7)", ledger.Status(7).String())
	_, err = ledger.ParseStatus("done")
	require.EqualError(t, err, `ledger: unknown status "done" (want in_progress or completed)`)
}
