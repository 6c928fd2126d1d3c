package sideeffect_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/looptest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/seal/sealtest"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// These tests pin down edges that mutants (make mutate) showed no test
// looked at.

func succeed() sideeffect.Provider {
	return sideeffect.ProviderFunc{DoFunc: func(context.Context, sideeffect.Call) (sideeffect.Report, error) {
		return sideeffect.Report{State: sideeffect.Succeeded, Result: []byte("ch_1")}, nil
	}}
}

// A finished intent is kept for FinishedRetentionFor(kind), falling back
// to FinishedRetention on 0; Get treats one past it as absent (GetTx still
// returns it); GetTx of an unknown ID is ErrNotFound.
func TestFinishedRetentionPerKindAndGet(t *testing.T) {
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, sideeffect.RecordKind)
	var comp completions
	x, err := sideeffect.New(db, &sideeffect.Config{
		Handlers:          map[string]sideeffect.Handler{"charge": handler(succeed(), &comp), "email": handler(succeed(), &comp)},
		FinishedRetention: 2 * time.Hour,
		FinishedRetentionFor: func(kind string) time.Duration {
			if kind == "email" {
				return time.Hour
			}
			return 0
		},
	})
	require.NoError(t, err)
	charge, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "o/1", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	email, _, err := x.Create(ctx, sideeffect.Spec{Kind: "email", Subject: "o/1", Key: "1", Purpose: "email"})
	require.NoError(t, err)
	for _, in := range []*sideeffect.Intent{charge, email} {
		_, err := x.Execute(ctx, in.ID)
		require.NoError(t, err)
	}
	got, err := x.Get(ctx, charge.ID)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Hour), got.ExpiresAt, "0 falls back to FinishedRetention")
	got, err = x.Get(ctx, email.ID)
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Hour), got.ExpiresAt)

	clock.Advance(90 * time.Minute)
	_, err = x.Get(ctx, email.ID)
	require.ErrorIs(t, err, sideeffect.ErrNotFound, "past its retention: absent")
	_, err = x.Get(ctx, charge.ID)
	require.NoError(t, err)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		in, err := sideeffect.GetTx(tx, email.ID)
		require.NoError(t, err, "GetTx returns what is stored")
		require.Equal(t, sideeffect.StateSucceeded, in.State)
		_, err = sideeffect.GetTx(tx, "no-such-intent")
		require.ErrorIs(t, err, sideeffect.ErrNotFound)
		n := 0
		for in, err := range sideeffect.Intents(tx, sideeffect.StatePending) {
			require.NoError(t, err)
			require.Equal(t, sideeffect.StatePending, in.State)
			n++
		}
		require.Zero(t, n, "the state filter keeps only pending intents: none")
		return nil
	}))
}

// Requeue and resolve move the version on (a running attempt finds itself
// stale); a resolution's result and reason may be up to 1 MiB each.
func TestRequeueResolveVersionsAndLimits(t *testing.T) {
	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	x, b := setup(t, fake)
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	var parked *sideeffect.Intent
	for range 4 {
		parked, err = x.Execute(ctx, in.ID)
		require.NoError(t, err)
		b.clock.Advance(time.Minute)
	}
	require.Equal(t, sideeffect.StateNeedsAttention, parked.State)
	requeued, err := x.Requeue(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, parked.Version+1, requeued.Version)

	// One limit per transaction: etcd takes at most 1.5 MiB in one.
	var resolved *sideeffect.Intent
	require.NoError(t, b.db.Update(ctx, func(tx kv.Tx) error {
		resolved, err = sideeffect.ResolveTx(tx, in.ID, sideeffect.Resolution{State: sideeffect.StateFailed,
			Result: bytes.Repeat([]byte("r"), 1<<20), Reason: "dashboard"}, b.clock.Now())
		return err
	}))
	require.Equal(t, requeued.Version+1, resolved.Version)
	require.NoError(t, b.db.Update(ctx, func(tx kv.Tx) error {
		resolved, err = sideeffect.ResolveTx(tx, in.ID, sideeffect.Resolution{State: sideeffect.StateFailed,
			Reason: strings.Repeat("x", 1<<20)}, b.clock.Now())
		return err
	}))
	require.Equal(t, requeued.Version+2, resolved.Version)
	require.NoError(t, b.db.Update(ctx, func(tx kv.Tx) error {
		_, err := sideeffect.ResolveTx(tx, in.ID, sideeffect.Resolution{State: sideeffect.StateFailed, Reason: strings.Repeat("x", 1<<20+1)}, b.clock.Now())
		require.ErrorIs(t, err, sideeffect.ErrInvalidResolution)
		_, err = sideeffect.ResolveTx(tx, in.ID, sideeffect.Resolution{State: sideeffect.StateFailed, Result: make([]byte, 1<<20+1)}, b.clock.Now())
		require.ErrorIs(t, err, sideeffect.ErrInvalidResolution)
		return nil
	}))
}

// The observer hears of every state an intent enters, once: created
// pending, then succeeded.
func TestIntentStatesReachTheObserver(t *testing.T) {
	var mu sync.Mutex
	var states []string
	obs := &observe.Observer{Intent: func(_ context.Context, e observe.Intent) {
		mu.Lock()
		states = append(states, e.Kind+":"+e.State)
		mu.Unlock()
	}}
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, Observer: obs}, sideeffect.RecordKind)
	var comp completions
	x, err := sideeffect.New(db, ptr(config(succeed(), &comp)))
	require.NoError(t, err)
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	_, err = x.Execute(ctx, in.ID)
	require.NoError(t, err)
	_, err = x.Execute(ctx, in.ID) // final: nothing changes, nothing reported
	require.NoError(t, err)
	require.Equal(t, []string{"charge:pending", "charge:succeeded"}, states)
}

// CallTimeout bounds each provider call: the provider sees the deadline.
func TestCallTimeoutReachesTheProvider(t *testing.T) {
	var left time.Duration
	p := sideeffect.ProviderFunc{DoFunc: func(ctx context.Context, _ sideeffect.Call) (sideeffect.Report, error) {
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		left = time.Until(dl)
		return sideeffect.Report{State: sideeffect.Succeeded}, nil
	}}
	db := kvtest.Open(t, &kv.Options{NoSync: true}, sideeffect.RecordKind)
	var comp completions
	cfg := config(p, &comp)
	cfg.CallTimeout = 2 * time.Second
	x, err := sideeffect.New(db, &cfg)
	require.NoError(t, err)
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	_, err = x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Positive(t, left)
	require.LessOrEqual(t, left, 2*time.Second, "the configured CallTimeout, not the default")
}

// A database that gained a key ring after its intents were written: the
// clear intents still check clean.
func TestClearIntentsCheckCleanUnderACipher(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	var comp completions
	x, err := sideeffect.New(db, ptr(config(succeed(), &comp)))
	require.NoError(t, err)
	_, _, err = x.Create(ctx, spec("1"))
	require.NoError(t, err)
	require.NoError(t, db.Close())
	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	defer db.Close()
	problems, err := db.Check(ctx, sideeffect.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// A KeyStore names operations of 1 to 1024 bytes.
func TestKeyStoreOperationNames(t *testing.T) {
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	ks := sideeffect.NewKeyStore(db)
	_, err := ks.Key(ctx, strings.Repeat("o", 1024))
	require.NoError(t, err)
	for _, bad := range []string{"", strings.Repeat("o", 1025)} {
		_, err := ks.Key(ctx, bad)
		require.Error(t, err)
	}
}

// The client policy: an HTTP-date Retry-After is honoured; a nil client
// means http.DefaultClient; a POST's body is sent again on every attempt;
// a POST without an Idempotency-Key is not retried, and the error names
// the status.
func TestRetryPolicyEdges(t *testing.T) {
	resp := &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{
		"Retry-After": {time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)}}}
	d := sideeffect.Classify(resp, nil)
	require.True(t, d.Retry)
	require.Greater(t, d.RetryAfter, 30*time.Second)

	var calls atomic.Int32
	var bodies []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	noWait := func(context.Context, time.Duration) error { return nil }
	p := sideeffect.RetryPolicy{MaxAttempts: 3, Sleep: noWait}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"a":1}`))
	req.Header.Set("Idempotency-Key", "k1")
	got, err := p.Do(ctx, nil, req)
	require.NoError(t, err)
	_ = got.Body.Close()
	require.Equal(t, http.StatusCreated, got.StatusCode)
	require.Equal(t, []string{`{"a":1}`, `{"a":1}`}, bodies)

	calls.Store(0)
	req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{}`))
	got, err = p.Do(ctx, nil, req)
	var nr *sideeffect.NotRetryableError
	require.True(t, errors.As(err, &nr))
	require.ErrorContains(t, err, "503")
	_ = got.Body.Close()
}

// Run ends, with kv.ErrClosed, as soon as the database closes (kv.DB.Done),
// though it polls once an hour, rather than sleeping beside a closed
// database until its next poll; onPass has the error too.
func TestReconcilerRunEndsWhenTheDatabaseCloses(t *testing.T) {
	t.Parallel()
	for _, r := range looptest.Refusals {
		t.Run(r.Name, func(t *testing.T) {
			fake := providertest.New(providertest.Rates{}, 1)
			_, bb := setup(t, fake)
			cfg := config(fake, bb.comp)
			cfg.PollInterval = time.Hour
			x, err := sideeffect.New(bb.db, &cfg)
			require.NoError(t, err)
			looptest.EndsWhen(t, r, bb.db, func(ctx context.Context, onPass func(error)) error {
				return x.Run(ctx, func(_ sideeffect.RunStats, err error) { onPass(err) })
			})
		})
	}
}

// Run ends, with an error matching kv.ErrSyncFailed, at its first pass
// after a commit's sync failed after the meta page was written: the
// database refuses every call from then on. The commit is the test's
// own, made before Run: the reconciler's passes commit on its workers'
// goroutines, which strace's count (per thread) cannot follow.
func TestReconcilerRunEndsWhenASyncFails(t *testing.T) {
	looptest.EndsWhenSyncFails(t, func(path string) {
		db := kvtest.OpenPath(t, path, nil, sideeffect.RecordKind, ledger.RecordKind)
		kvtest.RequireBolt(t, db)
		_, err := sideeffect.New(db, ptr(config(providertest.New(providertest.Rates{}, 1), &completions{})))
		require.NoError(t, err)
		require.NoError(t, db.Close())
	}, func(ctx context.Context, db *kv.DB, onPass func(error)) error {
		fake := providertest.New(providertest.Rates{}, 1)
		cfg := config(fake, &completions{})
		cfg.PollInterval = 10 * time.Millisecond
		x, err := sideeffect.New(db, &cfg)
		require.NoError(t, err)
		err = db.Update(ctx, func(tx kv.Tx) error { return kvtest.Increment(tx, "n", "n") }) // syncs 1 and 2, failed
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		return x.Run(ctx, func(_ sideeffect.RunStats, err error) { onPass(err) })
	})
}
