package sideeffect

import (
	"bytes"
	"time"

	"github.com/google/uuid"
)

// The intent state machine. Every transition goes through one of these
// methods; the callers store the intent, fenced by its version.
//
//	pending ──attempt──▶ succeeded | failed          (final; expire later)
//	   │                   ▲
//	   └──▶ unknown ───────┘  (ask the provider first, back off)
//	          │
//	          └──▶ needs_attention  (attempts exhausted; parked)
//	                  │
//	    requeue/resolve (operator) ──▶ unknown, due now

// begin takes the intent for one attempt: a new version (fencing any
// earlier attempt), a lease held by owner, the attempt counted — unless it
// applies an operator's verdict, which is not a provider attempt. If the
// attempt dies, the intent is due again when its lease ends.
func (in *Intent) begin(now time.Time, owner uuid.UUID, lease time.Duration) {
	in.Version++
	if in.Resolution == nil {
		in.Attempts++
	}
	in.Owner, in.LeaseExpiresAt, in.UpdatedAt = owner, now.Add(lease), now
	in.NextAttemptAt = in.LeaseExpiresAt
}

// succeed finishes the intent with the provider's result.
func (in *Intent) succeed(now time.Time, result []byte, expires time.Time) {
	in.settle(now)
	in.State, in.Result, in.FinishedAt, in.LastError, in.ExpiresAt = StateSucceeded, result, now, "", expires
}

// fail finishes the intent with a definite failure.
func (in *Intent) fail(now time.Time, reason string, expires time.Time) {
	in.settle(now)
	in.State, in.FinishedAt, in.LastError, in.ExpiresAt = StateFailed, now, reason, expires
}

// unresolved records an attempt whose outcome is not known: the intent backs
// off, or is parked as needs_attention once its attempts are spent.
func (in *Intent) unresolved(now time.Time, reason string, maxAttempts int, b Backoff) {
	in.settle(now)
	in.LastError = reason
	if in.Attempts >= maxAttempts {
		in.State = StateNeedsAttention
		return
	}
	in.State, in.NextAttemptAt = StateUnknown, now.Add(b.Delay(in.Attempts))
}

// settle ends an attempt: no lease, no pending verdict.
func (in *Intent) settle(now time.Time) {
	in.UpdatedAt, in.LeaseExpiresAt, in.Resolution = now, time.Time{}, nil
}

// requeue makes a parked or unknown intent due now with a fresh attempt
// budget. Attempts restarts at 1, not 0: the next attempt must ask the
// provider first. The version moves on, so an attempt still running in this
// process finds itself stale.
func (in *Intent) requeue(now time.Time) {
	in.State, in.Attempts, in.NextAttemptAt, in.UpdatedAt = StateUnknown, 1, now, now
	in.LeaseExpiresAt = time.Time{}
	in.Version++
}

// resolve records an operator's verdict, applied at the next attempt.
func (in *Intent) resolve(r Resolution, now time.Time) {
	r.Result = bytes.Clone(r.Result)
	in.Resolution = &r
	in.State, in.NextAttemptAt, in.UpdatedAt, in.LeaseExpiresAt = StateUnknown, now, now, time.Time{}
	in.Version++
}
