package kv

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Problem is one inconsistency found by Check.
type Problem struct {
	Check   string // which check found it: "bbolt", "format", or a Checker's name
	Message string
}

// Checker verifies one package's invariants over a whole store. Packages
// export theirs (ledger.Kind, conditional.Tables, ...), and DB.Check runs
// the ones it is given: nothing registers itself.
type Checker interface {
	// Name names the check in the problems it reports ("ledger").
	Name() string
	// Check reports every inconsistency it finds in tx through report.
	Check(tx Tx, report func(msg string))
}

// RecordKind is a kind of record kept with a retention (idempotency
// records, inbox IDs, published events, finished intents). retention.Sweep
// takes the kinds to sweep explicitly; each is also a Checker.
type RecordKind interface {
	Checker
	// Due returns up to limit records due for expiry at now, in expiry
	// order, starting after the cursor after (nil: from the start).
	Due(tx Tx, now time.Time, after []byte, limit int) []Due
	// Expire re-checks the record behind d and, unless dryRun, removes it
	// when it may go; otherwise it says why it was kept ("live lease",
	// "pending", "not expired").
	Expire(tx Tx, d Due, now time.Time, dryRun bool) (deleted bool, kept string, err error)
}

// DroppedEntry is a damaged record an operator removed by hand
// (ledger.DropDamaged, inbox.DropDamaged, outbox.DropDamaged), as far as
// it could be read.
type DroppedEntry struct {
	Kind   string // the record kind: "idempotency", "inbox", "outbox"
	Entry  uint64 // its log position, as DB.Check names it ("log entry %x"); an outbox event's sequence
	Scope  string // its scope, "" when it could not be read (or has none: outbox)
	Key    string // its key (an outbox event's ID), "" when it could not be read
	Reason string // what was wrong with it
}

// Due is a record due for expiry, as RecordKind.Due finds it.
type Due struct {
	At     time.Time // the record's expiry
	Key    []byte    // the record's key
	Cursor []byte    // where the next Due call resumes
}

// Check runs bbolt's own page-level consistency check (on a bbolt backend),
// verifies the format record, and runs every checker given, in one
// read-only transaction. It returns the problems found (nil when the
// database is consistent). Its cost is proportional to the size of the
// database.
//
// A damaged file never crashes Check: bbolt's assertion panics and memory
// faults on pages past the end are reported as a "bbolt" problem.
func (db *DB) Check(ctx context.Context, checkers ...Checker) (problems []Problem, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			problems = append(problems, Problem{Check: "bbolt", Message: fmt.Sprintf("the file is damaged: reading it failed: %v", r)})
			err = nil
		}
	}()
	err = db.View(ctx, func(tx Tx) error {
		problems = checkTx(tx, checkers...)
		return nil
	})
	return problems, err
}

// checkTx is Check inside a transaction.
func checkTx(tx Tx, checkers ...Checker) []Problem {
	var problems []Problem
	if bt := BoltTx(tx); bt != nil {
		if err := walkTx(bt); err != nil {
			// bbolt's check would follow the damage into a fatal fault.
			return append(problems, Problem{Check: "bbolt", Message: "the file is damaged: " + err.Error()})
		}
		for err := range bt.Check(bolt.WithKVStringer(bolt.HexKVStringer())) {
			problems = append(problems, Problem{Check: "bbolt", Message: err.Error()})
		}
	}
	if _, err := storedFormat(tx); err != nil {
		problems = append(problems, Problem{Check: "format", Message: err.Error()})
	}
	for _, c := range checkers {
		name := c.Name()
		func() {
			defer func() {
				if r := recover(); r != nil {
					problems = append(problems, Problem{Check: name, Message: fmt.Sprintf("checker panicked: %v", r)})
				}
			}()
			c.Check(tx, func(msg string) { problems = append(problems, Problem{Check: name, Message: msg}) })
		}()
	}
	return problems
}

// walkTx runs walkStructure over the tree tx sees, reading the file.
func walkTx(bt *bolt.Tx) error {
	f, err := os.Open(bt.DB().Path())
	if err != nil {
		return nil // not reachable as a file (bbolt's check still runs)
	}
	defer func() { _ = f.Close() }()
	ps := bt.DB().Info().PageSize
	pages := uint64(bt.Size()) / uint64(ps)
	if err := walkStructure(f, ps, pages, uint64(bt.Cursor().Bucket().Root()), nil); err != nil {
		return err
	}
	// bbolt's check loads the freelist of a read-only file (a writable
	// one's was loaded, and checked, at open). No writer holds a file open
	// read-only, so its newer meta page is the transaction's.
	if !bt.DB().IsReadOnly() {
		return nil
	}
	var metas []boltMeta
	for i := range 2 {
		buf := make([]byte, pageHeaderLen+metaLen)
		if _, err := f.ReadAt(buf, int64(i*ps)); err == nil {
			if m, ok := parseMeta(buf); ok {
				metas = append(metas, m)
			}
		}
	}
	if len(metas) == 0 || newest(metas).freelist == noFreelist {
		return nil // none in the file: bbolt rebuilds it, guarded by the walk above
	}
	_, err = checkFreelist(f, newest(metas).freelist, uint64(ps), pages)
	return err
}
