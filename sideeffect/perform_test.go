package sideeffect_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

func payReq(order string) ledger.Request {
	return ledger.Request{Scope: "acme|POST /v1/orders/{id}/pay", Key: "pay-" + order, Fingerprint: ledger.Fingerprint{1}}
}

func respond(_ kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
	if in.State == sideeffect.StateFailed {
		return ledger.Response{Status: 402, Body: []byte(`{"error":"` + in.LastError + `"}`)}, nil
	}
	return ledger.Response{Status: 200, Body: []byte(`{"status":"paid","charge_id":"` + string(in.Result) + `"}`)}, nil
}

func TestPerformHappyPathAndReplay(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	x, bb := setup(t, fake)
	l, err := ledger.New(bb.db, nil)
	require.NoError(t, err)
	res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.False(t, res.Replayed)
	require.Equal(t, `{"status":"paid","charge_id":"ch_0001"}`, string(res.Response.Body))
	again, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, res.Response, again.Response)
	require.Len(t, fake.Log(), 1, "a replay never reaches the provider")
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))

	// A definite failure is stored too (a 402 is the request's answer).
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.Decline }
	res, err = x.Perform(ctx, l, payReq("2"), spec("2"), respond)
	require.NoError(t, err)
	require.Equal(t, 402, res.Response.Status)
	require.Equal(t, "declined:card_declined", orderState(t, bb.db, "2"))
}

// The response is lost (no crash): the request gets *PendingError, the key
// is released, and the client's retry finishes it by asking the provider.
func TestPerformLostResponseRetryAsksProvider(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	lose := true
	fake.Script = func(op string, c sideeffect.Call) providertest.Fault {
		if op == "do" && lose {
			lose = false
			return providertest.LoseResponse
		}
		return providertest.None
	}
	x, bb := setup(t, fake)
	l, _ := ledger.New(bb.db, nil)
	_, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	var pe *sideeffect.PendingError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, sideeffect.StateUnknown, pe.Intent.State)
	_, err = l.Get(ctx, payReq("1").Scope, payReq("1").Key)
	require.ErrorIs(t, err, ledger.ErrNotFound, "the key was released")

	// A retry during the intent's backoff is told when to come back and
	// spends nothing.
	_, err = x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	var be *sideeffect.BlockedError
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, err, sideeffect.ErrBackoff)
	require.Equal(t, pe.RetryAfter, be.RetryAfter)
	require.Equal(t, []string{"do:lost"}, fake.Ops(pe.Intent.ID))

	bb.clock.Advance(pe.RetryAfter)
	res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.Equal(t, `{"status":"paid","charge_id":"ch_0001"}`, string(res.Response.Body))
	require.Equal(t, []string{"do:lost", "status:succeeded"}, fake.Ops(sideeffect.DownstreamKey(spec("1").Scope, spec("1").Key, "charge")))
	require.Len(t, fake.Charges(), 1)
}

// The process dies after the provider charged. A client retry arriving after
// the ledger lease takes the key over, and the executor finishes the request
// by asking the provider: one charge, and the right response.
func TestPerformCrashThenClientRetryAfterLease(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "crash.db")
	fake := providertest.New(providertest.Rates{}, 1)

	db1 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock})
	x1, err := sideeffect.New(db1, ptr(config(crashAfterCharge(fake, &db1), &completions{})))
	require.NoError(t, err)
	l1, _ := ledger.New(db1, &ledger.Config{Lease: 30 * time.Second})
	_, err = x1.Perform(ctx, l1, payReq("1"), spec("1"), respond)
	require.Error(t, err)
	require.Len(t, fake.Charges(), 1)

	db2 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock}, sideeffect.RecordKind, ledger.RecordKind)
	x2, err := sideeffect.New(db2, ptr(config(fake, &completions{})))
	require.NoError(t, err)
	l2, _ := ledger.New(db2, &ledger.Config{Lease: 30 * time.Second})

	// Before the lease runs out the key is still in progress.
	_, err = x2.Perform(ctx, l2, payReq("1"), spec("1"), respond)
	require.ErrorIs(t, err, ledger.ErrInProgress)

	clock.Advance(31 * time.Second)
	if !db2.Traits().SingleWriter {
		// With several writers the intent's owner may be a live replica:
		// its attempt is taken over only after the intent's own lease.
		_, err = x2.Perform(ctx, l2, payReq("1"), spec("1"), respond)
		require.ErrorIs(t, err, ledger.ErrInProgress)
		clock.Advance(time.Minute)
	}
	res, err := x2.Perform(ctx, l2, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.Equal(t, `{"status":"paid","charge_id":"ch_0001"}`, string(res.Response.Body))
	require.Equal(t, []string{"do:charged", "status:succeeded"}, fake.Ops(sideeffect.DownstreamKey(spec("1").Scope, spec("1").Key, "charge")))
	require.Len(t, fake.Charges(), 1)
	require.Equal(t, "paid:ch_0001", orderState(t, db2, "1"))
	rec, err := l2.Get(ctx, payReq("1").Scope, payReq("1").Key)
	require.NoError(t, err)
	require.Equal(t, ledger.StatusCompleted, rec.Status)
	require.Equal(t, uint64(2), rec.Version, "finished by the takeover")

}

// With ledger.Config.RecoverOrphans a retry after a restart takes over at
// once: the intent path verifies with the provider before acting.
func TestPerformRecoverOrphansAtOnce(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "a dead incarnation is told from a live replica only where one process writes")
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "orphan.db")
	fake := providertest.New(providertest.Rates{}, 1)
	db1, err := kv.Open(path, &kv.Options{Clock: clock})
	require.NoError(t, err)
	x1, _ := sideeffect.New(db1, ptr(config(crashAfterCharge(fake, &db1), &completions{})))
	l1, _ := ledger.New(db1, &ledger.Config{RecoverOrphans: true})
	_, err = x1.Perform(ctx, l1, payReq("1"), spec("1"), respond)
	require.Error(t, err)

	db2 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock}, sideeffect.RecordKind, ledger.RecordKind)
	x2, _ := sideeffect.New(db2, ptr(config(fake, &completions{})))
	l2, _ := ledger.New(db2, &ledger.Config{RecoverOrphans: true})
	res, err := x2.Perform(ctx, l2, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status)
	require.Len(t, fake.Charges(), 1)
}

// heldFake returns a fake provider whose charge, once entered, waits
// until release is closed.
func heldFake() (fake *providertest.Fake, entered, release chan struct{}) {
	fake = providertest.New(providertest.Rates{}, 1)
	entered, release = make(chan struct{}), make(chan struct{})
	fake.Script = func(op string, _ sideeffect.Call) providertest.Fault {
		if op == "do" {
			close(entered)
			<-release
		}
		return providertest.None
	}
	return fake, entered, release
}

// Perform ignored Request.Wait (issue 13, item 16): a duplicate of a request
// in progress now waits for it and replays its answer.
func TestPerformWaitsForTheFirstAttempt(t *testing.T) {
	t.Parallel()
	fake, entered, release := heldFake()
	x, bb := setup(t, fake)
	l, err := ledger.New(bb.db, nil)
	require.NoError(t, err)
	first := make(chan ledger.Result, 1)
	go func() {
		res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
		require.NoError(t, err)
		first <- res
	}()
	testwait.Receive(t, entered, "the provider called")
	dup := payReq("1")
	dup.Wait = 30 * time.Second
	second := make(chan error, 1)
	var res ledger.Result
	go func() {
		var err error
		res, err = x.Perform(ctx, l, dup, spec("1"), respond)
		second <- err
	}()
	// Polls state: the duplicate is waiting.
	require.Eventually(t, func() bool { return l.Waited() > 0 }, testwait.Bound, time.Millisecond)
	close(release)
	a := testwait.Receive(t, first, "the first Perform's result")
	require.NoError(t, testwait.Receive(t, second, "the duplicate's end"))
	require.True(t, res.Replayed)
	require.Equal(t, a.Response, res.Response)
	require.Len(t, fake.Charges(), 1)
}

// The key's claim is taken over while the provider call runs, and the
// intent is not (the claim's lease, 30 s, ran out; the intent's, a
// minute, did not): the charge's outcome still commits with the intent,
// the first attempt answers *ledger.InProgressError (the other claim is
// live), and once that claim is given back the client's retry answers the
// charge from the intent, without calling the provider again.
func TestPerformWhoseClaimIsTakenOverKeepsTheCharge(t *testing.T) {
	t.Parallel()
	fake, entered, release := heldFake()
	x, bb := setup(t, fake)
	l, err := ledger.New(bb.db, nil)
	require.NoError(t, err)
	type answer struct {
		res ledger.Result
		err error
	}
	first := make(chan answer, 1)
	go func() {
		res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
		first <- answer{res, err}
	}()
	testwait.Receive(t, entered, "the provider called")
	bb.clock.Advance(45 * time.Second) // past the claim's lease, not the intent's
	other, err := l.Claim(ctx, payReq("1"))
	require.NoError(t, err)
	require.NotNil(t, other.Claim)
	require.True(t, other.Claim.Takeover)
	close(release)

	a := testwait.Receive(t, first, "the first Perform's answer")
	var ip *ledger.InProgressError
	require.ErrorAs(t, a.err, &ip, "the other claim is live")
	in, err := x.Get(ctx, sideeffect.DownstreamKey(spec("1").Scope, spec("1").Key, "charge"))
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, in.State, "the charge's outcome committed")
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))

	require.NoError(t, l.Release(ctx, other.Claim))
	res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.Equal(t, `{"status":"paid","charge_id":"ch_0001"}`, string(res.Response.Body))
	require.Len(t, fake.Charges(), 1)
	require.Equal(t, []string{"do:charged"}, fake.Ops(in.ID), "the retry asked nothing of the provider")
}
