package sideeffect

import (
	"context"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// Operator actions: what a person on call does to an intent the executor
// could not finish by itself. They run on a live service (through the
// Executor) and, in their Tx forms, on the file of a stopped one (the CLI).

// Requeue makes a parked (needs_attention) or unknown intent due now with a
// fresh attempt budget, for an operator who has fixed the cause, and wakes
// the reconciler. The next attempt asks the provider first.
func (x *Executor) Requeue(ctx context.Context, id string) (*Intent, error) {
	var out *Intent
	err := x.db.Update(ctx, func(tx kv.Tx) error {
		var err error
		out, err = RequeueTx(tx, id, x.db.Clock().Now())
		if err == nil {
			tx.OnCommit(x.Wake)
		}
		return err
	})
	return out, err
}

// RequeueTx is Requeue inside the caller's writable transaction, with the
// time given. It needs no handlers, so it also runs on the file of a stopped
// service (oncekv intents requeue): the service's reconciler picks the
// intent up when it runs again. A final intent returns ErrAlreadyFinal.
func RequeueTx(tx kv.Tx, id string, now time.Time) (*Intent, error) {
	in, err := GetTx(tx, id)
	if err != nil {
		return nil, err
	}
	if in.State.Final() {
		return nil, fmt.Errorf("%w: intent %s is %s; nothing to requeue", ErrAlreadyFinal, id, in.State)
	}
	prev := *in
	in.requeue(now)
	return in, storeIntent(tx, in, &prev)
}

// Resolve finishes a live or parked intent by hand (an operator who checked
// the provider's dashboard): state must be StateSucceeded or StateFailed,
// and the handler's completion runs as if the provider had answered. It
// records the verdict (ResolveTx) and applies it at once.
func (x *Executor) Resolve(ctx context.Context, id string, state State, result []byte, reason string) (*Intent, error) {
	err := x.db.Update(ctx, func(tx kv.Tx) error {
		_, err := ResolveTx(tx, id, Resolution{State: state, Result: result, Reason: reason}, x.db.Clock().Now())
		return err
	})
	if err != nil {
		return nil, err
	}
	return x.Execute(ctx, id)
}

// ResolveTx records an operator's verdict on a live or parked intent inside
// the caller's writable transaction and makes the intent due at now. It needs
// no handlers, so it also runs on the file of a stopped service (oncekv
// intents resolve): the executor applies the verdict on the intent's next
// attempt — the reconciler's or a client retry's — running the handler's
// completion instead of calling the provider. A final intent returns
// ErrAlreadyFinal; a verdict that is not succeeded or failed,
// ErrInvalidResolution.
func ResolveTx(tx kv.Tx, id string, r Resolution, now time.Time) (*Intent, error) {
	if !r.State.Final() {
		return nil, fmt.Errorf("%w: resolve to %s: want succeeded or failed", ErrInvalidResolution, r.State)
	}
	if len(r.Result) > maxPayload || len(r.Reason) > maxPayload {
		return nil, fmt.Errorf("%w: result or reason longer than %d bytes", ErrInvalidResolution, maxPayload)
	}
	in, err := GetTx(tx, id)
	if err != nil {
		return nil, err
	}
	if in.State.Final() {
		return nil, fmt.Errorf("%w: intent %s is already %s", ErrAlreadyFinal, id, in.State)
	}
	prev := *in
	in.resolve(r, now)
	return in, storeIntent(tx, in, &prev)
}
