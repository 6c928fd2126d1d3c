package sideeffect_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// A finished-intent retention past the time encoding once wrapped round:
// the intent counted as expired at once and the next request created a new
// one and called the provider again (issue 13, item 2).
func TestFinishedRetentionPastTheTimeEncoding(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour} {
		cfg := config(fake, &completions{})
		cfg.FinishedRetention = d
		_, err := sideeffect.New(nil, &cfg)
		require.ErrorIs(t, err, sideeffect.ErrInvalidConfig)
		cfg.FinishedRetention, cfg.Lease = 0, d
		_, err = sideeffect.New(nil, &cfg)
		require.ErrorIs(t, err, sideeffect.ErrInvalidConfig)
	}

	_, bb := setup(t, fake)
	cfg := config(fake, bb.comp)
	cfg.FinishedRetentionFor = func(string) time.Duration { return math.MaxInt64 }
	x, err := sideeffect.New(bb.db, &cfg)
	require.NoError(t, err)
	in, created, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	require.True(t, created)
	done, err := x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, done.State)
	bb.clock.Advance(48 * time.Hour)
	again, created, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	require.False(t, created, "the finished intent is still remembered")
	require.Equal(t, sideeffect.StateSucceeded, again.State)
	_, err = x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"do:charged"}, fake.Ops(in.DownstreamKey), "the provider was called once")
}
