package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff computes retry delays: exponential growth from Base, capped at
// Cap, with full jitter (a uniformly random delay between 0 and the capped
// exponential), so that many clients retrying the same failure spread out
// instead of arriving together.
type Backoff struct {
	// Base is the ceiling of the first delay. 0 means 100ms.
	Base time.Duration
	// Cap bounds every delay. 0 means 30s.
	Cap time.Duration
	// Rand returns a number in [0, 1). nil means math/rand/v2.Float64.
	Rand func() float64
}

// Ceiling returns the capped exponential for the given attempt (1-based),
// before jitter: min(Cap, Base * 2^(attempt-1)).
func (b Backoff) Ceiling(attempt int) time.Duration {
	base, limit := b.Base, b.Cap
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if limit <= 0 {
		limit = 30 * time.Second
	}
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Delay returns a jittered delay for the given attempt (1-based): uniform in
// [0, Ceiling(attempt)].
func (b Backoff) Delay(attempt int) time.Duration {
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	return time.Duration(r() * float64(b.Ceiling(attempt)+1))
}
