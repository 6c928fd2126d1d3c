package kv

import (
	"time"
)

// Clock tells the time. Every lease, expiry and retention decision in oncekv
// reads the time from the Clock in Options, so tests can move time without
// sleeping (kvtest.ManualClock).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
}

// systemClock is the wall clock, the default.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
