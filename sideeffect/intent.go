package sideeffect

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/google/uuid"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// State is where an intent stands.
type State byte

// Intent states. Pending and Unknown are live (the reconciler will get to
// them); Succeeded and Failed are final; NeedsAttention is parked for an
// operator and never removed by retention.
const (
	// StatePending: recorded, the call not yet known to have happened.
	StatePending State = 1
	// StateUnknown: an attempt's outcome is unknown; retried after a backoff,
	// asking the provider first.
	StateUnknown State = 2
	// StateSucceeded: the provider confirmed the effect.
	StateSucceeded State = 3
	// StateFailed: the provider confirmed the effect did not happen.
	StateFailed State = 4
	// StateNeedsAttention: too many attempts without a definite answer.
	StateNeedsAttention State = 5
)

func (s State) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateUnknown:
		return "unknown"
	case StateSucceeded:
		return "succeeded"
	case StateFailed:
		return "failed"
	case StateNeedsAttention:
		return "needs_attention"
	}
	return fmt.Sprintf("state(%d)", byte(s))
}

// ParseState parses the names printed by State.String.
func ParseState(s string) (State, error) {
	for st := StatePending; st <= StateNeedsAttention; st++ {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, fmt.Errorf("sideeffect: unknown state %q (want pending, unknown, succeeded, failed or needs_attention)", s)
}

// Final reports whether the state is succeeded or failed.
func (s State) Final() bool { return s == StateSucceeded || s == StateFailed }

// live reports whether the reconciler should work on the state.
func (s State) live() bool { return s == StatePending || s == StateUnknown }

// Intent records a side effect before it is attempted: "charge pending for
// order 1042". It is written in the same transaction as the business change
// that calls for it.
type Intent struct {
	ID            string // equal to DownstreamKey
	Kind          string // selects the Handler: "charge", "email"
	Subject       string // what it is about: "order/1042"
	DownstreamKey string // sent to the provider on every attempt
	Payload       []byte
	State         State
	Attempts      int // provider attempts started
	// NextAttemptAt is when the reconciler may next work on a live intent.
	NextAttemptAt time.Time
	LastError     string
	Result        []byte // the provider's result on success
	// Version increases on every takeover; a finishing write is fenced by it.
	Version        uint64
	Owner          uuid.UUID // incarnation running the current attempt
	LeaseExpiresAt time.Time // the current attempt's lease; zero when none
	CreatedAt      time.Time
	UpdatedAt      time.Time
	FinishedAt     time.Time // when it became succeeded or failed
	// ExpiresAt is when a final intent is forgotten (retention); zero while
	// live or parked: those are never removed.
	ExpiresAt time.Time
	// Resolution is an operator's verdict waiting to be applied (see
	// ResolveTx): the next attempt finishes the intent with it, running the
	// handler's completion, instead of calling the provider. nil when none.
	Resolution *Resolution
	// Sealed reports whether the payload, result, last error and the
	// resolution's result and reason are stored encrypted
	// (kv.Options.Cipher), and KeyID under which key. Read by a tool
	// without that key, those fields are empty and Sealed is set.
	Sealed bool
	KeyID  uint32

	blob []byte // the sealed fields, kept when they were not opened (check)
}

// Closed reports whether the intent was read without the key its fields
// are sealed under: Payload, Result, LastError and the resolution's result
// and reason are then empty, not stored so.
func (in *Intent) Closed() bool { return in.blob != nil }

// Resolution is an operator's verdict on an intent: what the provider's
// dashboard says happened. It is recorded by ResolveTx (the CLI, the admin
// endpoint) and applied by the executor, which runs the handler's
// completion as if the provider had answered.
type Resolution struct {
	State  State  // StateSucceeded or StateFailed
	Result []byte // the provider's result, for StateSucceeded
	Reason string // why (who checked what), kept as the intent's LastError for StateFailed
}

// Spec describes an intent to create.
type Spec struct {
	// Kind selects the Handler (provider and completions).
	Kind string
	// Subject names what the effect is about, for people: "order/1042".
	Subject string
	// Scope, Key and Purpose derive the downstream key (see DownstreamKey):
	// typically the idempotency scope and key of the request, or a
	// business reference the client sends, and what the call is for
	// ("charge"). They must be stable across retries. Derive them from
	// what the client sends again, not from something made at the first
	// attempt (a random ID): then a retry after a restore from a backup,
	// which no longer holds that first attempt, still reaches the
	// provider with the same key.
	Scope, Key, Purpose string
	// Payload is passed to the provider (an amount, an address).
	Payload []byte
}

// maxPayload bounds an intent's payload, result and resolution text.
const maxPayload = 1 << 20

func (s Spec) validate() error {
	switch {
	case s.Kind == "":
		return fmt.Errorf("%w: empty Kind", ErrInvalidSpec)
	case s.Key == "" || s.Purpose == "":
		return fmt.Errorf("%w: Key and Purpose derive the downstream key and must be set", ErrInvalidSpec)
	case len(s.Payload) > maxPayload:
		return fmt.Errorf("%w: payload of %d bytes (limit 1 MiB)", ErrInvalidSpec, len(s.Payload))
	}
	return nil
}

var (
	intentsNS  = keyspace.New("intent")
	dueIdx     = keyspace.NewTimeIndex("intent.due")
	intentExp  = keyspace.NewTimeIndex("intent.expiry")
	inflightNS = keyspace.New("intent.inflight")
)

// Intent layout, version 2: kind, subject, downstream key, payload (bytes) |
// state byte | attempts uvarint | next attempt (time) | last error | result |
// version uvarint | owner [16] | lease, created, updated, finished, expires
// (times) | resolution state byte (0: none) [| result bytes | reason].
// Version 1 ends after the expiry and is still read.
//
// Version 3 (written with a key ring) is version 2 with the payload, last
// error, result and the resolution's result and reason left empty, followed
// by one bytes field: those five fields, as a record of their own (layout
// 3), sealed (package seal) and bound to the intent's ID.
const (
	intentLayout       = 2
	intentLayoutSealed = 3
)

// intentAAD binds an intent's sealed fields to its ID.
func intentAAD(id string) []byte { return sealing.AAD("sideeffect.intent", id) }

// encodeIntentWith encodes in, sealing its private fields with ring (if
// not nil).
func encodeIntentWith(e *record.Encoder, ring *seal.Ring, in *Intent) []byte {
	if ring != nil {
		var inner record.Encoder
		inner.Reset(record.KindIntent, intentLayoutSealed)
		inner.Bytes(in.Payload)
		inner.String(in.LastError)
		inner.Bytes(in.Result)
		if in.Resolution != nil {
			inner.Bytes(in.Resolution.Result)
			inner.String(in.Resolution.Reason)
		}
		blob := ring.Seal(nil, inner.Finish(), intentAAD(in.ID))
		shown := *in
		shown.Payload, shown.LastError, shown.Result = nil, "", nil
		if in.Resolution != nil {
			shown.Resolution = &Resolution{State: in.Resolution.State}
		}
		in.Sealed, in.KeyID = true, ring.Current()
		encodeIntentFields(e, intentLayoutSealed, &shown)
		e.Bytes(blob)
		return e.Finish()
	}
	in.Sealed, in.KeyID = false, 0
	encodeIntentFields(e, intentLayout, in)
	return e.Finish()
}

func encodeIntentFields(e *record.Encoder, layout byte, in *Intent) {
	e.Reset(record.KindIntent, layout)
	e.String(in.Kind)
	e.String(in.Subject)
	e.String(in.DownstreamKey)
	e.Bytes(in.Payload)
	e.Byte(byte(in.State))
	e.Uvarint(uint64(in.Attempts))
	e.Time(in.NextAttemptAt)
	e.String(in.LastError)
	e.Bytes(in.Result)
	e.Uvarint(in.Version)
	e.Fixed(in.Owner[:])
	e.Time(in.LeaseExpiresAt)
	e.Time(in.CreatedAt)
	e.Time(in.UpdatedAt)
	e.Time(in.FinishedAt)
	e.Time(in.ExpiresAt)
	if in.Resolution == nil {
		e.Byte(0)
	} else {
		e.Byte(byte(in.Resolution.State))
		e.Bytes(in.Resolution.Result)
		e.String(in.Resolution.Reason)
	}
}

// decodeIntent decodes an intent without opening sealed fields (they are
// kept for a check to verify).
func decodeIntent(id, v []byte) (*Intent, error) { return decodeIntentFields(nil, id, v, false) }

// decodeIntentWith decodes an intent and opens its sealed fields with
// ring; with required, a sealed intent that does not open (no ring, a
// missing key, altered bytes) fails with a *seal.OpenError. Every failure
// is an *IntentError naming the intent.
func decodeIntentWith(ring *seal.Ring, id, v []byte, required bool) (*Intent, error) {
	in, err := decodeIntentFields(ring, id, v, required)
	if err != nil {
		return nil, &IntentError{ID: string(id), Err: err}
	}
	return in, nil
}

// decodeIntentFields is decodeIntentWith with its errors bare (the
// consistency check names the intent itself).
func decodeIntentFields(ring *seal.Ring, id, v []byte, required bool) (*Intent, error) {
	var d record.Decoder
	layout, err := d.Reset(record.KindIntent, v)
	if err != nil {
		return nil, err
	}
	if layout != 1 && layout != intentLayout && layout != intentLayoutSealed {
		return nil, d.Fail(fmt.Sprintf("unknown intent layout %d", layout))
	}
	in := &Intent{ID: string(id)}
	in.Kind = d.String()
	in.Subject = d.String()
	in.DownstreamKey = d.String()
	in.Payload = cloneOrNil(d.Bytes())
	in.State = State(d.Byte())
	in.Attempts = int(d.Uvarint())
	in.NextAttemptAt = d.Time()
	in.LastError = d.String()
	in.Result = cloneOrNil(d.Bytes())
	in.Version = d.Uvarint()
	copy(in.Owner[:], d.Fixed(16))
	in.LeaseExpiresAt = d.Time()
	in.CreatedAt = d.Time()
	in.UpdatedAt = d.Time()
	in.FinishedAt = d.Time()
	in.ExpiresAt = d.Time()
	if layout >= 2 {
		if st := State(d.Byte()); st != 0 {
			in.Resolution = &Resolution{State: st, Result: cloneOrNil(d.Bytes()), Reason: d.String()}
			if !st.Final() {
				return nil, d.Fail(fmt.Sprintf("resolution to state %d", st))
			}
		}
	}
	var blob []byte
	if layout == intentLayoutSealed {
		blob = d.Bytes()
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	if blob != nil {
		if err := openIntent(ring, in, blob, required); err != nil {
			return nil, err
		}
	}
	if in.State < StatePending || in.State > StateNeedsAttention {
		return nil, d.Fail(fmt.Sprintf("unknown intent state %d", in.State))
	}
	if in.Attempts < 0 {
		return nil, d.Fail("negative attempts")
	}
	return in, nil
}

// openIntent fills in's sealed fields from blob. Without a ring, and not
// required, the blob is kept for a check.
func openIntent(ring *seal.Ring, in *Intent, blob []byte, required bool) error {
	id, ok := seal.KeyID(blob)
	if !ok {
		return &record.CorruptError{Kind: record.KindIntent, Reason: "sealed fields without the sealed layout"}
	}
	in.Sealed, in.KeyID = true, id
	if !required && (ring == nil || !ring.Has(id)) {
		in.blob = bytes.Clone(blob)
		return nil
	}
	p, err := ring.Open(nil, blob, intentAAD(in.ID))
	if err != nil {
		return err
	}
	var d record.Decoder
	if layout, err := d.Reset(record.KindIntent, p); err != nil {
		return err
	} else if layout != intentLayoutSealed {
		return d.Fail(fmt.Sprintf("unknown sealed intent layout %d", layout))
	}
	in.Payload = cloneOrNil(d.Bytes())
	in.LastError = d.String()
	in.Result = cloneOrNil(d.Bytes())
	if in.Resolution != nil {
		in.Resolution.Result = cloneOrNil(d.Bytes())
		in.Resolution.Reason = d.String()
	}
	return d.Done()
}

func cloneOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

func loadIntent(tx kv.Tx, id string) (*Intent, error) {
	b := intentsNS.Bucket(tx)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	return decodeIntentWith(kv.CipherOf(tx), []byte(id), v, true)
}

// storeIntent writes in, keeping the due index in step: a live intent has
// one entry at NextAttemptAt, any other has none. prev is the stored
// version (nil for a new intent).
func storeIntent(tx kv.Tx, in *Intent, prev *Intent) error {
	if !in.State.Final() {
		in.ExpiresAt = time.Time{}
	}
	b, err := intentsNS.Create(tx)
	if err != nil {
		return err
	}
	var e record.Encoder
	if err := b.Put([]byte(in.ID), encodeIntentWith(&e, kv.CipherOf(tx), in)); err != nil {
		return err
	}
	id := []byte(in.ID)
	if prev != nil && prev.State.live() && (!in.State.live() || !prev.NextAttemptAt.Equal(in.NextAttemptAt)) {
		if err := dueIdx.Delete(tx, prev.NextAttemptAt, id); err != nil {
			return err
		}
	}
	if in.State.live() && (prev == nil || !prev.State.live() || !prev.NextAttemptAt.Equal(in.NextAttemptAt)) {
		if err := dueIdx.Put(tx, in.NextAttemptAt, id); err != nil {
			return err
		}
	}
	// Final intents are indexed by expiry for retention; others never expire.
	var prevExp time.Time
	if prev != nil {
		prevExp = prev.ExpiresAt
	}
	if !prevExp.Equal(in.ExpiresAt) {
		if !prevExp.IsZero() {
			if err := intentExp.Delete(tx, prevExp, id); err != nil {
				return err
			}
		}
		if !in.ExpiresAt.IsZero() {
			if err := intentExp.Put(tx, in.ExpiresAt, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// expired reports whether a final intent is past its retention at now: it
// then counts as absent, whether or not a sweep has removed it.
func (in *Intent) expired(now time.Time) bool {
	return in.State.Final() && !in.ExpiresAt.IsZero() && !now.Before(in.ExpiresAt)
}

// CreateTx records the intent described by s in the caller's transaction,
// next to the business change that calls for it. The intent's ID is its
// downstream key, so creating the same spec again (a retry) returns the
// existing intent with created false and writes nothing.
func (x *Executor) CreateTx(tx kv.Tx, s Spec) (in *Intent, created bool, err error) {
	if err := s.validate(); err != nil {
		return nil, false, err
	}
	if _, ok := x.cfg.Handlers[s.Kind]; !ok {
		return nil, false, fmt.Errorf("%w: %q", ErrUnknownKind, s.Kind)
	}
	key := DownstreamKey(s.Scope, s.Key, s.Purpose)
	if p := keyspace.Prefetcher(tx); p != nil { // etcd: a new intent's key may be guessed absent
		p([]kv.BucketKey{{Bucket: intentsNS.Bytes(), Key: []byte(key), Absent: true}})
	}
	existing, err := loadIntent(tx, key)
	now := x.db.Clock().Now()
	if err != nil || (existing != nil && !existing.expired(now)) {
		return existing, false, err
	}
	if existing != nil { // past its retention: forgotten, a new intent starts
		if err := deleteIntent(tx, existing); err != nil {
			return nil, false, err
		}
	}
	in = &Intent{
		ID: key, Kind: s.Kind, Subject: s.Subject, DownstreamKey: key, Payload: bytes.Clone(s.Payload),
		State: StatePending, NextAttemptAt: now.Add(x.cfg.Grace), Version: 1, CreatedAt: now, UpdatedAt: now,
	}
	if err := storeIntent(tx, in, nil); err != nil {
		return nil, false, err
	}
	x.reportIntent(tx, in, nil)
	tx.OnCommit(x.Wake)
	return in, true, nil
}

// Create is CreateTx in its own transaction.
func (x *Executor) Create(ctx context.Context, s Spec) (*Intent, bool, error) {
	var in *Intent
	var created bool
	err := x.db.Batch(ctx, func(tx kv.Tx) error {
		var err error
		in, created, err = x.CreateTx(tx, s)
		return err
	})
	return in, created, err
}

// Get returns the intent with the given ID, or ErrNotFound.
func (x *Executor) Get(ctx context.Context, id string) (*Intent, error) {
	var in *Intent
	err := x.db.View(ctx, func(tx kv.Tx) error {
		var err error
		in, err = GetTx(tx, id)
		if err == nil && in.expired(x.db.Clock().Now()) {
			in, err = nil, ErrNotFound
		}
		return err
	})
	return in, err
}

// GetTx returns the intent stored under id inside tx, or ErrNotFound. It
// returns what is stored, even a final intent past its retention; Executor.Get
// is the retention-aware look-up that treats those as absent.
func GetTx(tx kv.Tx, id string) (*Intent, error) {
	in, err := loadIntent(tx, id)
	if err == nil && in == nil {
		err = ErrNotFound
	}
	return in, err
}

func deleteIntent(tx kv.Tx, in *Intent) error {
	id := []byte(in.ID)
	if b := intentsNS.Bucket(tx); b != nil {
		if err := b.Delete(id); err != nil {
			return err
		}
	}
	if in.State.live() {
		if err := dueIdx.Delete(tx, in.NextAttemptAt, id); err != nil {
			return err
		}
	}
	if !in.ExpiresAt.IsZero() {
		return intentExp.Delete(tx, in.ExpiresAt, id)
	}
	return nil
}

// Intents iterates every intent in ID order inside tx, optionally only those
// in state (0 for all). A record that fails to decode is yielded as an
// *IntentError (its state unknown, whatever state was asked for), so is a
// sealed one that does not open with the database's key ring, and the
// iteration goes on with the next; without a ring, sealed intents are
// yielded with Sealed set and their sealed fields empty.
func Intents(tx kv.Tx, state State) iter.Seq2[*Intent, error] {
	return func(yield func(*Intent, error) bool) {
		b := intentsNS.Bucket(tx)
		if b == nil {
			return
		}
		ring := kv.CipherOf(tx)
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			in, err := decodeIntentWith(ring, k, v, false)
			if err == nil && state != 0 && in.State != state {
				continue
			}
			if !yield(in, err) {
				return
			}
		}
	}
}
