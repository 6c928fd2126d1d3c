package ledger

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned when validating input.
var (
	// ErrInvalidKey is returned when an idempotency key is empty, longer than
	// MaxKeyLen bytes, or contains anything but visible ASCII.
	ErrInvalidKey = errors.New("ledger: invalid idempotency key")

	// ErrInvalidScope is returned when a scope is empty, too long or contains
	// a NUL byte.
	ErrInvalidScope = errors.New("ledger: invalid scope")

	// ErrInvalidRequest is returned for a call the ledger cannot carry out as
	// asked: Do with nil work, Complete with a nil claim.
	ErrInvalidRequest = errors.New("ledger: invalid request")

	// ErrInvalidConfig is returned by New for a Config that fails validation.
	ErrInvalidConfig = errors.New("ledger: invalid config")

	// ErrInvalidResponse is returned when a response to be stored has a
	// status outside 200-999: an informational status (1xx) is not an
	// answer, and one outside 100-999 is not HTTP's (0 is allowed for
	// responses that are not HTTP). Nothing is written. Records stored
	// before with a 1xx are still replayed as they are.
	ErrInvalidResponse = errors.New("ledger: invalid response")

	// ErrResponseTooLarge is returned when a response to be stored exceeds
	// Config.MaxResponseBytes; nothing is written.
	ErrResponseTooLarge = errors.New("ledger: response too large to store")
)

// Errors returned by lookups, claims and completions.
var (
	// ErrMismatch is returned (as a *MismatchError) when a key is reused with a
	// different request: the fingerprints differ.
	ErrMismatch = errors.New("ledger: idempotency key reused with a different request")

	// ErrInProgress is returned (as an *InProgressError) when another attempt
	// with the same key holds a live claim.
	ErrInProgress = errors.New("ledger: request with this idempotency key is in progress")

	// ErrLeaseLost is returned (as a *LeaseLostError) when a completion,
	// release or extension no longer owns its claim: the lease expired and
	// another attempt took over, or the record is gone. Nothing is written.
	ErrLeaseLost = errors.New("ledger: claim lost")

	// ErrNotFound is returned by Get when no live record exists.
	ErrNotFound = errors.New("ledger: record not found")
)

// MismatchError carries both fingerprints of a rejected reuse of a key.
type MismatchError struct {
	Scope, Key string
	Stored     Fingerprint // fingerprint of the request that first used the key
	Got        Fingerprint // fingerprint of this request
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("ledger: idempotency key %q in scope %q was first used with request %s, this request is %s",
		e.Key, e.Scope, e.Stored.Short(), e.Got.Short())
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// InProgressError reports a live claim held by another attempt.
type InProgressError struct {
	Scope, Key     string
	Version        uint64
	LeaseExpiresAt time.Time
	// RetryAfter is a hint for when to try again: the configured RetryAfter,
	// capped by the time left on the lease.
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	return fmt.Sprintf("ledger: idempotency key %q in scope %q is in progress (version %d, lease until %s); retry after %s",
		e.Key, e.Scope, e.Version, e.LeaseExpiresAt.Format(time.RFC3339Nano), e.RetryAfter)
}

// Unwrap returns ErrInProgress.
func (e *InProgressError) Unwrap() error { return ErrInProgress }

// LeaseLostError reports a completion whose claim was superseded.
type LeaseLostError struct {
	Scope, Key string
	Claimed    uint64 // the version this attempt claimed
	Current    uint64 // the version now stored; 0 if the record is gone
	Status     Status // the stored status; 0 if the record is gone
}

func (e *LeaseLostError) Error() string {
	if e.Current == e.Claimed && e.Status == StatusCompleted {
		return fmt.Sprintf("ledger: claim on key %q in scope %q (version %d) is already completed: Complete, Release or Extend was called again after it finished",
			e.Key, e.Scope, e.Claimed)
	}
	if e.Current == 0 {
		return fmt.Sprintf("ledger: claim on key %q in scope %q (version %d) is gone", e.Key, e.Scope, e.Claimed)
	}
	return fmt.Sprintf("ledger: claim on key %q in scope %q (version %d) was superseded: now version %d, %s",
		e.Key, e.Scope, e.Claimed, e.Current, e.Status)
}

// Unwrap returns ErrLeaseLost.
func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// RecordError names the record a decoding failure was found in: a flipped
// byte, a truncated value. errors.Is(err, kv.ErrCorrupt) is true for it.
type RecordError struct {
	Scope, Key string // as far as the record's key can be read
	Err        error
	// Entry is the record's log position, as the check names it and
	// DropDamaged takes it, when a listing (Records) met it; 0 otherwise,
	// and in a database that keeps records by key.
	Entry uint64
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("ledger: record %q in scope %q: %v", e.Key, e.Scope, e.Err)
}

// Unwrap returns the decoding error.
func (e *RecordError) Unwrap() error { return e.Err }
