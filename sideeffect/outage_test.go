package sideeffect_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// A short provider outage once parked a payment for good: every fast client
// retry took the intent over and spent an attempt, ignoring its backoff
// (issue 13, item 3). Retries during the backoff now get *BlockedError and
// change nothing; the first retry after it finishes the payment.
func TestClientRetriesDuringAnOutageSpendNoAttempts(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	down := true
	fake.Script = func(string, sideeffect.Call) providertest.Fault {
		if down {
			return providertest.FailBeforeCharge
		}
		return providertest.None
	}
	_, bb := setup(t, fake)
	cfg := config(fake, bb.comp) // MaxAttempts 4, backoff ceilings 1s, 2s, 4s
	cfg.Backoff.Rand = func() float64 { return 0.9 }
	x, err := sideeffect.New(bb.db, &cfg)
	require.NoError(t, err)
	l, err := ledger.New(bb.db, nil)
	require.NoError(t, err)

	_, err = x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	var pe *sideeffect.PendingError
	require.ErrorAs(t, err, &pe)
	for i := range 8 { // 8 fast retries, 300ms apart, inside a 3s outage
		bb.clock.Advance(300 * time.Millisecond)
		_, err = x.Perform(ctx, l, payReq("1"), spec("1"), respond)
		if err == nil || !isBackoff(err) {
			// The backoff (full jitter, at most 1s) ended: a real attempt.
			require.ErrorAs(t, err, &pe, "retry %d", i)
		}
	}
	in, err := x.Get(ctx, pe.Intent.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateUnknown, in.State, "not parked")
	require.Equal(t, 2, in.Attempts, "attempts at 0s and 1.2s (after the 0.9s backoff), none during the 1.8s one")

	down = false
	bb.clock.Advance(time.Minute)
	res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status)
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))
	require.Len(t, fake.Charges(), 1)
}

func isBackoff(err error) bool {
	var be *sideeffect.BlockedError
	return err != nil && errors.As(err, &be) && be.RetryAfter > 0
}

// A parked intent answers a *BlockedError naming its state, to every request
// for it, until an operator requeues or resolves it, offline on the file
// (RequeueTx, ResolveTx: no handlers needed) or through the executor.
func TestParkedIntentIsNamedAndOperatorsRecoverIt(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	x, bb := setup(t, fake)
	l, err := ledger.New(bb.db, nil)
	require.NoError(t, err)
	park := func(order string) *sideeffect.Intent {
		in, _, err := x.Create(ctx, spec(order))
		require.NoError(t, err)
		for range 4 {
			_, _ = x.Execute(ctx, in.ID)
			bb.clock.Advance(time.Minute)
		}
		got, err := x.Get(ctx, in.ID)
		require.NoError(t, err)
		require.Equal(t, sideeffect.StateNeedsAttention, got.State)
		return got
	}
	parked := park("1")
	calls := len(fake.Log())
	for _, key := range []string{"pay-1", "pay-1-new-key"} {
		r := payReq("1")
		r.Key = key
		_, err = x.Perform(ctx, l, r, spec("1"), respond)
		var be *sideeffect.BlockedError
		require.ErrorAs(t, err, &be)
		require.ErrorIs(t, err, sideeffect.ErrNeedsAttention)
		require.Equal(t, sideeffect.StateNeedsAttention, be.Intent.State)
		require.Contains(t, err.Error(), "needs attention")
		_, err = l.Get(ctx, r.Scope, r.Key)
		require.ErrorIs(t, err, ledger.ErrNotFound, "no claim left behind")
	}
	require.Len(t, fake.Log(), calls, "the provider was not called")

	// Offline requeue: the next client retry asks the provider first.
	fake.Script = nil
	require.NoError(t, bb.db.Update(ctx, func(tx kv.Tx) error {
		in, err := sideeffect.RequeueTx(tx, parked.ID, bb.db.Clock().Now())
		require.Equal(t, sideeffect.StateUnknown, in.State)
		return err
	}))
	res, err := x.Perform(ctx, l, payReq("1"), spec("1"), respond)
	require.NoError(t, err)
	require.Equal(t, 200, res.Response.Status)
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))

	// Offline resolve: the verdict waits in the intent; the reconciler
	// applies it with the handler's completion, calling no provider.
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	parked = park("2")
	calls = len(fake.Log())
	require.NoError(t, bb.db.Update(ctx, func(tx kv.Tx) error {
		_, err := sideeffect.ResolveTx(tx, parked.ID, sideeffect.Resolution{State: sideeffect.StateFailed, Reason: "declined per provider dashboard (ops)"}, bb.db.Clock().Now())
		return err
	}))
	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Failed)
	require.Len(t, fake.Log(), calls)
	require.Equal(t, "declined:declined per provider dashboard (ops)", orderState(t, bb.db, "2"))
	got, err := x.Get(ctx, parked.ID)
	require.NoError(t, err)
	require.Nil(t, got.Resolution)
	require.Equal(t, 4, got.Attempts, "a verdict is not a provider attempt")

	require.NoError(t, bb.db.Update(ctx, func(tx kv.Tx) error {
		_, err := sideeffect.ResolveTx(tx, parked.ID, sideeffect.Resolution{State: sideeffect.StateSucceeded}, bb.db.Clock().Now())
		require.ErrorIs(t, err, sideeffect.ErrAlreadyFinal)
		_, err = sideeffect.RequeueTx(tx, parked.ID, bb.db.Clock().Now())
		require.ErrorIs(t, err, sideeffect.ErrAlreadyFinal)
		_, err = sideeffect.ResolveTx(tx, parked.ID, sideeffect.Resolution{State: sideeffect.StateUnknown}, bb.db.Clock().Now())
		require.ErrorIs(t, err, sideeffect.ErrInvalidResolution)
		return nil
	}))
}
