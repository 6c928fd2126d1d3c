package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/sideeffect"
)

// RekeyOptions tune Rekey.
type RekeyOptions struct {
	// BatchSize bounds the records visited per transaction (0 means 500;
	// on a backend that bounds a transaction's writes, etcd, at most a
	// quarter of that bound): a rekey never holds the writer for long.
	BatchSize int
	// Progress, if set, is called after every committed batch.
	Progress func(RekeyProgress)
}

// RekeyProgress reports a rekey's progress.
type RekeyProgress struct {
	Kind     string // the kind being rewritten: idempotency, intent, outbox, conditional
	Batches  int    // batches committed so far, all kinds
	Resealed int    // records rewritten so far, all kinds
	Done     bool   // the last report: every kind is done
}

// ErrNoCipher is returned by Rekey on a database opened without a key ring.
var ErrNoCipher = errors.New("inspect: rekey needs a key ring: open the database with kv.Options.Cipher")

// sealedKinds are the kinds of records that hold sealed values, each with
// its part of a rekey.
var sealedKinds = []struct {
	name   string
	reseal func(tx kv.Tx, ring *seal.Ring, after []byte, limit int) ([]byte, int, error)
}{
	{"idempotency", ledger.Reseal},
	{"intent", sideeffect.Reseal},
	{"outbox", outbox.Reseal},
	{"conditional", conditional.Reseal},
}

// Rekey rewrites every sealed value of db (stored responses, intents,
// outbox payloads, sealed conditional rows) that is not sealed under the
// current key of its key ring (kv.Options.Cipher), in bounded
// transactions, so that older keys can then be retired. Values stored in
// clear are sealed too, except rows of conditional tables that did not opt
// in. It is safe while the database serves: each batch is one short write
// transaction, and values written meanwhile already use the current key.
// It is resumable: a rekey stopped at any point (an error, a crash) is
// finished by running it again, which skips what is done. It returns the
// number of records rewritten; a value that does not open (a key missing
// from the ring) stops it with an error naming the record, keeping the
// batches already committed.
func Rekey(ctx context.Context, db *kv.DB, opts RekeyOptions) (int, error) {
	ring := db.Cipher()
	if ring == nil {
		return 0, ErrNoCipher
	}
	limit := opts.BatchSize
	if limit <= 0 {
		limit = 500
	}
	// A resealed record is a write, and another when its size moves a
	// usage counter: stay well within what one transaction of the backend
	// may carry (etcd: 128 writes).
	limit = db.Traits().Fit(limit, 4)
	p := RekeyProgress{}
	for _, k := range sealedKinds {
		p.Kind = k.name
		var after []byte
		for first := true; first || after != nil; first = false {
			if err := ctx.Err(); err != nil {
				return p.Resealed, err
			}
			var next []byte
			var n int
			err := db.Update(ctx, func(tx kv.Tx) error {
				var err error
				next, n, err = k.reseal(tx, ring, after, limit)
				return err
			})
			if err != nil {
				return p.Resealed, fmt.Errorf("inspect: rekey %s: %w", p.Kind, err)
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
