package ledger

import (
	"context"
	"iter"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/internal/txn"
	"github.com/oncekv/oncekv/kv"
)

// Get returns the live record for (scope, key), with its response, or
// ErrNotFound if there is none or it has expired.
func (l *Ledger) Get(ctx context.Context, scope, key string) (*Record, error) {
	r, err := txn.Run(ctx, l.db.View, func(tx kv.Tx) (*Record, error) { return l.GetTx(tx, scope, key, false) })
	return r, err
}

// GetTx is Get inside the caller's transaction. With includeExpired, a record
// past its retention that no sweep has removed yet is returned too.
func (l *Ledger) GetTx(tx kv.Tx, scope, key string, includeExpired bool) (*Record, error) {
	if err := validate(scope, key); err != nil {
		return nil, err
	}
	_, r, err := l.load(tx, scope, key, true)
	if err != nil {
		return nil, err
	}
	if r == nil || (!includeExpired && r.Expired(l.now())) {
		return nil, ErrNotFound
	}
	return r, nil
}

// InspectTx returns the record of (scope, key), expired or not, for tools:
// like GetTx, except that a response sealed under a key the database's
// ring lacks (or with no ring) is left closed, the record returned with
// Sealed set and a nil Response, instead of failing. A sealed response
// that does not authenticate still fails (seal.ErrTampered).
func (l *Ledger) InspectTx(tx kv.Tx, scope, key string) (*Record, error) {
	if err := validate(scope, key); err != nil {
		return nil, err
	}
	_, v, err := l.records.Get(tx, scope, key)
	if err != nil {
		return nil, &RecordError{Scope: scope, Key: key, Err: err}
	}
	if v == nil {
		return nil, ErrNotFound
	}
	r, err := decodeRecordWith(l.db.Cipher(), scope, key, v, bodyIfOpen)
	if err != nil {
		return nil, &RecordError{Scope: scope, Key: key, Err: err}
	}
	return r, nil
}

// ListOptions select records for Records.
type ListOptions struct {
	// ScopePrefix keeps records whose scope starts with it ("" for all).
	ScopePrefix string
	// Status keeps only records with this status (0 for any).
	Status Status
	// IncludeExpired also yields records past their retention.
	IncludeExpired bool
	// ExpiredOnly yields only records past their retention.
	ExpiredOnly bool
	// WithBody decodes stored responses (otherwise Record.Response is nil).
	// A sealed response opens with the database's key ring; without one,
	// the record is yielded with Sealed set and a nil Response.
	WithBody bool
	// Limit stops after this many records (0 for no limit).
	Limit int
}

// Records iterates records inside tx: in expiry order on bbolt (the
// records' log: a scope prefix filters, it does not seek, so a listing
// reads every record), in (scope, key) order on a keyed store. A record
// that fails to decode, or whose log entry fails its checksum (its scope
// and key may then be damaged bytes naming another record), is yielded as
// a *RecordError (wrapping kv.ErrCorrupt) and the iteration goes on; the
// caller may stop at any time.
func (l *Ledger) Records(tx kv.Tx, opts ListOptions) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		now := l.now()
		n := 0
		l.records.List(tx, opts.ScopePrefix, func(ref recstore.Ref, scope, key string, v []byte, ok bool) bool {
			if !ok {
				return yield(nil, &RecordError{Scope: scope, Key: key, Err: recstore.DamagedEntry(record.KindIdempotency, v), Entry: ref.Pos()})
			}
			mode := statusOnly
			if opts.WithBody {
				mode = bodyIfOpen
			}
			r, err := decodeRecordWith(l.db.Cipher(), scope, key, v, mode)
			if err != nil {
				return yield(nil, &RecordError{Scope: scope, Key: key, Err: err, Entry: ref.Pos()})
			}
			expired := r.Expired(now)
			if (expired && !opts.IncludeExpired && !opts.ExpiredOnly) || (opts.ExpiredOnly && !expired) {
				return true
			}
			if opts.Status != 0 && r.Status != opts.Status {
				return true
			}
			if !yield(r, nil) {
				return false
			}
			n++
			return opts.Limit <= 0 || n < opts.Limit
		})
	}
}
