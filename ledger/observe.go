package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/oncekv/oncekv/observe"
)

// report tells the observer what a ledger call did.
func (l *Ledger) report(ctx context.Context, o *observe.Observer, call, scope string, start time.Time, out observe.Outcome, stored int) {
	if o.Request == nil {
		return
	}
	o.Request(ctx, observe.Request{Call: call, Outcome: out, Tenant: TenantOf(scope), Duration: time.Since(start), RecordBytes: stored})
}

// outcomeOf classifies a ledger call's result.
func outcomeOf(err error, replayed, takeover, waited bool) observe.Outcome {
	switch {
	case err == nil && replayed && waited:
		return observe.OutcomeWaited
	case err == nil && replayed:
		return observe.OutcomeReplay
	case err == nil && takeover:
		return observe.OutcomeTakeover
	case err == nil:
		return observe.OutcomeNew
	case errors.Is(err, ErrMismatch):
		return observe.OutcomeMismatch
	case errors.Is(err, ErrInProgress):
		return observe.OutcomeInProgress
	case errors.Is(err, ErrQuotaExceeded):
		return observe.OutcomeQuota
	case errors.Is(err, ErrLeaseLost):
		return observe.OutcomeLeaseLost
	}
	return observe.OutcomeError
}

// spanErr is the error a span records: a rejection (mismatch, in progress,
// quota) is an answer, not a failure of the call.
func spanErr(err error) error {
	if isRejection(err) {
		return nil
	}
	return err
}
