package ledger

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
)

// registered waits (on state, not on a sleep) until someone waits on rk.
func (l *Ledger) registered(t *testing.T, rk string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		l.waiters.mu.Lock()
		e := l.waiters.m[rk]
		l.waiters.mu.Unlock()
		if e != nil {
			return
		}
	}
	t.Fatal("nobody waited on the key")
}

// waitLedger is a ledger on a bbolt file of its own: waiting is woken
// in process, by this process's completions.
func waitLedger(t *testing.T) *Ledger {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "w.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l, err := New(db, nil)
	require.NoError(t, err)
	return l
}

// The wait tests once passed with the wait broken, because the duplicate
// usually ran after the completion (issue 13, item 16). Here the duplicate
// is known to be waiting before the first attempt completes, it is woken by
// that completion (not by polling, nor by its 30 s bound), and it waits once.
func TestWaitIsWokenByTheCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := waitLedger(t)
	for _, finish := range []string{"complete", "release"} {
		req := Request{Scope: "acme|POST /x", Key: "k-" + finish, Fingerprint: Fingerprint{1}}
		out, err := l.Claim(ctx, req)
		require.NoError(t, err)
		waitsBefore := l.waited.Load()

		dup := req
		dup.Wait = 30 * time.Second
		got := make(chan error, 1)
		var res Result
		go func() {
			var err error
			res, err = l.Do(ctx, dup, func(kv.Tx) (Response, error) { return Response{Status: 201, Body: []byte("ran")}, nil })
			got <- err
		}()
		l.registered(t, string(recordKey(nil, req.Scope, req.Key)))
		if finish == "complete" {
			_, err = l.Complete(ctx, out.Claim, Response{Status: 200, Body: []byte("first")}, nil)
		} else {
			err = l.Release(ctx, out.Claim)
		}
		require.NoError(t, err)
		// Had the notification not woken it, the wait would have ended at its
		// 30 s bound with the key still in progress: an error here.
		require.NoError(t, testwait.Receive(t, got, "the waiter's end"))
		if finish == "complete" {
			require.True(t, res.Replayed)
			require.Equal(t, "first", string(res.Response.Body))
		} else {
			require.False(t, res.Replayed, "a released key runs again")
			require.Equal(t, "ran", string(res.Response.Body))
		}
		require.Equal(t, int64(1), l.waited.Load()-waitsBefore, "one wait, not a spin")
	}
}

// Two duplicates wait on one key; the first gives up at its bound. The
// other must still be woken by the completion (its waiter entry outlives
// the first's), and when both are done no entry is left behind. A Claim
// with Wait waits as Do does.
func TestWaitersShareAnEntryAndLeaveNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := waitLedger(t)
	req := Request{Scope: "acme|POST /x", Key: "k", Fingerprint: Fingerprint{1}}
	out, err := l.Claim(ctx, req)
	require.NoError(t, err)
	rk := string(recordKey(nil, req.Scope, req.Key))

	patient := req
	patient.Wait = 30 * time.Second
	got := make(chan Outcome, 1)
	errs := make(chan error, 1)
	go func() {
		out, err := l.Claim(ctx, patient)
		got <- out
		errs <- err
	}()
	l.registered(t, rk)

	hasty := req
	hasty.Wait = 20 * time.Millisecond
	_, err = l.Do(ctx, hasty, func(kv.Tx) (Response, error) { return Response{}, nil })
	require.ErrorIs(t, err, ErrInProgress, "the hasty duplicate gives up at its bound")

	_, err = l.Complete(ctx, out.Claim, Response{Status: 200, Body: []byte("first")}, nil)
	require.NoError(t, err)
	// Had the hasty duplicate's departure removed the shared entry, the
	// completion would have woken nobody and the patient Claim would have
	// ended at its 30 s bound, in progress.
	require.NoError(t, testwait.Receive(t, errs, "the patient Claim's end"))
	o := testwait.Receive(t, got, "the patient Claim's outcome")
	require.NotNil(t, o.Replay, "the patient Claim waited and got the replay")
	require.Equal(t, "first", string(o.Replay.Response.Body))

	// A wait that ends at its bound, with nobody completing the key, leaves
	// no entry either.
	other := Request{Scope: "acme|POST /x", Key: "never-finished", Fingerprint: Fingerprint{1}}
	_, err = l.Claim(ctx, other)
	require.NoError(t, err)
	other.Wait = 20 * time.Millisecond
	_, err = l.Do(ctx, other, func(kv.Tx) (Response, error) { return Response{}, nil })
	require.ErrorIs(t, err, ErrInProgress)

	l.waiters.mu.Lock()
	defer l.waiters.mu.Unlock()
	require.Empty(t, l.waiters.m, "no waiter entry is left behind")
}
