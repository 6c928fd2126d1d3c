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

	// ErrPending is returned (as a *PendingError) by Perform when the outside
	// call's outcome is not known yet; the intent will be finished by a retry
	// or by the reconciler.
	ErrPending = errors.New("sideeffect: outcome not known yet")
)

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
