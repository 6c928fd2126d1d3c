package inbox

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/internal/txn"
)

// DefaultRetention is how long a processed message ID is remembered.
// It must exceed the broker's redelivery horizon (how long after a first
// delivery the broker may deliver the same message again), or a late
// redelivery is applied twice.
const DefaultRetention = keyspace.DefaultInbox

// Limits on inbox names.
const (
	MaxConsumerLen  = 255
	MaxMessageIDLen = 1024
)

// Errors returned by the inbox.
var (
	// ErrInvalidMessage is returned for an empty or oversized consumer name
	// or message ID, or one containing a NUL byte.
	ErrInvalidMessage = errors.New("inbox: invalid consumer or message ID")

	// ErrInvalidConfig is returned by New for a Config that fails validation.
	ErrInvalidConfig = errors.New("inbox: invalid config")
)

// Config configures an Inbox. A nil *Config means defaults.
type Config struct {
	// Retention is how long a processed message ID is remembered. 0 means
	// DefaultRetention. It must exceed the broker's redelivery horizon.
	Retention time.Duration
	// RetentionFor, if set, overrides Retention per consumer (for example
	// retention.Policy.Func): 0 falls back, negative keeps IDs forever.
	RetentionFor func(consumer string) time.Duration
}

// Inbox records the IDs of processed messages per consumer, in the same
// transaction as the state change each message causes, so that a
// redelivered message is recognised and only acknowledged.
type Inbox struct {
	db           *kv.DB
	marks        recstore.Store
	retention    time.Duration
	retentionFor func(string) time.Duration
}

// markSpec names the marks' buckets: the log "inbox.log" (bbolt), or
// "inbox" with its index "inbox.expiry" (etcd, and files of format 1).
var markSpec = recstore.Spec{Name: "inbox"}

// New returns the inbox of db. cfg may be nil for defaults.
func New(db *kv.DB, cfg *Config) (*Inbox, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: nil *kv.DB", ErrInvalidConfig)
	}
	marks, err := recstore.Open(context.Background(), db, markSpec)
	if err != nil {
		return nil, fmt.Errorf("inbox: open the marks: %w", err)
	}
	return &Inbox{db: db, marks: marks, retention: c.Retention, retentionFor: c.RetentionFor}, nil
}

func (c *Config) withDefaults() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.Retention == 0 {
		r.Retention = DefaultRetention
	}
	return r
}

func (c *Config) validate() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("%w: inbox Retention %s is negative", ErrInvalidConfig, c.Retention)
	case c.Retention > keyspace.MaxRetention:
		return fmt.Errorf("%w: inbox Retention %s exceeds 100 years; stored times would wrap round", ErrInvalidConfig, c.Retention)
	}
	return nil
}

func validName(kind, s string, limit int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", ErrInvalidMessage, kind)
	case len(s) > limit:
		return fmt.Errorf("%w: %s of %d bytes (limit %d)", ErrInvalidMessage, kind, len(s), limit)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidMessage, kind)
	}
	return nil
}

// Entry is a processed message ID.
type Entry struct {
	Consumer    string
	MessageID   string
	ProcessedAt time.Time
	ExpiresAt   time.Time
}

const inboxLayout = 1

func encodeInbox(processed, expires time.Time) []byte {
	var e record.Encoder
	e.Reset(record.KindInbox, inboxLayout)
	e.Time(processed)
	e.Time(expires)
	return e.Finish()
}

func decodeInbox(consumer, id string, v []byte) (Entry, error) {
	var d record.Decoder
	layout, err := d.Reset(record.KindInbox, v)
	if err != nil {
		return Entry{}, err
	}
	if layout != inboxLayout {
		return Entry{}, d.Fail(fmt.Sprintf("unknown inbox layout %d", layout))
	}
	e := Entry{Consumer: consumer, MessageID: id, ProcessedAt: d.Time(), ExpiresAt: d.Time()}
	return e, d.Done()
}

// MarkTx records that consumer processed message id, in the caller's
// transaction. It returns duplicate true (and writes nothing) when the ID is
// already recorded and not expired: the caller must then skip the state
// change and only acknowledge. The mark becomes durable with the caller's
// commit; acknowledge the message only after that.
func (in *Inbox) MarkTx(tx kv.Tx, consumer, id string) (duplicate bool, err error) {
	if err := validIDs(consumer, id); err != nil {
		return false, err
	}
	return in.mark(context.Background(), tx, consumer, id)
}

// mark is MarkTx for a consumer and ID already checked (Handle checks them
// once, before its transaction).
func (in *Inbox) mark(ctx context.Context, tx kv.Tx, consumer, id string) (duplicate bool, err error) {
	if in.marks.Layout() != "log" { // no directory (etcd): a new message's mark may be guessed absent
		if p := keyspace.Prefetcher(tx); p != nil {
			bucket, k := recstore.KeyOf(markSpec, consumer, id)
			p([]kv.BucketKey{{Bucket: bucket, Key: k, Absent: true}})
		}
	}
	ref, v, err := in.marks.Get(tx, consumer, id)
	if err != nil {
		return false, fmt.Errorf("inbox: %q/%q: %w", consumer, id, err)
	}
	now := in.db.Clock().Now()
	var prevExpiry time.Time
	if v != nil {
		e, err := decodeInbox(consumer, id, v)
		if err != nil {
			return false, fmt.Errorf("inbox: %q/%q: %w", consumer, id, err)
		}
		if now.Before(e.ExpiresAt) {
			return true, nil
		}
		prevExpiry = e.ExpiresAt // remembered past its window: a new delivery
	}
	d := in.retention
	if in.retentionFor != nil {
		if r := in.retentionFor(consumer); r != 0 {
			d = r
		}
	}
	exp := keyspace.ExpiryAt(now, d)
	_, err = in.marks.Put(ctx, tx, consumer, id, ref, prevExpiry, exp, encodeInbox(now, exp))
	return false, err
}

// Delivery is the outcome of Handle.
type Delivery struct {
	// Ack is true when the message may be acknowledged: it was applied and
	// committed, or it had been processed before.
	Ack bool
	// Duplicate is true when the message had been processed before; the
	// handler did not run.
	Duplicate bool
}

// Handle processes one delivery: in one transaction (under group commit) it
// marks the message ID and runs fn, the state change. It returns Ack true
// once that transaction has committed, or at once for a duplicate. If fn
// fails, everything rolls back, the mark included, so the redelivery is
// applied; Ack is false. fn may run more than once and must write only
// through tx: a write it starts anew on the same database (an Update, a
// managed call) waits for the writer its own transaction holds, for ever.
func (in *Inbox) Handle(ctx context.Context, consumer, id string, fn func(tx kv.Tx) error) (Delivery, error) {
	if err := validIDs(consumer, id); err != nil {
		return Delivery{}, err
	}
	// A redelivery of a message already applied is answered from a read
	// transaction (none at all for an ID the directory has never seen):
	// a committed mark is final, so no write transaction is needed. On a
	// store without a directory (etcd) that read would cost every new
	// message a round trip: the write transaction finds duplicates there.
	if in.marks.Layout() == "log" {
		if dup, err := in.seen(ctx, consumer, id); err != nil {
			return Delivery{}, err
		} else if dup {
			in.report(ctx, consumer, true)
			return Delivery{Ack: true, Duplicate: true}, nil
		}
	}
	var d Delivery
	j := &recstore.Journal{}
	jctx := recstore.WithJournal(ctx, j)
	err := in.db.Batch(jctx, func(tx kv.Tx) error {
		j.Undo() // an earlier run of this call that did not commit
		d = Delivery{}
		dup, err := in.mark(jctx, tx, consumer, id)
		if err != nil {
			return err
		}
		if dup {
			d = Delivery{Ack: true, Duplicate: true}
			return nil
		}
		if err := fn(tx); err != nil {
			return err
		}
		d.Ack = true
		failpoint.Inject(failpoint.InboxBeforeCommit)
		return nil
	})
	if err != nil {
		j.Undo()
		return Delivery{}, err
	}
	j.Committed()
	if !d.Duplicate {
		failpoint.Inject(failpoint.InboxAfterCommit) // committed, not yet acknowledged
	}
	in.report(ctx, consumer, d.Duplicate)
	return d, nil
}

// report tells the observer of a delivery handled.
func (in *Inbox) report(ctx context.Context, consumer string, duplicate bool) {
	if o := in.db.Observer(); o != nil && o.Message != nil {
		o.Message(ctx, observe.Message{Consumer: consumer, Duplicate: duplicate})
	}
}

// Seen reports whether consumer has a live record of message id.
// An invalid consumer or message ID is an error (as for Handle).
func (in *Inbox) Seen(ctx context.Context, consumer, id string) (bool, error) {
	if err := validIDs(consumer, id); err != nil {
		return false, err
	}
	return in.seen(ctx, consumer, id)
}

// validIDs checks a consumer and a message ID.
func validIDs(consumer, id string) error {
	if err := validName("consumer", consumer, MaxConsumerLen); err != nil {
		return err
	}
	return validName("message ID", id, MaxMessageIDLen)
}

// seen is Seen for a valid consumer and ID: the directory first (an ID it
// has never seen needs no transaction), then the cache of recent marks,
// then a read transaction.
func (in *Inbox) seen(ctx context.Context, consumer, id string) (bool, error) {
	probe, ok := in.marks.Probe(consumer, id)
	if !ok {
		return false, nil
	}
	var live bool
	var err error
	if _, v, ok := in.marks.Cached(ctx, probe, consumer, id); ok {
		live, err = in.live(consumer, id, v, nil) // a mark this process committed recently
	} else {
		live, err = txn.Run(ctx, in.db.View, func(tx kv.Tx) (bool, error) {
			_, v, err := in.marks.GetProbed(tx, consumer, id, probe)
			return in.live(consumer, id, v, err)
		})
	}
	if err != nil {
		return false, fmt.Errorf("inbox: %q/%q: %w", consumer, id, err)
	}
	return live, nil
}

// SeenTx is Seen inside the caller's transaction: it sees a mark MarkTx
// made earlier in that transaction.
func (in *Inbox) SeenTx(tx kv.Tx, consumer, id string) (bool, error) {
	if err := validIDs(consumer, id); err != nil {
		return false, err
	}
	_, v, err := in.marks.Get(tx, consumer, id)
	return in.live(consumer, id, v, err)
}

// live reports whether v, the mark of consumer/id found by a look-up that
// returned err, is a mark still within its window.
func (in *Inbox) live(consumer, id string, v []byte, err error) (bool, error) {
	if err != nil || v == nil {
		return false, err
	}
	e, err := decodeInbox(consumer, id, v)
	return err == nil && in.db.Clock().Now().Before(e.ExpiresAt), err
}

// Entries iterates the recorded message IDs of consumer ("" for all
// consumers) inside tx, expired ones included: in expiry order on bbolt,
// in (consumer, ID) order on a keyed store. An entry that fails to decode,
// or whose log entry fails its checksum, is yielded as an *EntryError
// (whatever consumer was asked for: its own cannot be trusted) and the
// iteration goes on.
func Entries(tx kv.Tx, consumer string) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		recstore.List(tx, markSpec, consumer, func(_ recstore.Ref, c, id string, v []byte, ok bool) bool {
			if !ok {
				return yield(Entry{}, &EntryError{Consumer: c, MessageID: id, Err: recstore.DamagedEntry(record.KindInbox, v)})
			}
			if consumer != "" && c != consumer {
				return true
			}
			e, err := decodeInbox(c, id, v)
			if err != nil {
				return yield(Entry{}, &EntryError{Consumer: c, MessageID: id, Err: err})
			}
			return yield(e, nil)
		})
	}
}

// EntryError names the processed-message ID a decoding failure was found
// in, as far as its consumer and ID can be read: errors.Is(err,
// kv.ErrCorrupt) is true. Entries yields one for such an entry and goes on
// with the next.
type EntryError struct {
	Consumer, MessageID string
	Err                 error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("inbox: message %q of consumer %q: %v", e.MessageID, e.Consumer, e.Err)
}

// Unwrap returns the decoding error.
func (e *EntryError) Unwrap() error { return e.Err }

// RecordKind is the kind of the processed-message IDs: pass it to
// retention.Sweep to forget IDs past their window, and to kv.DB.Check to
// verify them.
var RecordKind kv.RecordKind = &recstore.Kind[Entry]{
	Spec:      markSpec,
	KindName:  "inbox",
	Decode:    func(c, id string, v []byte, _ bool) (Entry, error) { return decodeInbox(c, id, v) },
	ExpiresAt: func(e Entry) time.Time { return e.ExpiresAt },
}

// DropDamaged removes the processed-message mark at log position entry
// when it is damaged, as kv.DB.Check reports it ("inbox log entry ENTRY:
// damaged", or a mark that does not decode). A damaged mark that still
// names its message answers that message with an *EntryError (whether it
// was handled cannot be read), so the broker redelivers it forever;
// dropping it is the operator's decision that it may be handled again.
// An intact mark is refused (kv.ErrNotDamaged), as is a position without
// one (kv.ErrNoEntry) and a database that keeps marks by key (etcd).
func DropDamaged(ctx context.Context, db *kv.DB, entry uint64) (kv.DroppedEntry, error) {
	var out kv.DroppedEntry
	err := db.Update(ctx, func(tx kv.Tx) error {
		var err error
		out, err = RecordKind.(*recstore.Kind[Entry]).DropDamaged(tx, entry)
		return err
	})
	if err != nil {
		return kv.DroppedEntry{}, err
	}
	return out, nil
}
