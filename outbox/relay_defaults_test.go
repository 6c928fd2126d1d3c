package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
)

// nextAttempt is the pending event's next attempt, from now.
func nextAttempt(t *testing.T, db *kv.DB, id string) time.Duration {
	t.Helper()
	var d time.Duration
	found := false
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for e, err := range outbox.Events(tx, outbox.EventPending) {
			require.NoError(t, err)
			if e.ID == id {
				d, found = e.NextAttempt.Sub(db.Clock().Now()), true
			}
		}
		return nil
	}))
	require.True(t, found, "%s is not pending", id)
	return d
}

// A failing event is retried after the documented default backoff: a
// first delay of up to 500ms, growing to at most a minute. Only the
// fields left zero take their defaults.
func TestRelayBackoffDefaults(t *testing.T) {
	t.Parallel()
	top := func() float64 { return 0.999999 } // the jitter's top: the delay is the ceiling
	for _, c := range []struct {
		name        string
		backoff     outbox.Backoff
		first, last time.Duration // the delay after the first and the tenth failure
	}{
		{"defaults", outbox.Backoff{Rand: top}, 500 * time.Millisecond, time.Minute},
		{"base given", outbox.Backoff{Base: 2 * time.Second, Rand: top}, 2 * time.Second, time.Minute},
		{"cap given", outbox.Backoff{Cap: 5 * time.Second, Rand: top}, 500 * time.Millisecond, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o, db, clock := setupOutbox(t)
			_, _, err := o.Add(ctx, ev("flaky"))
			require.NoError(t, err)
			pub := &recorder{fail: func(int, outbox.Event) (bool, bool) { return false, true }}
			r, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, MaxAttempts: 100, Backoff: c.backoff})
			require.NoError(t, err)
			for attempt := 1; attempt <= 10; attempt++ {
				_, err := r.RunOnce(ctx)
				require.NoError(t, err)
				d := nextAttempt(t, db, "flaky")
				switch attempt {
				case 1:
					require.InDelta(t, c.first, d, float64(time.Millisecond), "after the first failure")
				case 10:
					require.InDelta(t, c.last, d, float64(time.Millisecond), "after the tenth failure")
				}
				clock.Advance(d + time.Millisecond)
			}
			require.Equal(t, 10, pub.calls, "one attempt per pass, each after its delay")
		})
	}
}

// Requeueing a quarantined event wakes a running relay: the event goes out
// without waiting for the next poll.
func TestRelayWokenByRequeue(t *testing.T) {
	t.Parallel()
	o, _, _ := setupOutbox(t)
	_, _, err := o.Add(ctx, ev("poison"))
	require.NoError(t, err)
	var poisoned atomic.Bool
	poisoned.Store(true)
	got := make(chan string, 10)
	pub := outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
		if poisoned.Load() {
			return errors.New("poison")
		}
		got <- e.ID
		return nil
	})
	r, err := outbox.NewRelay(o, &outbox.RelayConfig{PollInterval: time.Hour, MaxAttempts: 1, Publisher: pub})
	require.NoError(t, err)
	passes := make(chan outbox.PassStats, 10)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		done <- r.Run(runCtx, func(st outbox.PassStats, _ error) {
			select {
			case passes <- st:
			default:
			}
		})
	}()
	testwait.Until(t, passes, func(st outbox.PassStats) bool { return st.Quarantined > 0 }, "a pass that quarantines the poisoned event")
	poisoned.Store(false)
	require.NoError(t, o.Requeue(ctx, "poison"))
	// The poll is an hour away: the requeue wakes the relay.
	require.Equal(t, "poison", testwait.Receive(t, got, "the requeued event published before the next poll"))
	cancel()
	require.ErrorIs(t, testwait.Receive(t, done, "the relay's end"), context.Canceled)
}

// Operators hear about failures and quarantines through the relay's
// logger: a failed attempt is a warning, a quarantine an error, each
// naming the event.
func TestRelayLogsFailuresAndQuarantines(t *testing.T) {
	t.Parallel()
	o, _, clock := setupOutbox(t)
	_, _, err := o.Add(ctx, ev("poison"))
	require.NoError(t, err)
	var logged strings.Builder
	pub := &recorder{fail: func(int, outbox.Event) (bool, bool) { return false, true }}
	r, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, MaxAttempts: 2, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	require.NoError(t, err)
	for range 2 {
		st, err := r.RunOnce(ctx)
		require.NoError(t, err)
		clock.Advance(st.Wait + time.Minute)
	}
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	require.Len(t, lines, 2, logged.String())
	require.Regexp(t, `level=WARN msg="outbox publish failed" id=poison .*attempt=1 `, lines[0])
	require.Regexp(t, `level=ERROR msg="outbox event quarantined" id=poison .*attempts=2 `, lines[1])
}

// A relay's settings left zero (or negative, for the counts and the poll)
// take their documented defaults; those set are kept as they are.
func TestRelayConfigDefaults(t *testing.T) {
	t.Parallel()
	o, _, _ := setupOutbox(t)
	pub := &recorder{}
	for _, zero := range []outbox.RelayConfig{{Publisher: pub}, {Publisher: pub, BatchSize: -1, PollInterval: -time.Second, MaxAttempts: -1}} {
		r, err := outbox.NewRelay(o, &zero)
		require.NoError(t, err)
		c := r.Config()
		require.Equal(t, outbox.DefaultRelayBatch, c.BatchSize)
		require.Equal(t, outbox.DefaultRelayPoll, c.PollInterval)
		require.Equal(t, outbox.DefaultRelayMaxAttempts, c.MaxAttempts)
		require.Equal(t, 500*time.Millisecond, c.Backoff.Base)
		require.Equal(t, time.Minute, c.Backoff.Cap)
		require.Equal(t, outbox.DefaultPublishedRetention, c.Retention)
		require.NotNil(t, c.Logger)
	}
	set := outbox.RelayConfig{Publisher: pub, BatchSize: 7, PollInterval: 20 * time.Millisecond, MaxAttempts: 3,
		Backoff: outbox.Backoff{Base: time.Second, Cap: time.Hour}, Retention: 2 * time.Hour}
	r, err := outbox.NewRelay(o, &set)
	require.NoError(t, err)
	c := r.Config()
	require.Equal(t, 7, c.BatchSize)
	require.Equal(t, 20*time.Millisecond, c.PollInterval)
	require.Equal(t, 3, c.MaxAttempts)
	require.Equal(t, outbox.Backoff{Base: time.Second, Cap: time.Hour}, c.Backoff)
	require.Equal(t, 2*time.Hour, c.Retention)
}
