package sideeffect_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// refundsToo returns an Executor over x's database with x's handler for
// "refund" intents too: it creates and runs intents x has no handler for.
func refundsToo(t *testing.T, x *sideeffect.Executor) *sideeffect.Executor {
	t.Helper()
	cfg := x.Config()
	cfg.Handlers = map[string]sideeffect.Handler{"charge": cfg.Handlers["charge"], "refund": cfg.Handlers["charge"]}
	both, err := sideeffect.New(x.DB(), &cfg)
	require.NoError(t, err)
	return both
}

// An intent the reconciler cannot attempt (here, of a kind it has no
// handler for: a deploy that dropped one) stays due. Each pass used to
// pick it again at once: the loop ran some 15,000 passes in 300 ms, each
// taking the database's writer. It is now logged and left alone for
// PollInterval, while the other intents go on; a reconciler that has the
// handler runs it.
func TestIntentThatCannotBeAttemptedIsLeftAlone(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	x, b := setup(t, fake) // handlers: charge only
	both := refundsToo(t, x)
	refund := spec("1")
	refund.Kind, refund.Purpose = "refund", "refund"
	orphan, _, err := both.Create(ctx, refund)
	require.NoError(t, err)
	b.clock.Advance(time.Minute) // past its grace

	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: 1, Errors: 1}, st)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Held: 1}, st, "held: not picked again at once")

	// The others go on meanwhile.
	charge, _, err := x.Create(ctx, spec("2"))
	require.NoError(t, err)
	b.clock.Advance(15 * time.Second) // past its grace (10 s), within the hold (30 s)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Examined, "the intent with a handler, not the held one")
	require.Equal(t, 1, st.Held)
	require.Equal(t, 1, st.Succeeded)
	in, err := x.Get(ctx, charge.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, in.State)

	// The loop waits for the hold's end, not for the held intent's due
	// time, which has passed: a pass, another for the wake-up the last
	// Create left, then the wait (PollInterval on the test's clock, which
	// does not move).
	rctx, cancel := context.WithCancel(ctx)
	var passes atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- x.Run(rctx, func(sideeffect.RunStats, error) {
			if passes.Add(1) == 1 {
				time.AfterFunc(100*time.Millisecond, cancel)
			}
		})
	}()
	require.ErrorIs(t, testwait.Receive(t, done, "the reconciler's end"), context.Canceled)
	require.LessOrEqual(t, passes.Load(), int32(2), "the loop ran again at once")

	// After the hold, it is tried again; a reconciler with the handler
	// runs it.
	b.clock.Advance(x.Config().PollInterval)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: 1, Errors: 1}, st)
	st, err = both.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Succeeded)
	in, err = both.Get(ctx, orphan.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, in.State)
	require.Len(t, fake.Charges(), 2, "one charge each")
}

// Held intents do not starve the others: a pass looks past them in the
// due index, however many there are (more than one pass picks up).
func TestHeldIntentsDoNotStarveTheOthers(t *testing.T) {
	t.Parallel()
	x, b := setup(t, providertest.New(providertest.Rates{}, 1)) // handlers: charge only
	both := refundsToo(t, x)
	const orphans = 1000 // a pass's worth
	for i := range orphans {
		s := spec("r" + strconv.Itoa(i))
		s.Kind, s.Purpose = "refund", "refund"
		_, _, err := both.Create(ctx, s)
		require.NoError(t, err)
	}
	b.clock.Advance(time.Second)
	charge, _, err := x.Create(ctx, spec("c")) // due after every orphan
	require.NoError(t, err)
	b.clock.Advance(15 * time.Second)

	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: orphans, Errors: orphans}, st, "a full pass of orphans")
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: 1, Succeeded: 1, Held: orphans}, st, "the charge, behind a full pass of held intents")
	in, err := x.Get(ctx, charge.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, in.State)
}

// A takeover refused for an unknown kind writes nothing, so it does not
// fail the group commit it shares: the batch's other calls run once, not
// again after a rolled-back run.
func TestUnknownKindDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, MaxBatchDelay: 200 * time.Millisecond}, sideeffect.RecordKind)
	kvtest.RequireGroupCommit(t, db)
	c := &completions{}
	x, err := sideeffect.New(db, ptr(config(providertest.New(providertest.Rates{}, 1), c)))
	require.NoError(t, err)
	refund := spec("1")
	refund.Kind, refund.Purpose = "refund", "refund"
	orphan, _, err := refundsToo(t, x).Create(ctx, refund)
	require.NoError(t, err)
	clock.Advance(time.Minute)

	var runs atomic.Int32
	other := make(chan error, 1)
	go func() {
		other <- db.Batch(ctx, func(tx kv.Tx) error {
			if kvtest.Counts() {
				runs.Add(1)
			}
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte("o"), []byte("v"))
		})
	}()
	// The first call leads the batch and waits MaxBatchDelay for more:
	// the takeover joins it.
	require.Eventually(t, func() bool { return db.Writer().Queued > 0 }, 5*time.Second, time.Millisecond)
	_, err = x.Execute(ctx, orphan.ID)
	require.ErrorIs(t, err, sideeffect.ErrUnknownKind)
	require.NoError(t, testwait.Receive(t, other, "the other call's answer"))
	require.EqualValues(t, 1, runs.Load(), "the other call ran again")
}

// Intents that fail a pass the same way are logged in one line, with
// their number and the first one's ID: a deploy that dropped a handler
// strands every intent of its kind, and a line for each at every
// PollInterval buried the rest of the log. A lone failure keeps its own
// line, its ID in it.
func TestLikeFailuresAreLoggedOnce(t *testing.T) {
	t.Parallel()
	x, b := setup(t, providertest.New(providertest.Rates{}, 1)) // handlers: charge only
	both := refundsToo(t, x)
	const orphans = 50
	for i := range orphans {
		s := spec("r" + strconv.Itoa(i))
		s.Kind, s.Purpose = "refund", "refund"
		_, _, err := both.Create(ctx, s)
		require.NoError(t, err)
	}
	logger, logs := testlog.New()
	cfg := x.Config()
	cfg.Logger = logger
	quiet, err := sideeffect.New(x.DB(), &cfg)
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	st, err := quiet.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, orphans, st.Errors)
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, `msg="reconcile intents" intents=50 first_id=`), out)
	require.Contains(t, out, `no handler for intent kind: \"refund\" (intent ID)`)
	require.Equal(t, 1, strings.Count(out, "\n"), "one line for the fifty: %s", out)

	s := spec("r-last")
	s.Kind, s.Purpose = "refund", "refund"
	lone, _, err := both.Create(ctx, s)
	require.NoError(t, err)
	b.clock.Advance(time.Second) // within the others' hold, past its grace
	b.clock.Advance(15 * time.Second)
	_, err = quiet.RunOnce(ctx)
	require.NoError(t, err)
	require.Contains(t, logs.String(), `msg="reconcile intent" id=`+lone.ID)
}

// On a backend that runs a read again after a failed attempt (etcd), a
// pass examines each due intent once: it gathered the due intents into
// what the first run had found, and set each to two of its workers.
func TestARetriedReadExaminesEachIntentOnce(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "wraps a bbolt file")
	clock := kvtest.NewManualClock(t0)
	file := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock})
	db, err := kv.New(kvtest.RetriedViews(file), &kv.Options{Clock: clock})
	require.NoError(t, err)
	fake := providertest.New(providertest.Rates{}, 1)
	x, err := sideeffect.New(db, ptr(config(fake, &completions{})))
	require.NoError(t, err)
	const n = 5
	for i := range n {
		_, _, err := x.Create(ctx, spec(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	clock.Advance(time.Minute) // past their grace
	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Examined)
	require.Equal(t, n, st.Succeeded)
	require.Len(t, fake.Log(), 2*n, "a status query and a charge each")
}
