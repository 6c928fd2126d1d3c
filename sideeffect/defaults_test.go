package sideeffect_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// An intent whose outcome stays unknown backs off by the documented
// defaults (a first delay of up to a second, growing to at most five
// minutes) and is parked after DefaultMaxAttempts; a field set in Config
// replaces only its own default.
func TestExecutorRetryDefaults(t *testing.T) {
	t.Parallel()
	top := func() float64 { return 0.999999 } // the jitter's top: the delay is the ceiling
	for _, c := range []struct {
		name        string
		maxAttempts int
		backoff     sideeffect.Backoff
		first, last time.Duration // the delay after the first attempt and after the last one that backs off
		parkedAfter int
	}{
		{"defaults", 0, sideeffect.Backoff{Rand: top}, time.Second, 64 * time.Second, sideeffect.DefaultMaxAttempts},
		{"more attempts", 12, sideeffect.Backoff{Rand: top}, time.Second, 5 * time.Minute, 12},
		{"base given", 12, sideeffect.Backoff{Base: 3 * time.Second, Rand: top}, 3 * time.Second, 5 * time.Minute, 12},
		{"cap given", 12, sideeffect.Backoff{Cap: 20 * time.Second, Rand: top}, time.Second, 20 * time.Second, 12},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := providertest.New(providertest.Rates{}, 1)
			fake.Script = neverKnown
			_, bb := setup(t, fake)
			cfg := config(fake, bb.comp)
			cfg.MaxAttempts, cfg.Backoff = c.maxAttempts, c.backoff
			x, err := sideeffect.New(bb.db, &cfg)
			require.NoError(t, err)
			in, _, err := x.Create(ctx, spec("1"))
			require.NoError(t, err)
			got, err := x.Execute(ctx, in.ID)
			require.NoError(t, err)
			for attempt := 1; ; attempt++ {
				if attempt == c.parkedAfter {
					require.Equal(t, sideeffect.StateNeedsAttention, got.State, "parked after attempt %d", attempt)
					break
				}
				require.Equal(t, sideeffect.StateUnknown, got.State, "attempt %d", attempt)
				wait := got.NextAttemptAt.Sub(bb.clock.Now())
				switch attempt {
				case 1:
					require.InDelta(t, c.first, wait, float64(time.Millisecond), "after the first attempt")
				case c.parkedAfter - 1:
					require.InDelta(t, c.last, wait, float64(time.Millisecond), "after attempt %d", attempt)
				}
				bb.clock.Advance(wait + time.Millisecond)
				stats, err := x.RunOnce(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, stats.Examined, "attempt %d is due after its delay", attempt+1)
				got, err = x.Get(ctx, in.ID)
				require.NoError(t, err)
			}
		})
	}
}

// The settings left zero take their documented defaults; those set are
// kept as they are.
func TestExecutorConfigDefaults(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	_, bb := setup(t, fake)
	zero := config(fake, bb.comp)
	zero.Grace, zero.Lease, zero.CallTimeout, zero.MaxAttempts, zero.PollInterval, zero.Concurrency, zero.FinishedRetention = 0, 0, 0, 0, 0, 0, 0
	zero.Backoff, zero.Logger = sideeffect.Backoff{}, nil
	x, err := sideeffect.New(bb.db, &zero)
	require.NoError(t, err)
	c := x.Config()
	require.Equal(t, sideeffect.DefaultGrace, c.Grace)
	require.Equal(t, sideeffect.DefaultLease, c.Lease)
	require.Equal(t, sideeffect.DefaultCallTimeout, c.CallTimeout)
	require.Equal(t, sideeffect.DefaultMaxAttempts, c.MaxAttempts)
	require.Equal(t, sideeffect.DefaultPollInterval, c.PollInterval)
	require.Equal(t, 4, c.Concurrency)
	require.Equal(t, time.Second, c.Backoff.Base)
	require.Equal(t, 5*time.Minute, c.Backoff.Cap)
	require.Equal(t, sideeffect.DefaultFinishedRetention, c.FinishedRetention)
	require.NotNil(t, c.Logger)

	set := config(fake, bb.comp)
	set.Grace, set.Lease, set.CallTimeout, set.MaxAttempts, set.PollInterval, set.Concurrency, set.FinishedRetention = 2*time.Second, 4*time.Second, 3*time.Second, 5, 6*time.Second, 7, 8*time.Hour
	set.Backoff = sideeffect.Backoff{Base: 9 * time.Millisecond, Cap: 10 * time.Second}
	x, err = sideeffect.New(bb.db, &set)
	require.NoError(t, err)
	c = x.Config()
	require.Equal(t, []any{2 * time.Second, 4 * time.Second, 3 * time.Second, 5, 6 * time.Second, 7, 8 * time.Hour, 9 * time.Millisecond, 10 * time.Second},
		[]any{c.Grace, c.Lease, c.CallTimeout, c.MaxAttempts, c.PollInterval, c.Concurrency, c.FinishedRetention, c.Backoff.Base, c.Backoff.Cap})
}
