package outbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"

	"github.com/oncekv/oncekv/internal/backoff"
	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/internal/txn"
)

// EventState is where an outbox event stands.
type EventState byte

// Event states.
const (
	// EventPending: committed, not yet acknowledged by the publisher.
	EventPending EventState = 1
	// EventPublished: acknowledged; kept until retention removes it.
	EventPublished EventState = 2
	// EventQuarantined: gave up after too many attempts; kept until an
	// operator requeues or deletes it.
	EventQuarantined EventState = 3
)

func (s EventState) String() string {
	switch s {
	case EventPending:
		return "pending"
	case EventPublished:
		return "published"
	case EventQuarantined:
		return "quarantined"
	}
	return fmt.Sprintf("event_state(%d)", byte(s))
}

// Event is a message written in the same transaction as the business change
// it announces, and published later by the relay.
type Event struct {
	// ID is unique per event and stable across retries (derive it from the
	// business change: "order.paid/ord_1042"); consumers dedupe on it.
	ID      string
	Topic   string
	Key     string // partition or routing key; may be empty
	Headers map[string]string
	Payload []byte

	// Set by the outbox.
	Seq         uint64 // commit order
	State       EventState
	CreatedAt   time.Time
	Attempts    int
	NextAttempt time.Time
	LastError   string
	PublishedAt time.Time
	// ExpiresAt is when a published event is forgotten (retention); zero
	// while pending or quarantined.
	ExpiresAt time.Time
	// Sealed reports whether the payload is stored encrypted
	// (kv.Options.Cipher), and KeyID under which key. Read without that
	// key, Payload is nil and Sealed is set.
	Sealed bool
	KeyID  uint32

	blob   []byte // the sealed payload as stored: moves between states keep it
	closed bool   // read without its key: Payload is empty, not stored so
}

// Closed reports whether the event was read without the key its payload
// is sealed under (Payload is then nil, not stored so).
func (ev *Event) Closed() bool { return ev.closed }

// MaxEventIDLen bounds an event ID.
const MaxEventIDLen = 512

var (
	outboxNS     = keyspace.New("outbox")            // pending events by seq
	outboxIDsNS  = keyspace.New("outbox.ids")        // event ID -> seq
	publishedNS  = keyspace.New("outbox.published")  // published events by seq
	quarantineNS = keyspace.New("outbox.quarantine") // quarantined events by seq
)

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// Event layout, version 1: id, topic, key (strings) | nheaders uvarint |
// (name, value)... | payload | state byte | created (time) | attempts uvarint |
// next attempt (time) | last error | published (time) | expires (time).
//
// Version 2 is version 1 with the payload sealed (package seal), bound to
// the event's ID and sequence: the same sealed bytes move with the event
// from pending to published or quarantined.
const (
	eventLayout       = 1
	eventLayoutSealed = 2
)

// eventAAD binds a sealed payload to its event.
func eventAAD(id string, seq uint64) []byte {
	return sealing.AAD("outbox.payload", id, string(seqKey(seq)))
}

// encodeEvent encodes ev. A payload read sealed is written back as it was;
// a new one is sealed with ring (if not nil).
func encodeEvent(e *record.Encoder, ring *seal.Ring, ev *Event) []byte {
	if ev.blob == nil && ring != nil {
		ev.blob = ring.Seal(nil, ev.Payload, eventAAD(ev.ID, ev.Seq))
		ev.Sealed, ev.KeyID = true, ring.Current()
	}
	payload, layout := ev.Payload, byte(eventLayout)
	if ev.blob != nil {
		payload, layout = ev.blob, eventLayoutSealed
	}
	e.Reset(record.KindOutbox, layout)
	e.String(ev.ID)
	e.String(ev.Topic)
	e.String(ev.Key)
	names := slices.Sorted(maps.Keys(ev.Headers))
	e.Uvarint(uint64(len(names)))
	for _, n := range names {
		e.String(n)
		e.String(ev.Headers[n])
	}
	e.Bytes(payload)
	e.Byte(byte(ev.State))
	e.Time(ev.CreatedAt)
	e.Uvarint(uint64(ev.Attempts))
	e.Time(ev.NextAttempt)
	e.String(ev.LastError)
	e.Time(ev.PublishedAt)
	e.Time(ev.ExpiresAt)
	return e.Finish()
}

// decodeEventWith decodes an event and opens a sealed payload with ring;
// with required, a payload that does not open (no ring, a missing key,
// altered bytes) fails with a *seal.OpenError. Every failure is an
// *EventError naming the event.
func decodeEventWith(ring *seal.Ring, k, v []byte, required bool) (*Event, error) {
	ev, err := decodeEvent(k, v)
	if err != nil {
		return nil, eventError(k, "", err)
	}
	if ev.blob == nil {
		return ev, nil
	}
	if !required && (ring == nil || !ring.Has(ev.KeyID)) {
		ev.closed = true
		return ev, nil
	}
	p, err := ring.Open(nil, ev.blob, eventAAD(ev.ID, ev.Seq))
	if err != nil {
		return nil, eventError(k, ev.ID, err)
	}
	ev.Payload = cloneOrNil(p)
	return ev, nil
}

// EventError names the event a decoding failure was found in: a flipped
// byte, a truncated value, a sealed payload that does not open.
// errors.Is(err, kv.ErrCorrupt) is true for damage. Events yields one for
// such an event and goes on with the next.
type EventError struct {
	Seq uint64 // the event's sequence (0 when its key is not one)
	ID  string // the event's ID, when it could be read
	Err error
}

func (e *EventError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("outbox: event seq %d: %v", e.Seq, e.Err)
	}
	return fmt.Sprintf("outbox: event %q (seq %d): %v", e.ID, e.Seq, e.Err)
}

// Unwrap returns the decoding error.
func (e *EventError) Unwrap() error { return e.Err }

func eventError(k []byte, id string, err error) error {
	var seq uint64
	if len(k) == 8 {
		seq = binary.BigEndian.Uint64(k)
	}
	return &EventError{Seq: seq, ID: id, Err: err}
}

// decodeEvent decodes an event without opening a sealed payload.
func decodeEvent(k, v []byte) (*Event, error) {
	if len(k) != 8 {
		return nil, &kv.CorruptError{Kind: record.KindOutbox, Reason: fmt.Sprintf("event key of %d bytes", len(k))}
	}
	var d record.Decoder
	layout, err := d.Reset(record.KindOutbox, v)
	if err != nil {
		return nil, err
	}
	if layout != eventLayout && layout != eventLayoutSealed {
		return nil, d.Fail(fmt.Sprintf("unknown event layout %d", layout))
	}
	ev := &Event{Seq: binary.BigEndian.Uint64(k)}
	ev.ID, ev.Topic, ev.Key = d.String(), d.String(), d.String()
	n := d.Uvarint()
	if n > uint64(len(v)) {
		return nil, d.Fail(fmt.Sprintf("%d headers in a %d-byte event", n, len(v)))
	}
	if n > 0 {
		ev.Headers = make(map[string]string, n)
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		name := d.String()
		ev.Headers[name] = d.String()
	}
	if layout == eventLayoutSealed {
		ev.blob = bytes.Clone(d.Bytes())
		id, ok := seal.KeyID(ev.blob)
		if !ok {
			return nil, d.Fail("sealed payload without the sealed layout")
		}
		ev.Sealed, ev.KeyID = true, id
	} else {
		ev.Payload = cloneOrNil(d.Bytes())
	}
	ev.State = EventState(d.Byte())
	ev.CreatedAt = d.Time()
	ev.Attempts = int(d.Uvarint())
	ev.NextAttempt = d.Time()
	ev.LastError = d.String()
	ev.PublishedAt = d.Time()
	ev.ExpiresAt = d.Time()
	if err := d.Done(); err != nil {
		return nil, err
	}
	if ev.State < EventPending || ev.State > EventQuarantined {
		return nil, d.Fail(fmt.Sprintf("unknown event state %d", ev.State))
	}
	return ev, nil
}

// Outbox stores events in the caller's transactions and feeds them to a
// Relay. Create one per database; handles made by several calls of New
// over one database share its relay's wake-up and its numbering.
type Outbox struct {
	db     *kv.DB
	shared *shared
}

// shared is the state every handle over one database shares
// (kv.DB.Attachment): the relay's wake-up, and the numbering of events on
// a store with several writers.
type shared struct {
	wake chan struct{}
	seqs seqs
}

// sharedKey attaches shared to its database.
type sharedKey struct{}

// New returns the outbox of db. Every handle over db wakes its relay: an
// event added, or requeued, through any of them (a handler's own handle,
// the admin console's) is published at once, not at the relay's next
// poll.
func New(db *kv.DB) *Outbox {
	s := db.Attachment(sharedKey{}, func() any { return &shared{wake: make(chan struct{}, 1)} }).(*shared)
	return &Outbox{db: db, shared: s}
}

// seqs numbers the events a process adds to a store with several writers
// (etcd): a random prefix of 31 bits, drawn once and again when the
// counter wraps or a number is taken, above a 32-bit counter. A shared
// counter would be a key every producer conflicts on; numbers drawn at
// random for each event put the events of one transaction, which share
// the revision the relay orders by, in a random order. These follow the
// order in which the process added them, except across a new prefix
// (once in 2^32 events, or when another process drew the same one),
// which falls anywhere.
type seqs struct {
	mu     sync.Mutex
	prefix uint64 // 0: not drawn yet
	n      uint32
}

// next returns the next number.
func (s *seqs) next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.prefix == 0 || s.n == 0 {
		s.draw()
	}
	return s.prefix<<32 | uint64(s.n)
}

// renew draws a new prefix: a number of this one was taken (another
// process drew the same prefix).
func (s *seqs) renew() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draw()
}

// draw takes a new prefix, never 0 nor the one before, and starts its
// counter.
func (s *seqs) draw() {
	old := s.prefix
	for s.prefix == 0 || s.prefix == old {
		var r [4]byte
		_, _ = rand.Read(r[:])
		s.prefix = uint64(binary.BigEndian.Uint32(r[:]) >> 1)
	}
	s.n = 1
}

// DB returns the outbox's database.
func (o *Outbox) DB() *kv.DB { return o.db }

func (o *Outbox) notify() {
	select {
	case o.shared.wake <- struct{}{}:
	default:
	}
}

// AddTx adds ev to the outbox in the caller's transaction: it becomes
// visible to the relay when (and only if) the transaction commits, with a
// sequence number that follows commit order. Adding an event ID that is
// already in the outbox (pending, published or quarantined) keeps the first
// and returns added false.
func (o *Outbox) AddTx(tx kv.Tx, ev Event) (seq uint64, added bool, err error) {
	switch {
	case ev.ID == "" || len(ev.ID) > MaxEventIDLen:
		return 0, false, fmt.Errorf("outbox: event ID of %d bytes (want 1 to %d)", len(ev.ID), MaxEventIDLen)
	case ev.Topic == "":
		return 0, false, fmt.Errorf("outbox: event %s has no topic", ev.ID)
	}
	// On a store with several writers (etcd), the event's number is drawn
	// first, so that the ID's index entry and the three places a number
	// may be taken are read in one request (kv.BucketKey), not four; all
	// four are expected absent, which etcd may take without reading them.
	var drawn uint64
	if p := keyspace.Prefetcher(tx); p != nil && !o.db.Traits().SingleWriter {
		drawn = o.shared.seqs.next()
		k := seqKey(drawn)
		p([]kv.BucketKey{{Bucket: outboxIDsNS.Bytes(), Key: []byte(ev.ID), Absent: true},
			{Bucket: outboxNS.Bytes(), Key: k, Absent: true}, {Bucket: publishedNS.Bytes(), Key: k, Absent: true}, {Bucket: quarantineNS.Bytes(), Key: k, Absent: true}})
	}
	ids, err := outboxIDsNS.Create(tx)
	if err != nil {
		return 0, false, err
	}
	s, old, in, err := indexed(tx, ids, ev.ID)
	if err != nil {
		return 0, false, err
	}
	if s != nil {
		gone, err := o.forgetIfExpired(tx, ids, old, in)
		if err != nil || !gone {
			return binary.BigEndian.Uint64(s), false, err
		}
	}
	b, err := outboxNS.Create(tx)
	if err != nil {
		return 0, false, err
	}
	if seq, err = o.nextSeq(tx, b, drawn); err != nil {
		return 0, false, err
	}
	ev.Seq, ev.State, ev.CreatedAt = seq, EventPending, o.db.Clock().Now()
	ev.Attempts, ev.NextAttempt, ev.LastError, ev.PublishedAt = 0, time.Time{}, "", time.Time{}
	var e record.Encoder
	if err := b.Put(seqKey(seq), encodeEvent(&e, o.db.Cipher(), &ev)); err != nil {
		return 0, false, err
	}
	if err := ids.Put([]byte(ev.ID), seqKey(seq)); err != nil {
		return 0, false, err
	}
	tx.OnCommit(o.notify)
	return seq, true, nil
}

// nextSeq numbers a new event. bbolt has one writer at a time, so the
// bucket's sequence follows commit order. With several writers the relay
// orders by the store's commit revision (revisioned), and the events of
// one commit by their numbers, which seqs gives in the order they were
// added; drawn, if not 0, is the number AddTx drew already.
func (o *Outbox) nextSeq(tx kv.Tx, b kv.Bucket, drawn uint64) (uint64, error) {
	if o.db.Traits().SingleWriter {
		return b.NextSequence()
	}
	for {
		seq := drawn
		if seq == 0 {
			seq = o.shared.seqs.next()
		}
		drawn = 0
		k := seqKey(seq)
		taken := false
		for _, ns := range []keyspace.Namespace{outboxNS, publishedNS, quarantineNS} {
			if bk := ns.Bucket(tx); bk != nil && bk.Get(k) != nil {
				taken = true
			}
		}
		if !taken {
			return seq, nil
		}
		o.shared.seqs.renew()
	}
}

// revisioned is implemented by the cursors of backends with several
// writers (etcd): the revision of the commit that created the current key,
// which orders commits across processes.
type revisioned interface{ Revision() int64 }

// stateBuckets are the buckets of the events in each state (Events,
// indexed).
var stateBuckets = [...]struct {
	ns    keyspace.Namespace
	state EventState
}{{outboxNS, EventPending}, {publishedNS, EventPublished}, {quarantineNS, EventQuarantined}}

// indexed returns the sequence key the ID index holds for id and the event
// stored there, with the state of the bucket it is in (pending, published
// or quarantined), or nil when the index has no entry for id. An entry
// that is not a sequence, or names one holding no event or another event,
// is damage: an error wrapping kv.ErrCorrupt, never another event taken
// for this one (which a re-add would then delete, or a requeue send
// again).
func indexed(tx kv.Tx, ids kv.Bucket, id string) ([]byte, *Event, EventState, error) {
	if ids == nil {
		return nil, nil, 0, nil
	}
	s := ids.Get([]byte(id))
	if s == nil {
		return nil, nil, 0, nil
	}
	damaged := func(what string) error {
		return &kv.CorruptError{Kind: record.KindOutbox, Reason: fmt.Sprintf("the ID index maps event %q to %s", id, what)}
	}
	if len(s) != 8 {
		return nil, nil, 0, damaged(fmt.Sprintf("%d bytes, not a sequence", len(s)))
	}
	for _, sb := range stateBuckets {
		b := sb.ns.Bucket(tx)
		if b == nil {
			continue
		}
		if v := b.Get(s); v != nil {
			ev, err := decodeEvent(s, v)
			if err != nil {
				return nil, nil, 0, err
			}
			if ev.ID != id {
				return nil, nil, 0, damaged(fmt.Sprintf("sequence %d, which holds event %q", ev.Seq, ev.ID))
			}
			return s, ev, sb.state, nil
		}
	}
	return nil, nil, 0, damaged(fmt.Sprintf("sequence %d, which holds no event", binary.BigEndian.Uint64(s)))
}

// forgetIfExpired removes ev, the event its ID's index entry names, found
// in the bucket of state in, if it is published and its retention has
// passed: an expired event counts as absent, whether or not a sweep has
// removed it yet, so re-adding its ID adds it again.
func (o *Outbox) forgetIfExpired(tx kv.Tx, ids kv.Bucket, ev *Event, in EventState) (bool, error) {
	if in != EventPublished || o.db.Clock().Now().Before(ev.ExpiresAt) {
		return false, nil
	}
	return true, deletePublished(tx, publishedNS.Bucket(tx), ids, ev)
}

func deletePublished(tx kv.Tx, pub, ids kv.Bucket, ev *Event) error {
	k := seqKey(ev.Seq)
	if err := pub.Delete(k); err != nil {
		return err
	}
	if ids != nil {
		if err := ids.Delete([]byte(ev.ID)); err != nil {
			return err
		}
	}
	return publishedExpiry.Delete(tx, ev.ExpiresAt, k)
}

// Add is AddTx in its own transaction.
func (o *Outbox) Add(ctx context.Context, ev Event) (uint64, bool, error) {
	var seq uint64
	var added bool
	err := o.db.Batch(ctx, func(tx kv.Tx) error {
		var err error
		seq, added, err = o.AddTx(tx, ev)
		return err
	})
	if err == nil && added {
		failpoint.Inject(failpoint.OutboxAddAfterCommit)
	}
	return seq, added, err
}

// Events iterates the events in one state, in sequence order, inside tx.
// A sealed payload opens with the database's key ring; without one, the
// event is yielded with Sealed set and a nil Payload. An event that fails
// to decode is yielded as an *EventError, and the iteration goes on.
func Events(tx kv.Tx, state EventState) iter.Seq2[*Event, error] {
	return events(tx, state, false, kv.CipherOf(tx))
}

// events is Events, opening sealed payloads with ring; with required, a
// sealed payload that does not open is an error (the relay never publishes
// an event without its payload).
func events(tx kv.Tx, state EventState, required bool, ring *seal.Ring) iter.Seq2[*Event, error] {
	var ns keyspace.Namespace // none for a state of no bucket
	for _, sb := range stateBuckets {
		if sb.state == state {
			ns = sb.ns
		}
	}
	return func(yield func(*Event, error) bool) {
		if ns.Bytes() == nil {
			return
		}
		b := ns.Bucket(tx)
		if b == nil {
			return
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if !yield(decodeEventWith(ring, k, v, required)) {
				return
			}
		}
	}
}

// Lag describes how far the relay is behind.
type Lag struct {
	Pending     int           // events not yet published (damaged ones aside)
	OldestAge   time.Duration // age of the oldest pending event (0 if none)
	Quarantined int
	// Damaged counts the pending events that do not decode (kv.ErrCorrupt):
	// the relay passes over them, and they stay until DropDamaged.
	Damaged int
}

// LagTx reports the outbox's lag inside tx.
func (o *Outbox) LagTx(tx kv.Tx) (Lag, error) {
	var l Lag
	now := o.db.Clock().Now()
	for ev, err := range Events(tx, EventPending) {
		switch {
		case errors.Is(err, kv.ErrCorrupt):
			l.Damaged++
			continue
		case err != nil:
			return l, err
		}
		// The oldest by its time, not the first in key order: with several
		// writers (etcd) sequences start from a random prefix per process,
		// and the first was any process's event.
		l.OldestAge = max(l.OldestAge, now.Sub(ev.CreatedAt))
		l.Pending++
	}
	if b := quarantineNS.Bucket(tx); b != nil {
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			l.Quarantined++
		}
	}
	return l, nil
}

// Lag reports the outbox's lag.
func (o *Outbox) Lag(ctx context.Context) (Lag, error) {
	l, err := txn.Run(ctx, o.db.View, func(tx kv.Tx) (Lag, error) { return o.LagTx(tx) })
	return l, err
}

// ErrNotQuarantined is returned by Requeue for an event that is not in
// quarantine: pending, published, or unknown.
var ErrNotQuarantined = errors.New("outbox: the event is not quarantined")

// ErrInvalidConfig is returned by NewRelay for a RelayConfig that fails
// validation.
var ErrInvalidConfig = errors.New("outbox: invalid config")

// Backoff spaces the retries of a failing event: exponential growth from
// Base, capped at Cap, with full jitter.
type Backoff = backoff.Backoff

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// DropDamaged removes the outbox event at sequence seq when it is damaged
// (kv.ErrCorrupt: an *EventError names it, "event seq N", in a listing and
// in the check), whatever its state, with the ID-index and expiry-index
// entries that lead to it. A damaged pending event can never be published:
// the relay passes over it, and Lag counts it until it is dropped. An event
// that decodes is refused (kv.ErrNotDamaged): requeue or let it publish;
// a sequence with no event too (kv.ErrNoEntry). oncekv drop --kind outbox
// runs it.
func DropDamaged(ctx context.Context, db *kv.DB, seq uint64) (kv.DroppedEntry, error) {
	var out kv.DroppedEntry
	err := db.Update(ctx, func(tx kv.Tx) error {
		k := seqKey(seq)
		for _, sb := range stateBuckets {
			b := sb.ns.Bucket(tx)
			if b == nil {
				continue
			}
			v := b.Get(k)
			if v == nil {
				continue
			}
			_, err := decodeEvent(k, v)
			switch {
			case err == nil:
				return fmt.Errorf("%w: outbox event seq %d (%s)", kv.ErrNotDamaged, seq, sb.state)
			case !errors.Is(err, kv.ErrCorrupt):
				return err
			}
			out = kv.DroppedEntry{Kind: "outbox", Entry: seq, Reason: err.Error()}
			if ee, ok := errors.AsType[*EventError](err); ok {
				out.Key, out.Reason = ee.ID, ee.Err.Error()
			}
			if err := b.Delete(k); err != nil {
				return err
			}
			return dropLeadsTo(tx, k)
		}
		return fmt.Errorf("%w: outbox event seq %d", kv.ErrNoEntry, seq)
	})
	if err != nil {
		return kv.DroppedEntry{}, err
	}
	return out, nil
}

// dropLeadsTo deletes the ID-index and expiry-index entries that lead to
// the event at sequence key k (its ID and expiry cannot be read).
func dropLeadsTo(tx kv.Tx, k []byte) error {
	if ids := outboxIDsNS.Bucket(tx); ids != nil {
		var gone [][]byte
		c := ids.Cursor()
		for id, s := c.First(); id != nil; id, s = c.Next() {
			if bytes.Equal(s, k) {
				gone = append(gone, bytes.Clone(id))
			}
		}
		for _, id := range gone {
			if err := ids.Delete(id); err != nil {
				return err
			}
		}
	}
	var expiries []time.Time
	if err := publishedExpiry.ForEach(tx, func(at time.Time, key []byte) error {
		if bytes.Equal(key, k) {
			expiries = append(expiries, at)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, at := range expiries {
		if err := publishedExpiry.Delete(tx, at, k); err != nil {
			return err
		}
	}
	return nil
}
