package sideeffect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"

	"github.com/oncekv/oncekv/internal/failpoint"
)

// Respond builds the response stored for an idempotent request from its
// finished intent (a charge ID on success, a decline on failure). It runs in
// the transaction that finishes the intent, after the handler's completion,
// so it can read the business state that completion wrote ("the order, now
// paid"). It must only read: it may run more than once, and again when a
// later retry finds the intent already finished. The response's status is
// 200-999, or 0 for a response that is not HTTP: another (an informational
// 1xx included) fails the finishing transaction with
// ledger.ErrInvalidResponse, and the intent is finished again, from the
// provider's word, by the next retry or the reconciler. So does a panic,
// which Perform returns as its error ("Finish panicked: ...", logged with
// the stack), not raised through the caller.
type Respond func(tx kv.Tx, in *Intent) (ledger.Response, error)

// Perform runs an idempotent request whose work is one side effect,
// wiring the two-phase ledger path to an intent:
//
//  1. One transaction claims the idempotency key (ledger.ClaimTx), records
//     the intent (CreateTx) and takes it over for this attempt; a completed
//     key is replayed instead.
//  2. The provider is called with the downstream key, outside any
//     transaction.
//  3. One transaction marks the intent final, runs the handler's
//     completion ("order paid") and completes the key with respond(tx, intent).
//
// When a retry finds the key in progress after its lease (or, with
// ledger.Config.RecoverOrphans, left by a dead process), it takes the claim
// over; the intent already exists, so the executor asks the provider for the
// key's status before anything else and finishes from the answer: an
// interrupted request is finished by asking, not by charging again.
//
// If the outcome is not known (the provider timed out, the response was
// lost), the claim is released so that a retry runs again, the intent stays
// live for the reconciler, and *PendingError is returned. A retry that
// arrives while the intent backs off after such an outcome, or after it was
// parked as needs_attention, gets *BlockedError and changes nothing: client
// retries during a provider outage never spend the intent's attempts.
// Rejections from the ledger (*ledger.MismatchError, *ledger.InProgressError)
// are returned as is. An attempt whose provider call outlived the intent's
// lease (a provider that ignores its context) and was overtaken by a retry
// gets what the retry stored, as a replay, or *ledger.InProgressError while
// the retry runs; its own result is discarded.
//
// With req.Wait set, a request that meets its key in progress in this
// process waits for that attempt (ledger.Ledger.Wait) instead of returning
// *ledger.InProgressError at once.
func (x *Executor) Perform(ctx context.Context, l *ledger.Ledger, req ledger.Request, spec Spec, respond Respond) (ledger.Result, error) {
	until := time.Now().Add(req.Wait)
	for {
		res, err := x.perform(ctx, l, req, spec, respond)
		if wasOvertaken(err) {
			res, err = x.overtaken(ctx, l, req, err)
		}
		var ip *ledger.InProgressError
		if req.Wait > 0 && errors.As(err, &ip) && l.Wait(ctx, ip, until) {
			continue
		}
		return res, err
	}
}

// wasOvertaken reports an attempt whose key or intent a retry took over
// when the intent's lease ran out: its own result was discarded (the
// intent's version moved on, or the claim's), the retry's stands.
func wasOvertaken(err error) bool {
	return errors.Is(err, ErrStale) || errors.Is(err, ledger.ErrLeaseLost)
}

// overtaken answers an attempt that a retry overtook: the retry finishes
// the side effect, so the attempt gets what the retry stored, as a replay,
// or, while the retry still runs, *ledger.InProgressError (which a caller
// with Request.Wait waits on). Only a provider call that outlives the
// intent's lease, longer than CallTimeout, is overtaken: one that ignores
// its context. The log says so each time.
func (x *Executor) overtaken(ctx context.Context, l *ledger.Ledger, req ledger.Request, err error) (ledger.Result, error) {
	x.cfg.Logger.Warn("intent attempt overtaken: its provider call outlived the intent's lease and a retry took it over",
		"scope", req.Scope, "key", req.Key, "error", err)
	stored, perr := l.Peek(ctx, req)
	switch {
	case perr != nil:
		return ledger.Result{}, perr // the retry's live claim, with its retry hint
	case stored != nil:
		return *stored, nil
	}
	return ledger.Result{}, &ledger.InProgressError{Scope: req.Scope, Key: req.Key, RetryAfter: time.Second}
}

func (x *Executor) perform(ctx context.Context, l *ledger.Ledger, req ledger.Request, spec Spec, respond Respond) (ledger.Result, error) {
	var out ledger.Outcome
	var a attempt
	err := x.db.Batch(ctx, func(tx kv.Tx) error {
		out, a = ledger.Outcome{}, attempt{}
		if err := x.admitTx(tx, l, req, spec, &out); err != nil || out.Replay != nil {
			return err
		}
		o, err := l.ClaimTx(ctx, tx, req)
		if isLedgerRejection(err) {
			return kv.Reject(err)
		}
		out = o
		if err != nil || o.Replay != nil {
			return err
		}
		in, _, err := x.CreateTx(tx, spec)
		if err != nil {
			return err
		}
		// Take the intent over in the same transaction: the claim, the
		// intent and the attempt become durable together, in one commit.
		// A busy or parked intent rolls the claim back with it.
		a, err = x.takeOverTx(tx, in.ID, false)
		return err
	})
	switch {
	case errors.Is(err, ErrBusy):
		return ledger.Result{}, &ledger.InProgressError{Scope: req.Scope, Key: req.Key, RetryAfter: time.Second}
	case err != nil:
		return ledger.Result{}, err
	case out.Replay != nil:
		return *out.Replay, nil
	}
	if !a.finalized {
		failpoint.Inject(failpoint.TakeoverAfterCommit)
	}
	claim := out.Claim

	var res ledger.Result
	var completed bool
	final, err := x.run(ctx, a, func(tx kv.Tx, fin *Intent) error {
		resp, err := respond(tx, fin)
		if err != nil {
			return err
		}
		r, err := l.CompleteTx(ctx, tx, claim, resp, nil)
		if errors.Is(err, ledger.ErrLeaseLost) {
			// Another attempt owns the key now; the intent's outcome still
			// commits and that attempt will find it.
			completed = false
			return nil
		}
		res, completed = r, err == nil
		return err
	})
	switch {
	case err == nil && completed:
		res.Takeover = claim.Takeover
		return res, nil
	case err == nil && final.State.Final():
		return ledger.Result{}, fmt.Errorf("sideeffect: intent %s finished %s but the key was taken over: %w", final.ID, final.State, ledger.ErrLeaseLost)
	}

	// The outcome is not known (or the attempt could not run): give the key
	// back so a retry runs again; the intent remembers what was attempted.
	if rerr := l.Release(context.WithoutCancel(ctx), claim); rerr != nil && !errors.Is(rerr, ledger.ErrLeaseLost) {
		return ledger.Result{}, errors.Join(err, rerr)
	}
	if err != nil {
		return ledger.Result{}, err
	}
	return ledger.Result{}, &PendingError{Intent: final, RetryAfter: max(final.NextAttemptAt.Sub(x.db.Clock().Now()), 0)}
}

func isLedgerRejection(err error) bool {
	return errors.Is(err, ledger.ErrMismatch) || errors.Is(err, ledger.ErrInProgress) || errors.Is(err, ledger.ErrQuotaExceeded)
}

// admitTx answers, before anything is written, a request whose intent a
// client may not work on now (backing off, parked): with the stored replay
// if the key completed, else with a rejected *BlockedError. It sets
// out.Replay for a replay.
func (x *Executor) admitTx(tx kv.Tx, l *ledger.Ledger, req ledger.Request, spec Spec, out *ledger.Outcome) error {
	in, err := loadIntent(tx, DownstreamKey(spec.Scope, spec.Key, spec.Purpose))
	if err != nil || in == nil {
		return err
	}
	berr := x.blocked(in)
	if berr == nil {
		return nil
	}
	replay, err := l.PeekTx(tx, req)
	switch {
	case isLedgerRejection(err):
		return kv.Reject(err)
	case err != nil:
		return err
	case replay != nil:
		out.Replay = replay
		return nil
	}
	return kv.Reject(berr)
}

// blocked says why a client request must not take the intent over now:
// parked for an operator, or backing off after an unknown outcome. An
// intent with an attempt in flight (a live lease) is left to takeOverTx,
// which answers busy or recovers a dead process's attempt.
func (x *Executor) blocked(in *Intent) *BlockedError {
	now := x.db.Clock().Now()
	switch {
	case in.Resolution != nil || now.Before(in.LeaseExpiresAt):
		return nil
	case in.State == StateNeedsAttention:
		return &BlockedError{Intent: in}
	case in.State == StateUnknown && now.Before(in.NextAttemptAt):
		return &BlockedError{Intent: in, RetryAfter: in.NextAttemptAt.Sub(now)}
	}
	return nil
}
