package kv

import (
	"context"
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/seal"
)

// SealedKind is implemented by the kinds of records that hold sealed values
// (Options.Cipher): the ledger's records, intents, outbox events and
// conditional tables. DB.Rekey walks them.
type SealedKind interface {
	// Name names the kind in progress reports ("idempotency").
	Name() string
	// Reseal visits up to limit records after the cursor after (nil: from
	// the start) and rewrites, in tx, those holding a value sealed under
	// another key than ring's current one. It returns the cursor to resume
	// after (nil when the kind is done) and how many records it rewrote. A
	// value that does not open fails the call, naming the record.
	Reseal(tx Tx, ring *seal.Ring, after []byte, limit int) (next []byte, resealed int, err error)
}

// RekeyOptions tune DB.Rekey.
type RekeyOptions struct {
	// BatchSize bounds the records visited per transaction (0 means 500):
	// a rekey never holds the writer for long.
	BatchSize int
	// Progress, if set, is called after every committed batch.
	Progress func(RekeyProgress)
}

// RekeyProgress reports a rekey's progress.
type RekeyProgress struct {
	Kind     string // the kind being rewritten
	Batches  int    // batches committed so far, all kinds
	Resealed int    // records rewritten so far, all kinds
	Done     bool   // the last report: every kind is done
}

// ErrNoCipher is returned by Rekey on a DB opened without Options.Cipher.
var ErrNoCipher = errors.New("kv: no key ring: open the database with Options.Cipher")

// Rekey rewrites every value of the given kinds sealed under a key other
// than the current key of Options.Cipher (values still in clear stay as
// they are), in bounded transactions, so that the older keys can then be
// retired. It is safe while the database serves: each batch is one short
// write transaction, and values written meanwhile already use the current
// key. It is resumable: a rekey stopped at any point (an error, a crash)
// is finished by running it again, which skips what is done. It returns
// the number of records rewritten.
func (db *DB) Rekey(ctx context.Context, kinds []SealedKind, opts RekeyOptions) (int, error) {
	ring := db.Cipher()
	if ring == nil {
		return 0, ErrNoCipher
	}
	limit := opts.BatchSize
	if limit <= 0 {
		limit = 500
	}
	p := RekeyProgress{}
	for _, k := range kinds {
		p.Kind = k.Name()
		var after []byte
		for first := true; first || after != nil; first = false {
			if err := ctx.Err(); err != nil {
				return p.Resealed, err
			}
			var next []byte
			var n int
			err := db.Update(ctx, func(tx Tx) error {
				var err error
				next, n, err = k.Reseal(tx, ring, after, limit)
				return err
			})
			if err != nil {
				return p.Resealed, fmt.Errorf("kv: rekey %s: %w", p.Kind, err)
			}
			after = next
			p.Batches++
			p.Resealed += n
			if opts.Progress != nil {
				opts.Progress(p)
			}
			failpoint.Inject(failpoint.RekeyBetweenBatches)
		}
	}
	p.Done = true
	if opts.Progress != nil {
		opts.Progress(p)
	}
	return p.Resealed, nil
}
