package inspect

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"

	// Registered checkers and sweepers of the kinds inspect does not read
	// directly, so Check covers every invariant.
	_ "github.com/oncekv/oncekv/conditional"
)

// Source answers inspection queries: an *Inspector over a file, or a
// *Client of a running service's Handler.
type Source interface {
	Keys(ctx context.Context, q KeysQuery) ([]Key, error)
	Get(ctx context.Context, scope, key string, body bool) (Record, error)
	Intents(ctx context.Context, state string, limit int) ([]Intent, error)
	Outbox(ctx context.Context) (Outbox, error)
	Inbox(ctx context.Context, consumer string, limit int) ([]InboxEntry, error)
	Stats(ctx context.Context) (Stats, error)
	Check(ctx context.Context) ([]Problem, error)
}

// KeysQuery selects idempotency records.
type KeysQuery struct {
	ScopePrefix string
	KeyPrefix   string // only keys starting with it
	Status      string // "", "in_progress" or "completed"
	Expired     bool   // only records past their retention (not yet swept)
	Limit       int    // 0: no limit
	// Offset skips that many matching records: the page of a listing
	// (records come in the store's order: expiry on bbolt, scope and key
	// elsewhere).
	Offset int
}

// ErrNotFound is returned by Get for a missing record.
var ErrNotFound = errors.New("inspect: no such record")

// Inspector runs the queries on a database.
type Inspector struct {
	db *kv.DB
	l  *ledger.Ledger
	// ShowBodies shows what is sensitive: stored bodies, intent payloads and
	// results, and provider error text (redacted otherwise). New sets it; the
	// admin handler clears it for callers without the admin token.
	ShowBodies bool
}

var _ Source = (*Inspector)(nil)

// New returns an Inspector of db (which may be read-only). It fails when the
// ledger's records cannot be opened: a read-only file of an older format
// that needs `oncekv migrate` first (recstore.ErrNeedsMigration), or a
// damaged one.
func New(db *kv.DB) (*Inspector, error) {
	l, err := ledger.New(db, nil)
	if err != nil {
		return nil, err
	}
	return &Inspector{db: db, l: l, ShowBodies: true}, nil
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func keyView(r *ledger.Record, now time.Time) Key {
	k := Key{
		Scope: r.Scope, Key: r.Key, Status: r.Status.String(), Version: r.Version,
		CreatedAt: r.CreatedAt, CompletedAt: optTime(r.CompletedAt), ExpiresAt: r.ExpiresAt,
		Expired: r.Expired(now), StoredBytes: r.StoredBytes, Compressed: r.Compressed,
	}
	if r.Status == ledger.StatusInProgress {
		k.LeaseExpiresAt = optTime(r.LeaseExpiresAt)
	}
	k.ResponseStatus = r.ResponseStatus
	if r.Sealed {
		k.Encrypted = keyIDText(r.KeyID)
	}
	return k
}

func keyIDText(id uint32) string { return fmt.Sprintf("key id %d", id) }

// encryptedText is what a tool without the key shows for a sealed value.
func encryptedText(id uint32) string { return fmt.Sprintf("encrypted (key id %d)", id) }

// Keys lists idempotency records in the store's order (expiry on bbolt,
// scope and key on a keyed store).
func (i *Inspector) Keys(ctx context.Context, q KeysQuery) ([]Key, error) {
	opts := ledger.ListOptions{ScopePrefix: q.ScopePrefix, ExpiredOnly: q.Expired}
	if q.KeyPrefix == "" && q.Offset == 0 {
		opts.Limit = q.Limit
	}
	if q.Status != "" {
		st, err := ledger.ParseStatus(q.Status)
		if err != nil {
			return nil, err
		}
		opts.Status = st
	}
	out := []Key{}
	err := i.db.View(ctx, func(tx kv.Tx) error {
		out = out[:0] // a read run again (etcd) starts afresh
		now := i.db.Clock().Now()
		skip := q.Offset
		for r, err := range i.l.Records(tx, opts) {
			if q.Limit > 0 && len(out) >= q.Limit {
				break
			}
			var k Key
			if err != nil {
				k = Key{Status: "corrupt", Error: err.Error()}
				var re *ledger.RecordError
				if errors.As(err, &re) {
					k.Scope, k.Key, k.Error = re.Scope, re.Key, re.Err.Error()
					if re.Entry != 0 {
						k.Entry = formatEntry("idempotency", re.Entry)
					}
				}
			} else {
				k = keyView(r, now)
			}
			if !strings.HasPrefix(k.Key, q.KeyPrefix) {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			out = append(out, k)
		}
		return nil
	})
	return out, err
}

// Get returns one record in detail, expired or not; the body only when
// asked and allowed.
func (i *Inspector) Get(ctx context.Context, scope, key string, body bool) (Record, error) {
	var rec Record
	err := i.db.View(ctx, func(tx kv.Tx) error {
		r, err := i.l.InspectTx(tx, scope, key)
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("%w: scope %q key %q", ErrNotFound, scope, key)
		}
		if err != nil {
			return err
		}
		rec = Record{Key: keyView(r, i.db.Clock().Now()), Fingerprint: r.Fingerprint.String(), Owner: r.Owner.String()}
		if r.Response != nil {
			rec.Headers = r.Response.Header
			rec.BodyBytes = len(r.Response.Body)
			switch {
			case !body:
			case !i.ShowBodies:
				rec.BodyEncoding = "redacted"
			default:
				rec.Body, rec.BodyEncoding = renderBody(r.Response.Body)
			}
		} else if r.Sealed && r.Status == ledger.StatusCompleted {
			rec.Closed = true
			if body {
				rec.Body, rec.BodyEncoding = encryptedText(r.KeyID), "encrypted"
			}
		}
		return nil
	})
	return rec, err
}

// renderBody shows b as text when it is printable UTF-8, else as hex.
func renderBody(b []byte) (string, string) {
	if utf8.Valid(b) {
		printable := true
		for _, r := range string(b) {
			if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
				printable = false
				break
			}
		}
		if printable {
			return string(b), "text"
		}
	}
	return hex.EncodeToString(b), "hex"
}

func (i *Inspector) intentView(in *sideeffect.Intent) Intent {
	v := Intent{
		ID: in.ID, Kind: in.Kind, Subject: in.Subject, State: in.State.String(), Attempts: in.Attempts,
		LastError: in.LastError, Version: in.Version, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt,
		FinishedAt: optTime(in.FinishedAt),
	}
	if in.State == sideeffect.StatePending || in.State == sideeffect.StateUnknown {
		v.NextAttemptAt = optTime(in.NextAttemptAt)
	}
	if r := in.Resolution; r != nil {
		v.Resolution = r.State.String()
	}
	switch {
	case in.Closed():
		// Read without its key: say so rather than show empty fields.
		v.Encrypted = keyIDText(in.KeyID)
		v.Payload = encryptedText(in.KeyID)
		if in.State != sideeffect.StatePending || in.Attempts > 0 {
			v.LastError = encryptedText(in.KeyID)
		}
	case i.ShowBodies:
		v.Payload, v.Result = string(in.Payload), string(in.Result)
	default:
		v.LastError = redact(v.LastError)
	}
	if in.Sealed {
		v.Encrypted = keyIDText(in.KeyID)
	}
	return v
}

// redact hides provider error text (it may carry customer data or echo
// hostile input) from callers without the admin token.
func redact(s string) string {
	if s == "" {
		return ""
	}
	return "redacted"
}

// Intents lists intents, optionally in one state, at most limit of them
// (0: all; a service keeps every intent it made for its retention). An
// intent that cannot be read is listed too, whatever the state asked for,
// with State "corrupt" and its Error; the listing goes on past it.
func (i *Inspector) Intents(ctx context.Context, state string, limit int) ([]Intent, error) {
	var st sideeffect.State
	if state != "" {
		var err error
		if st, err = sideeffect.ParseState(state); err != nil {
			return nil, err
		}
	}
	out := []Intent{}
	err := i.db.View(ctx, func(tx kv.Tx) error {
		out = out[:0] // a read run again (etcd) starts afresh
		for in, err := range sideeffect.Intents(tx, st) {
			if err != nil {
				v := Intent{State: "corrupt", Error: err.Error()}
				if ie := (*sideeffect.IntentError)(nil); errors.As(err, &ie) {
					v.ID, v.Error = ie.ID, ie.Err.Error()
				}
				out = append(out, v)
			} else {
				out = append(out, i.intentView(in))
			}
			if limit > 0 && len(out) >= limit {
				return nil
			}
		}
		return nil
	})
	return out, err
}

func (i *Inspector) eventView(e *outbox.Event) Event {
	v := Event{Seq: e.Seq, ID: e.ID, Topic: e.Topic, Key: e.Key, State: e.State.String(), Attempts: e.Attempts,
		LastError: e.LastError, CreatedAt: e.CreatedAt, PublishedAt: optTime(e.PublishedAt)}
	if e.Sealed {
		v.Encrypted = keyIDText(e.KeyID)
	}
	if !i.ShowBodies {
		v.LastError = redact(v.LastError)
	}
	return v
}

// MaxListedQuarantined bounds the quarantined events Outbox lists: a
// broker's long outage can quarantine thousands, and the console's page
// and the CLI's listing would carry every one.
const MaxListedQuarantined = 200

// Outbox summarises the outbox: lag, published and quarantined events,
// and the events that cannot be read (counted and listed apart).
func (i *Inspector) Outbox(ctx context.Context) (Outbox, error) {
	o := Outbox{QuarantinedEvents: []Event{}, OldestPending: []Event{}, CorruptEvents: []Event{}}
	corrupt := func(state outbox.EventState, err error) {
		o.Corrupt++
		if len(o.CorruptEvents) >= 100 {
			return
		}
		v := Event{State: state.String(), Error: err.Error()}
		if ee := (*outbox.EventError)(nil); errors.As(err, &ee) {
			v.Seq, v.ID, v.Error = ee.Seq, ee.ID, ee.Err.Error()
		}
		o.CorruptEvents = append(o.CorruptEvents, v)
	}
	err := i.db.View(ctx, func(tx kv.Tx) error {
		// A read run again (etcd) starts afresh.
		o = Outbox{QuarantinedEvents: []Event{}, OldestPending: []Event{}, CorruptEvents: []Event{}}
		now := i.db.Clock().Now()
		var firstPending []*outbox.Event // views are made for these alone
		for e, err := range outbox.Events(tx, outbox.EventPending) {
			if err != nil {
				corrupt(outbox.EventPending, err)
				continue
			}
			o.Pending++
			o.OldestAgeSeconds = max(o.OldestAgeSeconds, now.Sub(e.CreatedAt).Seconds())
			firstPending = oldest(firstPending, e, 20)
		}
		for _, e := range firstPending {
			o.OldestPending = append(o.OldestPending, i.eventView(e))
		}
		for _, err := range outbox.Events(tx, outbox.EventPublished) {
			if err != nil {
				corrupt(outbox.EventPublished, err)
				continue
			}
			o.Published++
		}
		for e, err := range outbox.Events(tx, outbox.EventQuarantined) {
			if err != nil {
				corrupt(outbox.EventQuarantined, err)
				continue
			}
			o.Quarantined++
			if len(o.QuarantinedEvents) < MaxListedQuarantined {
				o.QuarantinedEvents = append(o.QuarantinedEvents, i.eventView(e))
			}
		}
		return nil
	})
	return o, err
}

// oldest adds e to list, which holds the n oldest pending events in
// order (by creation, then sequence): by key the first pending events are
// the oldest on bbolt only; with several writers (etcd) sequences are
// random.
func oldest(list []*outbox.Event, e *outbox.Event, n int) []*outbox.Event {
	i, _ := slices.BinarySearchFunc(list, e, func(a, b *outbox.Event) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	if i >= n {
		return list
	}
	list = slices.Insert(list, i, e)
	return list[:min(len(list), n)]
}

// Inbox lists processed message IDs, for one consumer or all. An entry
// that cannot be read is listed too, whatever consumer was asked for,
// with its Error; the listing goes on past it.
func (i *Inspector) Inbox(ctx context.Context, consumer string, limit int) ([]InboxEntry, error) {
	out := []InboxEntry{}
	err := i.db.View(ctx, func(tx kv.Tx) error {
		out = out[:0] // a read run again (etcd) starts afresh
		now := i.db.Clock().Now()
		for e, err := range inbox.Entries(tx, consumer) {
			if err != nil {
				v := InboxEntry{Error: err.Error()}
				if ee := (*inbox.EntryError)(nil); errors.As(err, &ee) {
					v.Consumer, v.MessageID, v.Error = ee.Consumer, ee.MessageID, ee.Err.Error()
				}
				out = append(out, v)
			} else {
				out = append(out, InboxEntry{Consumer: e.Consumer, MessageID: e.MessageID, ProcessedAt: e.ProcessedAt,
					ExpiresAt: e.ExpiresAt, Expired: !now.Before(e.ExpiresAt)})
			}
			if limit > 0 && len(out) >= limit {
				return nil
			}
		}
		return nil
	})
	return out, err
}

// Stats counts records per kind and state and reports storage.
func (i *Inspector) Stats(ctx context.Context) (Stats, error) {
	w := i.db.Writer() // before the scan below, which a held writer does not stop
	st := Stats{Path: i.db.Path(), Backend: i.db.Traits().Name, Counts: map[string]int{}, Buckets: []Bucket{}, Tenants: []TenantUsage{},
		WriterHeldSeconds: w.Held.Seconds(), WriterQueued: w.Queued}
	for _, c := range i.db.Counters() {
		st.BackendCounts = append(st.BackendCounts, BackendCount{Name: c.Name, Value: c.Value, Unit: c.Unit, Description: c.Description})
	}
	if b := i.db.Bolt(); b != nil {
		st.PageSize = i.db.PageSize()
		if fi, err := os.Stat(i.db.Path()); err == nil {
			st.FileBytes = fi.Size()
		}
		ds := b.Stats()
		st.FreePages, st.PendingPages, st.FreeBytes = ds.FreePageN, ds.PendingPageN, ds.FreeAlloc
	}
	err := i.db.View(ctx, func(tx kv.Tx) error {
		// A read run again (etcd) starts afresh.
		st.Counts, st.Buckets, st.Tenants = map[string]int{}, []Bucket{}, []TenantUsage{}
		var err error
		if st.FormatVersion, err = keyspace.StoredFormat(tx); err != nil {
			return err
		}
		now := i.db.Clock().Now()
		for r, err := range i.l.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
			switch {
			case err != nil:
				st.Counts["idempotency.corrupt"]++
			case r.Expired(now):
				st.Counts["idempotency.expired"]++
			default:
				st.Counts["idempotency."+r.Status.String()]++
			}
		}
		for in, err := range sideeffect.Intents(tx, 0) {
			if err != nil {
				st.Counts["intent.corrupt"]++
				continue
			}
			st.Counts["intent."+in.State.String()]++
		}
		for _, s := range []outbox.EventState{outbox.EventPending, outbox.EventPublished, outbox.EventQuarantined} {
			for _, err := range outbox.Events(tx, s) {
				if err != nil {
					st.Counts["outbox.corrupt"]++
					continue
				}
				st.Counts["outbox."+s.String()]++
			}
		}
		for _, err := range inbox.Entries(tx, "") {
			if err == nil {
				st.Counts["inbox.ids"]++
			}
		}
		for tenant, u := range ledger.UsageTx(tx) {
			st.Tenants = append(st.Tenants, TenantUsage{Tenant: tenant, Records: u.Records, Bytes: u.Bytes})
		}
		bt := kv.BoltTx(tx)
		for _, ns := range keyspace.List(tx, "") {
			if bt == nil { // another backend: keys counted, no pages
				if bk := ns.Bucket(tx); bk != nil {
					n := 0
					c := bk.Cursor()
					for k, _ := c.First(); k != nil; k, _ = c.Next() {
						n++
					}
					st.Buckets = append(st.Buckets, Bucket{Name: ns.Name(), Keys: n})
				}
				continue
			}
			bk := bt.Bucket(ns.Bytes())
			if bk == nil {
				continue
			}
			s := bk.Stats()
			st.Buckets = append(st.Buckets, Bucket{Name: ns.Name(), Keys: s.KeyN, Depth: s.Depth, LeafPages: s.LeafPageN,
				LeafInuse: s.LeafInuse, BranchPage: s.BranchPageN})
		}
		return nil
	})
	return st, err
}

// Check runs bbolt's consistency check and every oncekv invariant.
func (i *Inspector) Check(ctx context.Context) ([]Problem, error) {
	ps, err := i.db.Check(ctx, Checkers()...)
	out := []Problem{}
	for _, p := range ps {
		out = append(out, Problem{Check: p.Check, Message: p.Message})
	}
	return out, err
}
