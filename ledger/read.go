package ledger

import (
	"context"
	"iter"
	"strings"

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
	r, err := load(recordsNS.Bucket(tx), recordKey(nil, scope, key), true)
	if err != nil {
		return nil, err
	}
	if r == nil || (!includeExpired && r.Expired(l.now())) {
		return nil, ErrNotFound
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
	WithBody bool
	// Limit stops after this many records (0 for no limit).
	Limit int
}

// Records iterates records in (scope, key) order inside tx. A record that
// fails to decode is yielded as a *RecordError (wrapping kv.ErrCorrupt) and
// the iteration goes on; the caller may stop at any time.
func (l *Ledger) Records(tx kv.Tx, opts ListOptions) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		b := recordsNS.Bucket(tx)
		if b == nil {
			return
		}
		now := l.now()
		prefix := []byte(opts.ScopePrefix)
		c := b.Cursor()
		n := 0
		for k, v := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), opts.ScopePrefix); k, v = c.Next() {
			r, err := decodeRecord(k, v, opts.WithBody)
			if err != nil {
				if !yield(nil, recordError(k, err)) {
					return
				}
				continue
			}
			expired := r.Expired(now)
			if (expired && !opts.IncludeExpired && !opts.ExpiredOnly) || (opts.ExpiredOnly && !expired) {
				continue
			}
			if opts.Status != 0 && r.Status != opts.Status {
				continue
			}
			if !yield(r, nil) {
				return
			}
			if n++; opts.Limit > 0 && n >= opts.Limit {
				return
			}
		}
	}
}
