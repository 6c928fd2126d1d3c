package ledger_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// Retentions past the time encoding (int64 Unix nanoseconds end in 2262)
// once wrapped round into the past: every record was expired at once and Do
// ran its work again (issue 13, item 2). Configurations reject them; a
// per-scope function that returns one is clamped to kv.Never.
func TestRetentionPastTheTimeEncoding(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour} {
		_, err := ledger.New(nil, &ledger.Config{Retention: d})
		require.ErrorIs(t, err, ledger.ErrInvalidConfig, d)
		_, err = ledger.New(nil, &ledger.Config{Lease: d, Retention: d})
		require.ErrorIs(t, err, ledger.ErrInvalidConfig, d)
		_, err = ledger.NewInbox(nil, &ledger.InboxConfig{Retention: d})
		require.ErrorIs(t, err, ledger.ErrInvalidConfig, d)
	}

	for _, d := range []time.Duration{math.MaxInt64, 250 * 365 * 24 * time.Hour, kv.MaxRetention} {
		l, b := setup(t, &ledger.Config{RetentionFor: func(string) time.Duration { return d }})
		runs := 0
		for range 3 {
			res, err := l.Do(ctx, req("k", "body"), order("ord_1", &runs))
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status)
			b.clock.Advance(24 * time.Hour)
		}
		require.Equal(t, 1, runs, "retention %s: the work ran once", d)
		r, err := l.Get(ctx, "acme|POST /v1/orders", "k")
		require.NoError(t, err)
		require.False(t, r.ExpiresAt.Before(t0.Add(99*365*24*time.Hour)), "expires %s", r.ExpiresAt)

		in, err := ledger.NewInbox(b.db, &ledger.InboxConfig{RetentionFor: func(string) time.Duration { return d }})
		require.NoError(t, err)
		applied := 0
		for range 3 {
			_, err := in.Handle(ctx, "billing", "msg-1", func(kv.Tx) error { applied++; return nil })
			require.NoError(t, err)
			b.clock.Advance(24 * time.Hour)
		}
		require.Equal(t, 1, applied, "retention %s: the message was applied once", d)
	}
}
