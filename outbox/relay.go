package outbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/seal"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/loop"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
)

// Publisher delivers outbox events to a broker, a webhook, a queue.
type Publisher interface {
	// Publish sends events in order and returns how many of them, from the
	// start, the destination acknowledged. An error describes the failure of
	// events[acked]; the events after it are not attempted. The relay
	// takes a count out of range as the nearest bound; with every event
	// acknowledged, an error is logged and the events are published; fewer
	// than all without an error fails events[acked]. A panic is recovered
	// and logged with its stack: having no count, the relay sends the batch
	// again an event at a time, and the event that panics fails (and is
	// quarantined after MaxAttempts, as any failing event is).
	//
	// ctx is Run's (or RunOnce's): the relay sets no deadline of its own,
	// and waits for Publish to return. Bound each call (a client timeout,
	// as WebhookPublisher's): a Publish that never returns holds the relay,
	// and every event behind it.
	Publish(ctx context.Context, events []Event) (acked int, err error)
}

// PublishFunc adapts a function that publishes one event to a Publisher.
type PublishFunc func(ctx context.Context, ev Event) error

// Publish calls f for each event in order, stopping at the first error. A
// panic in f is that event's error (see Relay).
func (f PublishFunc) Publish(ctx context.Context, events []Event) (int, error) {
	for i, ev := range events {
		if _, err := recovered(func() (int, error) { return 0, f(ctx, ev) }); err != nil {
			if pe, ok := err.(*panicError); ok {
				pe.event = true
			}
			return i, err
		}
	}
	return len(events), nil
}

// panicError is a publisher's panic, recovered, with the stack it was
// raised on.
type panicError struct {
	value any
	stack []byte
	event bool // raised publishing events[acked] (PublishFunc), not somewhere in the batch
}

func (e *panicError) Error() string { return fmt.Sprintf("outbox: publisher panicked: %v", e.value) }

// recovered runs publish, turning a panic into a *panicError.
func recovered(publish func() (int, error)) (acked int, err error) {
	defer func() {
		if p := recover(); p != nil {
			acked, err = 0, &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return publish()
}

// Relay defaults.
const (
	DefaultRelayBatch       = 100
	DefaultRelayPoll        = 5 * time.Second
	DefaultRelayMaxAttempts = 10
)

// RelayConfig configures a Relay.
type RelayConfig struct {
	// Publisher receives the events. Required.
	Publisher Publisher
	// BatchSize bounds the events per Publish call. 0 means DefaultRelayBatch.
	BatchSize int
	// PollInterval is the fallback when no commit wakes the relay. 0 means
	// DefaultRelayPoll.
	PollInterval time.Duration
	// MaxAttempts is how many times an event is tried before it is
	// quarantined. 0 means DefaultRelayMaxAttempts.
	MaxAttempts int
	// Backoff spaces retries of a failing event. Zero fields mean 500ms base
	// and 1m cap.
	Backoff Backoff
	// Logger receives failures, quarantines, and damaged events passed
	// over (when their number changes). nil discards.
	Logger *slog.Logger
	// Retention is how long a published event is kept (for inspection and
	// to dedupe a re-add of its ID) before retention sweeps remove it. 0
	// means DefaultPublishedRetention; negative keeps them forever.
	Retention time.Duration
	// RetentionFor, if set, overrides Retention per topic (for example
	// retention.Policy.Func); 0 falls back to Retention.
	RetentionFor func(topic string) time.Duration
}

// DefaultPublishedRetention is how long published events are kept.
const DefaultPublishedRetention = keyspace.DefaultPublishedEvents

// Relay publishes an outbox's events in sequence (commit) order. It is woken
// by the commit of new events and polls only as a fallback. An event is
// marked published only after the publisher acknowledged it, so a crash or a
// shutdown mid-publish leads to a second publish, never to a lost event:
// consumers dedupe on the event ID. An event that keeps failing is retried
// with backoff (holding back the events after it, to keep the order) and,
// after MaxAttempts, moved to quarantine, where it stays until requeued.
type Relay struct {
	o       *Outbox
	cfg     RelayConfig
	damaged atomic.Int64 // damaged events the last pass met (logged when it changes)

	// lagAt is when the backlog was last reported to the observer (the
	// clock's Unix nanoseconds; 0: never).
	lagAt atomic.Int64
	// blocked, with several writers, is the head of the queue that the
	// last pass found not due, and until when (see RunOnce).
	blocked atomic.Pointer[blockedHead]
}

// blockedHead is a pass's finding that nothing is due before until.
type blockedHead struct {
	until   time.Time
	damaged int
}

// NewRelay returns a relay for o. Run one relay per outbox. RelayConfig's
// Publisher is required, so a nil cfg fails with ErrInvalidConfig.
func NewRelay(o *Outbox, cfg *RelayConfig) (*Relay, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Relay{o: o, cfg: c}, nil
}

func (c *RelayConfig) validate() error {
	switch {
	case c.Publisher == nil:
		return fmt.Errorf("%w: RelayConfig.Publisher is required", ErrInvalidConfig)
	case max(c.Retention, c.PollInterval, c.Backoff.Base, c.Backoff.Cap) > keyspace.MaxRetention:
		return fmt.Errorf("%w: a RelayConfig duration exceeds 100 years; stored times would wrap round", ErrInvalidConfig)
	case c.Backoff.Base < 0 || c.Backoff.Cap < 0:
		// Taken as internal/backoff's own defaults, not the relay's.
		return fmt.Errorf("%w: RelayConfig.Backoff %s..%s is negative", ErrInvalidConfig, c.Backoff.Base, c.Backoff.Cap)
	}
	return nil
}

func (c *RelayConfig) withDefaults() RelayConfig {
	var cfg RelayConfig
	if c != nil {
		cfg = *c
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultRelayBatch
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultRelayPoll
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultRelayMaxAttempts
	}
	if cfg.Backoff.Base == 0 {
		cfg.Backoff.Base = 500 * time.Millisecond
	}
	if cfg.Backoff.Cap == 0 {
		cfg.Backoff.Cap = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultPublishedRetention
	}
	return cfg
}

// Config returns the relay's configuration with defaults applied.
func (r *Relay) Config() RelayConfig { return r.cfg }

// PassStats reports one relay pass.
type PassStats struct {
	Published   int
	Failed      int           // failed attempts this pass: each event quarantined, and the one that stopped it
	Quarantined int           // events quarantined this pass
	Damaged     int           // pending events passed over because they do not decode (kv.ErrCorrupt; the check names them)
	Wait        time.Duration // until the head event may be retried; 0 if none waits
}

// RunOnce publishes the pending events that are due, batch after batch,
// until none is due or one fails. It is what Run does on each wake-up.
//
// With several writers (etcd), finding the head of the queue takes a read
// of the whole queue (see backlog). A pass that found the head waiting out
// its backoff is remembered, and passes before the backoff ends return
// that wait without reading: an event committed meanwhile, a requeued one
// included, comes after the head in commit order, so nothing can be due
// sooner. Run is woken by every commit of the process, and a publisher
// down for an hour would otherwise have the relay read the whole growing
// queue at each.
func (r *Relay) RunOnce(ctx context.Context) (PassStats, error) {
	now := r.o.db.Clock().Now()
	if b := r.blocked.Load(); b != nil && now.Before(b.until) {
		st := PassStats{Wait: b.until.Sub(now), Damaged: b.damaged}
		r.reportLag(ctx, st)
		return st, nil
	}
	st, err := r.runOnce(ctx)
	if !r.o.db.Traits().SingleWriter {
		var b *blockedHead
		if err == nil && st.Wait > 0 {
			b = &blockedHead{until: r.o.db.Clock().Now().Add(st.Wait), damaged: st.Damaged}
		}
		r.blocked.Store(b)
	}
	if n := int64(st.Damaged); r.damaged.Swap(n) != n && n > 0 {
		r.cfg.Logger.Error("outbox events damaged on disk are passed over; oncekv check names them, oncekv drop --kind outbox SEQ removes one", "damaged", n)
	}
	r.reportLag(ctx, st)
	return st, err
}

// reportLag tells the observer, if one listens, how far the relay is
// behind: after a pass that published, failed or quarantined an event,
// and otherwise at most once a PollInterval. Measuring the backlog reads
// the whole queue, and Run is woken by every commit of the process: with
// the publisher down and 100,000 events queued, measuring at every pass
// held a core (15 passes a second, each reading the queue).
func (r *Relay) reportLag(ctx context.Context, st PassStats) {
	o := r.o.db.Observer()
	if o == nil || o.OutboxLag == nil {
		return
	}
	now := r.o.db.Clock().Now().UnixNano()
	last := r.lagAt.Load()
	if st.Published+st.Failed+st.Quarantined == 0 && last != 0 && time.Duration(now-last) < r.cfg.PollInterval {
		return
	}
	if !r.lagAt.CompareAndSwap(last, max(now, 1)) {
		return // a pass running beside this one reports it
	}
	if l, err := r.o.Lag(context.WithoutCancel(ctx)); err == nil {
		o.OutboxLag(observe.OutboxLag{Pending: l.Pending, OldestAge: l.OldestAge, Quarantined: l.Quarantined, Damaged: l.Damaged})
	}
}

// publish hands a batch to the publisher, in a span and reported to the
// observer when one listens.
func (r *Relay) publish(ctx context.Context, batch []Event) (int, error) {
	o := r.o.db.Observer()
	if o == nil {
		return recovered(func() (int, error) { return r.cfg.Publisher.Publish(ctx, batch) })
	}
	start := time.Now()
	sctx, end := o.Start(ctx, "oncekv.outbox.publish", observe.Attr{Key: "oncekv.outbox.batch", Value: strconv.Itoa(len(batch))})
	acked, err := recovered(func() (int, error) { return r.cfg.Publisher.Publish(sctx, batch) })
	end(err)
	if o.Publish != nil {
		d := time.Since(start)
		for _, ev := range batch[:min(max(acked, 0), len(batch))] {
			o.Publish(ctx, observe.Publish{Topic: ev.Topic, Duration: d})
		}
	}
	return acked, err
}

// reportFailure tells the observer that ev failed to publish.
func (r *Relay) reportFailure(ctx context.Context, ev Event, quarantined bool) {
	if o := r.o.db.Observer(); o != nil && o.Publish != nil {
		o.Publish(ctx, observe.Publish{Topic: ev.Topic, Err: true, Quarantined: quarantined})
	}
}

func (r *Relay) runOnce(ctx context.Context) (PassStats, error) {
	var st PassStats
	size := r.cfg.BatchSize
	q := backlog{r: r, whole: !r.o.db.Traits().SingleWriter}
	for ctx.Err() == nil {
		batch, wait, damaged, err := q.next(size)
		st.Damaged = damaged
		if err != nil {
			return st, err
		}
		if len(batch) == 0 {
			st.Wait = wait
			return st, nil
		}
		failpoint.Inject(failpoint.RelayBeforePublish)
		acked, perr := r.publish(ctx, batch)
		failpoint.Inject(failpoint.RelayAfterPublish) // published, not yet marked
		acked = min(max(acked, 0), len(batch))
		// Record acknowledgements even if ctx ended: they happened.
		mctx := context.WithoutCancel(ctx)
		if err := r.markPublished(mctx, batch[:acked]); err != nil {
			return st, err
		}
		q.done(acked)
		if acked > 0 {
			failpoint.Inject(failpoint.RelayAfterMark)
		}
		st.Published += acked
		if acked == len(batch) {
			if perr != nil {
				// Every event was acknowledged: the error is about none of
				// them (a connection closed after the last answer). Indexing
				// the event it "describes" once panicked the relay.
				r.cfg.Logger.Warn("outbox publisher returned an error after acknowledging every event", "events", acked, "error", perr)
			}
			continue
		}
		if perr == nil {
			perr = errors.New("publisher acknowledged part of the batch without an error")
		}
		if pe, ok := errors.AsType[*panicError](perr); ok {
			// Not the process's end: an event that makes the publisher panic
			// would do it again after every restart. A panic leaves no count
			// of acknowledgements: a batch is sent again an event at a time
			// (at least once, as ever) to find the event, which fails this
			// attempt and is quarantined after MaxAttempts like any other.
			if !pe.event && len(batch) > 1 {
				r.cfg.Logger.Warn("outbox publisher panicked with a batch; its events go one at a time this pass", "events", len(batch), "panic", fmt.Sprint(pe.value))
				size = 1
				continue
			}
			r.cfg.Logger.Error("outbox publisher panicked; the event fails this attempt", "id", batch[acked].ID, "topic", batch[acked].Topic,
				"panic", fmt.Sprint(pe.value), "stack", string(pe.stack))
		}
		if ctx.Err() != nil {
			return st, ctx.Err() // shutting down: not the event's fault
		}
		quarantined, retryAt, err := r.fail(mctx, batch[acked], perr)
		if err != nil {
			return st, err
		}
		r.reportFailure(ctx, batch[acked], quarantined)
		st.Failed++
		if quarantined {
			st.Quarantined++
			q.done(1)
			continue
		}
		// The failed event heads the queue until its backoff ends: the
		// pass's wait, known without reading the queue again (the whole
		// queue, with several writers).
		st.Wait = max(retryAt.Sub(r.o.db.Clock().Now()), 0)
		return st, nil
	}
	return st, ctx.Err()
}

// backlog hands a pass its batches. On a single-writer store (bbolt) each
// batch is read afresh from the head of the queue, which sequence order
// keeps in commit order: a read of the batch alone. With several writers
// (etcd) commit order is the order of the revisions at which the events
// were committed, which only a read of the whole queue yields: the queue
// is read once and the pass takes its batches from that reading, in
// order, reading again when it has used it up. Reading it for every batch
// made draining a backlog quadratic (16,000 events took 18 s on one etcd
// member, 4,000 took 1.5 s). An event committed after the reading has a
// later revision than every event in it, so it comes after them, as it
// would in a fresh reading; the relay is the only writer of the events it
// publishes, so the reading stays true of them. A reading keeps the head
// of the queue, maxReading events at most: the rest, later in commit
// order, wait for the next reading, and the relay's memory stays bounded
// however large a backlog an outage left (it held every pending event).
type backlog struct {
	r       *Relay
	whole   bool    // read the whole queue, in revision order
	read    []Event // whole: the reading, from the next event on
	damaged int     // whole: damaged events the reading passed over
}

// next returns the next batch, if the head of the queue is due; else the
// wait until it is.
func (q *backlog) next(size int) (batch []Event, wait time.Duration, damaged int, err error) {
	if !q.whole {
		return q.r.due(size)
	}
	if len(q.read) == 0 {
		if q.read, q.damaged, err = q.r.queue(); err != nil {
			return nil, 0, q.damaged, err
		}
	}
	if len(q.read) == 0 {
		return nil, 0, q.damaged, nil
	}
	if now := q.r.o.db.Clock().Now(); q.read[0].NextAttempt.After(now) {
		return nil, q.read[0].NextAttempt.Sub(now), q.damaged, nil
	}
	return q.read[:min(size, len(q.read))], 0, q.damaged, nil
}

// done drops the first n events of the reading: published, or failed for
// good.
func (q *backlog) done(n int) {
	if q.whole {
		q.read = q.read[min(n, len(q.read)):]
	}
}

// maxReading bounds the events a reading of the whole queue keeps (see
// backlog): the head of the queue, in commit order. A reading of a
// backlog larger than that keeps the first maxReading events, and the
// pass reads the queue again when it has published them.
var maxReading = 20_000

// queue reads the whole pending queue and returns its head in commit
// order: the first maxReading events (see backlog). The reading keeps at
// most twice that many, sorting and cutting back to maxReading each time
// it reaches it.
func (r *Relay) queue() (queue []Event, damaged int, err error) {
	err = r.o.db.View(context.Background(), func(tx kv.Tx) error {
		queue, damaged = nil, 0 // a read run again (etcd) starts afresh
		b := outboxNS.Bucket(tx)
		if b == nil {
			return nil
		}
		limit := max(maxReading, 1)
		var head []queued
		ring := kv.CipherOf(tx)
		c := b.Cursor()
		rc, _ := c.(revisioned)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			ev, err := decodeEventWith(ring, k, v, true)
			switch {
			case errors.Is(err, kv.ErrCorrupt):
				damaged++ // passed over, as due does
				continue
			case err != nil:
				return err
			}
			var rev int64
			if rc != nil {
				rev = rc.Revision()
			}
			head = append(head, queued{rev: rev, ev: ev})
			if len(head) == 2*limit {
				head = firstInOrder(head, limit)
			}
		}
		head = firstInOrder(head, limit)
		queue = make([]Event, len(head))
		for i, e := range head {
			queue[i] = *e.ev
		}
		return nil
	})
	return queue, damaged, err
}

// queued is an event of a reading of the whole queue, with the revision
// of the commit that created it.
type queued struct {
	rev int64
	ev  *Event
}

// firstInOrder returns the first n of head in commit order: by revision,
// the events of one commit in the order the reading met them (key order,
// the order they were added in), which a stable sort keeps.
func firstInOrder(head []queued, n int) []queued {
	slices.SortStableFunc(head, func(a, b queued) int { return cmp.Compare(a.rev, b.rev) })
	if len(head) > n {
		clear(head[n:]) // the events cut drop out of memory
		head = head[:n]
	}
	return head
}

// due returns the next batch of pending events if the head is due, else the
// wait until it is: a single-writer store's, where the head is the first
// event in sequence order (see backlog).
func (r *Relay) due(size int) (batch []Event, wait time.Duration, damaged int, err error) {
	err = r.o.db.View(context.Background(), func(tx kv.Tx) error {
		batch, wait, damaged = batch[:0], 0, 0 // a read run again (etcd) starts afresh
		now := r.o.db.Clock().Now()
		for ev, err := range events(tx, EventPending, true, kv.CipherOf(tx)) {
			switch {
			case errors.Is(err, kv.ErrCorrupt):
				// It cannot be published, and waiting changes nothing:
				// passed over as a quarantined event is, so that one
				// damaged event does not hold back the queue behind it.
				damaged++
				continue
			case err != nil:
				return err
			}
			if len(batch) == 0 && ev.NextAttempt.After(now) {
				wait = ev.NextAttempt.Sub(now)
				return nil
			}
			batch = append(batch, *ev)
			if len(batch) >= size {
				return nil
			}
		}
		return nil
	})
	return batch, wait, damaged, err
}

// markPublished moves acknowledged events to the published bucket, in
// order, in as few transactions as the store allows: one on bbolt; on a
// store that bounds the writes of a transaction (kv.Traits.MaxTxOps, etcd:
// 128), a quarter of that bound a transaction, each event taking three
// writes (the published event, the pending one's delete, its expiry
// entry). A crash between two of them leaves the later events pending, to
// be published again: at least once, as ever.
func (r *Relay) markPublished(ctx context.Context, events []Event) error {
	per := r.o.db.Traits().Fit(len(events), 4) // three writes an event, with room
	for len(events) > 0 {
		n := min(per, len(events))
		if err := r.markChunk(ctx, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

// markChunk is one transaction of markPublished.
func (r *Relay) markChunk(ctx context.Context, events []Event) error {
	return r.o.db.Batch(ctx, func(tx kv.Tx) error {
		pending, err := outboxNS.Create(tx)
		if err != nil {
			return err
		}
		pub, err := publishedNS.Create(tx)
		if err != nil {
			return err
		}
		now := r.o.db.Clock().Now()
		for _, ev := range events {
			k := seqKey(ev.Seq)
			if pending.Get(k) == nil {
				continue // already moved (requeued and published elsewhere)
			}
			ret := r.cfg.Retention
			if r.cfg.RetentionFor != nil {
				if d := r.cfg.RetentionFor(ev.Topic); d != 0 {
					ret = d
				}
			}
			ev.State, ev.PublishedAt, ev.Attempts = EventPublished, now, ev.Attempts+1
			ev.ExpiresAt = keyspace.ExpiryAt(now, ret)
			var e record.Encoder
			if err := pub.Put(k, encodeEvent(&e, r.o.db.Cipher(), &ev)); err != nil {
				return err
			}
			if err := pending.Delete(k); err != nil {
				return err
			}
			if err := publishedExpiry.Put(tx, ev.ExpiresAt, k); err != nil {
				return err
			}
		}
		return nil
	})
}

// fail records a failed attempt of ev; after MaxAttempts the event moves to
// quarantine. It reports whether it was quarantined, and if not when it
// may be tried again.
func (r *Relay) fail(ctx context.Context, failed Event, cause error) (quarantined bool, retryAt time.Time, err error) {
	var ev Event
	err = r.o.db.Batch(ctx, func(tx kv.Tx) error {
		// From the event as it failed at each run: a run again (a group
		// commit's, etcd's after a conflict) counts the attempt once.
		quarantined, ev = false, failed
		pending, err := outboxNS.Create(tx)
		if err != nil {
			return err
		}
		k := seqKey(ev.Seq)
		if pending.Get(k) == nil {
			return nil
		}
		ev.Attempts++
		ev.LastError = cause.Error()
		var e record.Encoder
		if ev.Attempts >= r.cfg.MaxAttempts {
			q, err := quarantineNS.Create(tx)
			if err != nil {
				return err
			}
			ev.State, ev.NextAttempt = EventQuarantined, time.Time{}
			if err := q.Put(k, encodeEvent(&e, r.o.db.Cipher(), &ev)); err != nil {
				return err
			}
			quarantined = true
			return pending.Delete(k)
		}
		ev.NextAttempt = r.o.db.Clock().Now().Add(r.cfg.Backoff.Delay(ev.Attempts))
		return pending.Put(k, encodeEvent(&e, r.o.db.Cipher(), &ev))
	})
	if err == nil {
		if quarantined {
			r.cfg.Logger.Error("outbox event quarantined", "id", ev.ID, "seq", ev.Seq, "attempts", ev.Attempts, "error", cause)
		} else {
			r.cfg.Logger.Warn("outbox publish failed", "id", ev.ID, "seq", ev.Seq, "attempt", ev.Attempts, "error", cause)
		}
	}
	return quarantined, ev.NextAttempt, err
}

// Run publishes until ctx ends, sleeping between passes until a commit adds
// events, the head event's backoff ends, or PollInterval passes. It returns
// ctx.Err() after the pass in progress has recorded what it published, or,
// as soon as the database refuses calls (kv.DB.Done), the refusal from a
// pass made then: kv.ErrClosed once it is closed, an error matching
// kv.ErrSyncFailed once a commit's sync (the pass's own, or any other
// writer's) failed after its meta page was written. onPass, if set,
// receives each pass's stats (for metrics). A pass that panics
// outside the publisher (whose panics fail their event) is logged with
// its stack, is that pass's error, and the next pass comes PollInterval
// later: the process, which would meet the same events after a restart,
// goes on.
func (r *Relay) Run(ctx context.Context, onPass func(PassStats, error)) error {
	return loop.Run(ctx, r.o.shared.wake, func(ctx context.Context) (PassStats, time.Duration, error) {
		st, err := r.RunOnce(ctx)
		wait := r.cfg.PollInterval
		if st.Wait > 0 {
			wait = min(wait, st.Wait)
		}
		return st, wait, err
	}, onPass, loop.Config{Name: "outbox relay", Final: []error{kv.ErrClosed, kv.ErrSyncFailed, kv.ErrReadFailed}, AfterPanic: r.cfg.PollInterval, Logger: r.cfg.Logger, Refusing: r.o.db.Done()})
}

// Requeue moves a quarantined event back to the pending queue, with a
// fresh attempt budget: on bbolt at its original place in sequence order;
// on a store with several writers (etcd), where the relay orders events
// by the commit that queued them, at the back of the queue.
func (o *Outbox) Requeue(ctx context.Context, eventID string) error {
	return o.db.Update(ctx, func(tx kv.Tx) error { return o.RequeueTx(tx, eventID) })
}

// RequeueTx is Requeue inside the caller's writable transaction; the relay
// is woken when it commits.
func (o *Outbox) RequeueTx(tx kv.Tx, eventID string) error {
	s, ev, in, err := indexed(tx, outboxIDsNS.Bucket(tx), eventID)
	if err != nil {
		return err
	}
	if s == nil || in != EventQuarantined {
		return fmt.Errorf("%w (event %q)", ErrNotQuarantined, eventID)
	}
	pending, err := outboxNS.Create(tx)
	if err != nil {
		return err
	}
	if err := o.unquarantine(pending, quarantineNS.Bucket(tx), bytes.Clone(s), ev); err != nil {
		return err
	}
	tx.OnCommit(o.notify)
	return nil
}

// unquarantine moves ev, at key k of the quarantine bucket q, back to the
// pending queue with a fresh attempt budget.
func (o *Outbox) unquarantine(pending, q kv.Bucket, k []byte, ev *Event) error {
	ev.State, ev.Attempts, ev.NextAttempt = EventPending, 0, time.Time{}
	var e record.Encoder
	if err := pending.Put(k, encodeEvent(&e, o.db.Cipher(), ev)); err != nil {
		return err
	}
	return q.Delete(k)
}

// requeueAllBatch is how many quarantined events RequeueAll moves a
// transaction (a quarter of kv.Traits.MaxTxOps, if less).
const requeueAllBatch = 100

// RequeueAll moves every quarantined event back to the pending queue, as
// Requeue moves one, and returns how many it moved: what an operator does
// after a broker's outage quarantined the events that kept failing through
// it. It moves them in transactions of at most 100 (a quarter of the bound
// on a store that bounds a transaction's writes, etcd), so it never holds
// the writer for long, and wakes the relay after each. A quarantined
// event that does not decode stays where it is (DropDamaged removes it;
// the check names it). Should it fail part way, the events it moved stay
// pending, and running it again moves the rest; events quarantined while
// it runs may be moved too.
func (o *Outbox) RequeueAll(ctx context.Context) (int, error) {
	per := o.db.Traits().Fit(requeueAllBatch, 4) // two writes an event, with room
	moved := 0
	var after []byte
	for {
		if err := ctx.Err(); err != nil {
			return moved, err
		}
		var n int
		var next []byte
		err := o.db.Update(ctx, func(tx kv.Tx) error {
			var err error
			n, next, err = o.requeueSome(tx, after, per)
			return err
		})
		if err != nil {
			return moved, err
		}
		moved += n
		if next == nil {
			return moved, nil
		}
		after = next
	}
}

// requeueSome moves up to limit quarantined events after the key after
// (nil: from the first) back to the queue, in tx. next is the last key it
// looked at, nil when none is left.
func (o *Outbox) requeueSome(tx kv.Tx, after []byte, limit int) (moved int, next []byte, err error) {
	q := quarantineNS.Bucket(tx)
	if q == nil {
		return 0, nil, nil
	}
	c := q.Cursor()
	k, v := c.First()
	if after != nil {
		if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	}
	type move struct {
		k  []byte
		ev *Event
	}
	var moves []move
	for seen := 0; k != nil && seen < limit; k, v = c.Next() {
		seen++
		next = bytes.Clone(k)
		ev, err := decodeEvent(k, v)
		if err != nil {
			continue // damaged: left for DropDamaged
		}
		moves = append(moves, move{next, ev})
	}
	if k == nil {
		next = nil
	}
	if len(moves) == 0 {
		return 0, next, nil
	}
	pending, err := outboxNS.Create(tx)
	if err != nil {
		return 0, nil, err
	}
	// After the walk: never delete under a live cursor.
	for _, m := range moves {
		if err := o.unquarantine(pending, q, m.k, m.ev); err != nil {
			return 0, nil, err
		}
	}
	tx.OnCommit(o.notify)
	return len(moves), next, nil
}

var publishedExpiry = keyspace.NewTimeIndex("outbox.published.expiry")

// RecordKind is the kind of the published outbox events: pass it to
// retention.Sweep to remove published rows past their retention (pending
// and quarantined events have no expiry and are never swept), and to
// kv.DB.Check to verify the whole outbox (every event decodes and sits in
// the bucket of its state, IDs and sequences map to each other).
var RecordKind kv.RecordKind = &keyspace.Kind[*Event]{
	KindName:  "outbox.published",
	Records:   publishedNS,
	Expiry:    publishedExpiry,
	Decode:    func(k, v []byte, _ bool) (*Event, error) { return decodeEvent(k, v) },
	ExpiresAt: func(ev *Event) time.Time { return ev.ExpiresAt },
	Absent: func(tx kv.Tx, k []byte) string {
		if b := outboxNS.Bucket(tx); b != nil && b.Get(k) != nil {
			return "unpublished"
		}
		return ""
	},
	Remove: func(tx kv.Tx, pub kv.Bucket, _ []byte, ev *Event) error {
		return deletePublished(tx, pub, outboxIDsNS.Bucket(tx), ev)
	},
	CheckMore: checkOutbox,
}

// checkOutbox: every event decodes and sits in the bucket of its state, every
// event's ID maps to its sequence and every ID maps to an event.
func checkOutbox(tx kv.Tx, report func(string)) {
	seqs := map[uint64]string{}
	ring := kv.CipherOf(tx)
	for _, st := range []EventState{EventPending, EventPublished, EventQuarantined} {
		// Decoded without opening: a payload that does not open is
		// reported, and the event still counts for the structure.
		for ev, err := range events(tx, st, false, nil) {
			if err != nil {
				report(err.Error())
				continue
			}
			if ev.blob != nil && ring != nil {
				if _, err := ring.Open(nil, ev.blob, eventAAD(ev.ID, ev.Seq)); err != nil {
					report(fmt.Sprintf("outbox event %d (%s): sealed payload does not open: %v", ev.Seq, ev.ID, err))
				}
			}
			if ev.State != st {
				report(fmt.Sprintf("outbox event %d (%s) is %s in the %s bucket", ev.Seq, ev.ID, ev.State, st))
			}
			if other, dup := seqs[ev.Seq]; dup {
				report(fmt.Sprintf("outbox sequence %d is in two buckets (%s, %s)", ev.Seq, other, ev.ID))
			}
			seqs[ev.Seq] = ev.ID
		}
	}
	if ids := outboxIDsNS.Bucket(tx); ids != nil {
		c := ids.Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n++
			if len(v) != 8 {
				report(fmt.Sprintf("outbox ID %q maps to a %d-byte sequence", k, len(v)))
				continue
			}
			seq := binary.BigEndian.Uint64(v)
			if id, ok := seqs[seq]; !ok || id != string(k) {
				report(fmt.Sprintf("outbox ID %q maps to sequence %d, which holds %q", k, seq, id))
			}
		}
		if n != len(seqs) {
			report(fmt.Sprintf("outbox holds %d events but %d IDs", len(seqs), n))
		}
	} else if len(seqs) > 0 {
		report("outbox events without an ID index")
	}
}

// Reseal is the outbox's part of a rekey (inspect.Rekey): in tx, it visits
// up to limit events (pending, published, then quarantined) after the
// cursor after (nil: from the start) and rewrites those whose payload is
// not sealed under ring's current key (payloads in clear included). Its
// cursor is the bucket's index and the last sequence visited; nil when
// done.
func Reseal(tx kv.Tx, ring *seal.Ring, after []byte, limit int) (next []byte, resealed int, err error) {
	buckets := []keyspace.Namespace{outboxNS, publishedNS, quarantineNS}
	i, inner := 0, []byte(nil)
	if len(after) > 0 && int(after[0]) < len(buckets) {
		i, inner = int(after[0]), after[1:]
	}
	next, n, err := sealing.Rewrite(buckets[i].Bucket(tx), inner, limit, func(k, v []byte) ([]byte, error) {
		ev, err := decodeEventWith(ring, k, v, true)
		if err != nil {
			return nil, err
		}
		if ev.Sealed && ev.KeyID == ring.Current() {
			return nil, nil
		}
		ev.blob = nil // seal again, under the current key
		var e record.Encoder
		return encodeEvent(&e, ring, ev), nil
	})
	switch {
	case err != nil:
		return nil, 0, err
	case next != nil:
		return append([]byte{byte(i)}, next...), n, nil
	case i+1 < len(buckets):
		return []byte{byte(i + 1)}, n, nil
	}
	return nil, n, nil
}
