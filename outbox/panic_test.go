package outbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
)

// batchOf publishes a batch an event at a time through publish, as a
// broker client that sends a batch would, panicking where publish does.
type batchOf func(context.Context, outbox.Event) error

func (b batchOf) Publish(ctx context.Context, events []outbox.Event) (int, error) {
	for i, e := range events {
		if err := b(ctx, e); err != nil {
			return i, err
		}
	}
	return len(events), nil
}

// An event that makes the publisher panic (a poison event) fails its
// attempt as an error would, logged with the stack, and is quarantined
// after MaxAttempts: it neither ends the process, which would meet it
// again after every restart, nor holds back the events behind it for
// longer than that. Through a PublishFunc the panic fails the event being
// published. A Publisher that panics with a batch leaves no count of what
// it acknowledged: the batch is sent again an event at a time (at least
// once, as ever), so the poison event fails, not the first of the batch.
func TestPublisherPanicFailsThePoisonEvent(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		o, db, clock := setupOutbox(t)
		for _, id := range []string{"a", "poison", "c"} {
			_, _, err := o.Add(ctx, ev(id))
			require.NoError(t, err)
		}
		var mu sync.Mutex
		var published []string
		publish := func(_ context.Context, e outbox.Event) error {
			if e.ID == "poison" {
				panic("publisher: nil header map") // the publisher's bug
			}
			mu.Lock()
			published = append(published, e.ID)
			mu.Unlock()
			return nil
		}
		var pub outbox.Publisher = outbox.PublishFunc(publish)
		if batch {
			pub = batchOf(publish)
		}
		logger, logs := testlog.New()
		relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, MaxAttempts: 2,
			Backoff: outbox.Backoff{Base: time.Minute, Cap: time.Minute}, Logger: logger})
		require.NoError(t, err)

		st, err := relay.RunOnce(ctx)
		require.NoError(t, err)
		require.Positive(t, st.Wait, "the poison event backs off")
		st.Wait = 0
		require.Equal(t, outbox.PassStats{Published: 1, Failed: 1}, st, "batch=%v", batch)
		require.Contains(t, logs.String(), `level=ERROR msg="outbox publisher panicked; the event fails this attempt" id=poison topic=order.paid panic="publisher: nil header map"`)
		require.Contains(t, logs.String(), "TestPublisherPanicFailsThePoisonEvent", "the stack names the publisher")
		want := []string{"a"}
		oneAtATime := `level=WARN msg="outbox publisher panicked with a batch; its events go one at a time this pass" events=3`
		if batch {
			want = []string{"a", "a"} // the batch, then "a" alone
			require.Contains(t, logs.String(), oneAtATime)
		} else {
			require.NotContains(t, logs.String(), "one at a time", "a PublishFunc knows which event panicked")
		}
		require.Equal(t, want, published)
		require.ElementsMatch(t, []string{"poison", "c"}, pending(t, db), "in sequence order on bbolt, by random numbers on etcd")

		clock.Advance(2 * time.Minute)
		st, err = relay.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.PassStats{Published: 1, Failed: 1, Quarantined: 1}, st, "the second failure puts it aside")
		require.Equal(t, append(want, "c"), published, "the event behind it went out")
		require.Empty(t, pending(t, db))
	}
}

// A panic in a relay pass outside the publisher (here the observer's
// Publish report, after the broker took the event) costs that pass, not
// the process: Run logs it with its stack, hands onPass its error, and
// its next pass, PollInterval later, publishes again (at least once, as
// ever) and goes on.
func TestRelayRunGoesOnPastAPanic(t *testing.T) {
	t.Parallel()
	var reports atomic.Int32
	db := kvtest.Open(t, &kv.Options{NoSync: true, Observer: &observe.Observer{Publish: func(context.Context, observe.Publish) {
		if reports.Add(1) == 1 {
			panic("observer bug")
		}
	}}}, outbox.RecordKind)
	o := outbox.New(db)
	_, _, err := o.Add(ctx, ev("a"))
	require.NoError(t, err)
	var mu sync.Mutex
	var published []string
	logger, logs := testlog.New()
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Logger: logger, PollInterval: 10 * time.Millisecond,
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			mu.Lock()
			defer mu.Unlock()
			published = append(published, e.ID)
			return nil
		})})
	require.NoError(t, err)

	runCtx, cancel := context.WithCancel(ctx)
	passes := make(chan error, 1000)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx, func(_ outbox.PassStats, err error) { passes <- err }) }()
	require.ErrorContains(t, testwait.Receive(t, passes, "the pass that panicked"), "a pass of the outbox relay panicked: observer bug")
	require.NoError(t, testwait.Receive(t, passes, "the pass after it"), "the next pass")
	cancel()
	require.ErrorIs(t, testwait.Receive(t, done, "the relay's end"), context.Canceled)

	require.Empty(t, pending(t, db))
	mu.Lock()
	require.Equal(t, []string{"a", "a"}, published, "published, the pass panicked before it was marked, published again")
	mu.Unlock()
	require.Contains(t, logs.String(), `level=ERROR msg="outbox relay pass panicked" panic="observer bug"`)
	require.Contains(t, logs.String(), "TestRelayRunGoesOnPastAPanic", "the stack names the observer")
}
