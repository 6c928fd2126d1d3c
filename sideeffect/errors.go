package sideeffect

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by intents and the executor.
var (
	// ErrInvalidSpec is returned when an intent's Spec is incomplete.
	ErrInvalidSpec = errors.New("sideeffect: invalid intent spec")

	// ErrInvalidConfig is returned by New for a Config that fails validation.
	ErrInvalidConfig = errors.New("sideeffect: invalid config")

	// ErrUnknownKind is returned when an intent's kind has no Handler.
	ErrUnknownKind = errors.New("sideeffect: no handler for intent kind")

	// ErrNotFound is returned when no intent has the requested ID.
	ErrNotFound = errors.New("sideeffect: intent not found")

	// ErrBusy is returned when another goroutine of this process is executing
	// the intent (it holds a live lease).
	ErrBusy = errors.New("sideeffect: intent is being executed")

	// ErrStale is returned (as a *StaleError) when an execution finishes after
	// the intent was taken over: it wrote nothing.
	ErrStale = errors.New("sideeffect: intent was taken over; result discarded")

	// ErrNeedsAttention is returned by Execute for an intent parked after too
	// many attempts; an operator must resolve or requeue it.
	ErrNeedsAttention = errors.New("sideeffect: intent needs attention")

	// ErrAlreadyFinal is returned by Requeue and Resolve for an intent that
	// has already succeeded or failed.
	ErrAlreadyFinal = errors.New("sideeffect: intent is already final")

	// ErrInvalidResolution is returned by Resolve for a verdict other than
	// succeeded or failed, or one with oversized text.
	ErrInvalidResolution = errors.New("sideeffect: invalid resolution")

	// ErrBackoff is returned (as a *BlockedError) by Perform when the
	// intent's last attempt had an unknown outcome and its backoff has not
	// ended: the client should retry after BlockedError.RetryAfter. Nothing
	// was written and no attempt was spent, so client retries during a
	// provider outage cannot park the intent.
	ErrBackoff = errors.New("sideeffect: intent is backing off after an unknown outcome")

	// ErrPending is returned (as a *PendingError) by Perform when the outside
	// call's outcome is not known yet; the intent will be finished by a retry
	// or by the reconciler.
	ErrPending = errors.New("sideeffect: outcome not known yet")
)

// IntentError names the intent a decoding failure was found in: a flipped
// byte, a truncated value, a sealed field that does not open with the key
// ring. errors.Is(err, kv.ErrCorrupt) is true for damage. Intents yields
// one for such an intent and goes on with the next.
type IntentError struct {
	ID  string // the intent's key, as stored (a damaged key included)
	Err error
}

func (e *IntentError) Error() string { return fmt.Sprintf("sideeffect: intent %q: %v", e.ID, e.Err) }

// Unwrap returns the decoding error.
func (e *IntentError) Unwrap() error { return e.Err }

// StaleError reports an execution whose intent moved on.
type StaleError struct {
	ID       string
	Executed uint64 // the version this execution held
	Current  uint64 // the version now stored
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("sideeffect: intent %s: executed as version %d but it is now version %d; nothing written", e.ID, e.Executed, e.Current)
}

// Unwrap returns ErrStale.
func (e *StaleError) Unwrap() error { return ErrStale }

// PendingError carries an intent whose outcome is not known yet.
type PendingError struct {
	Intent *Intent
	// RetryAfter is when the intent is next due.
	RetryAfter time.Duration
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("sideeffect: intent %s (%s %s) is %s after %d attempts: %s",
		e.Intent.ID, e.Intent.Kind, e.Intent.Subject, e.Intent.State, e.Intent.Attempts, e.Intent.LastError)
}

// Unwrap returns ErrPending.
func (e *PendingError) Unwrap() error { return ErrPending }

// BlockedError reports an intent that a client request cannot work on now:
// it is backing off after an unknown outcome (errors.Is(err, ErrBackoff);
// retry after RetryAfter), or parked for an operator (errors.Is(err,
// ErrNeedsAttention); no retry helps until someone requeues or resolves it).
type BlockedError struct {
	Intent *Intent
	// RetryAfter is the time until the intent's next attempt; zero when it
	// is parked.
	RetryAfter time.Duration
}

func (e *BlockedError) Error() string {
	if e.Intent.State == StateNeedsAttention {
		return fmt.Sprintf("sideeffect: intent %s (%s %s) needs attention after %d attempts: requeue or resolve it",
			e.Intent.ID, e.Intent.Kind, e.Intent.Subject, e.Intent.Attempts)
	}
	return fmt.Sprintf("sideeffect: intent %s (%s %s) is backing off after an unknown outcome; next attempt in %s",
		e.Intent.ID, e.Intent.Kind, e.Intent.Subject, e.RetryAfter)
}

// Unwrap returns ErrNeedsAttention for a parked intent, else ErrBackoff.
func (e *BlockedError) Unwrap() error {
	if e.Intent.State == StateNeedsAttention {
		return ErrNeedsAttention
	}
	return ErrBackoff
}
