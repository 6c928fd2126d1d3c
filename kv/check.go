package kv

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Problem is one inconsistency found by Check.
type Problem struct {
	Check   string // which check found it: "bbolt", "format", or a registered checker's name
	Message string
}

func (p Problem) String() string { return p.Check + ": " + p.Message }

// Checker inspects the database inside a read-only transaction and reports
// every inconsistency it finds through report. oncekv's packages register
// checkers for their invariants (every expiry-index entry points to its
// record and back, every record decodes, unique indexes match their rows).
type Checker func(tx Tx, report func(msg string))

var (
	checkersMu sync.Mutex
	checkers   = map[string]Checker{}
)

// RegisterChecker adds a named invariant check run by DB.Check. Packages call
// it from init; registering a name twice panics.
func RegisterChecker(name string, c Checker) {
	checkersMu.Lock()
	defer checkersMu.Unlock()
	if _, dup := checkers[name]; dup {
		panic("kv: checker registered twice: " + name)
	}
	checkers[name] = c
}

// Check runs bbolt's own page-level consistency check and every registered
// invariant check in one read-only transaction, and returns the problems
// found (nil when the database is consistent). Its cost is proportional to
// the size of the database.
//
// A damaged file never crashes Check: bbolt's assertion panics and memory
// faults on pages past the end are reported as a "bbolt" problem.
func (db *DB) Check(ctx context.Context) (problems []Problem, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			problems = append(problems, Problem{Check: "bbolt", Message: fmt.Sprintf("the file is damaged: reading it failed: %v", r)})
			err = nil
		}
	}()
	err = db.View(ctx, func(tx Tx) error {
		problems = CheckTx(tx)
		return nil
	})
	return problems, err
}

// CheckTx is Check inside the caller's transaction.
func CheckTx(tx Tx) []Problem {
	var problems []Problem
	if bt := BoltTx(tx); bt != nil {
		if err := walkTx(bt); err != nil {
			// bbolt's check would follow the damage into a fatal fault.
			return append(problems, Problem{Check: "bbolt", Message: "the file is damaged: " + err.Error()})
		}
		for err := range bt.Check(bolt.WithKVStringer(bolt.HexKVStringer())) {
			problems = append(problems, Problem{Check: "bbolt", Message: err.Error()})
		}
		if _, err := readFormat(bt); err != nil {
			problems = append(problems, Problem{Check: "format", Message: err.Error()})
		}
	}

	checkersMu.Lock()
	names := make([]string, 0, len(checkers))
	for n := range checkers {
		names = append(names, n)
	}
	sort.Strings(names)
	cs := make([]Checker, len(names))
	for i, n := range names {
		cs[i] = checkers[n]
	}
	checkersMu.Unlock()

	for i, c := range cs {
		name := names[i]
		func() {
			defer func() {
				if r := recover(); r != nil {
					problems = append(problems, Problem{Check: name, Message: fmt.Sprintf("checker panicked: %v", r)})
				}
			}()
			c(tx, func(msg string) { problems = append(problems, Problem{Check: name, Message: msg}) })
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
	return walkStructure(f, ps, uint64(bt.Size())/uint64(ps), uint64(bt.Cursor().Bucket().Root()))
}
