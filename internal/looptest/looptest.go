package looptest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/syncfault"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A Refusal makes a database refuse every call, as a loop's tests meet
// it: Closed closes it, ReadFault makes a read fault on it (a page the
// disk could not read: kv.ErrReadFailed).
type Refusal struct {
	Name   string
	Refuse func(t *testing.T, db *kv.DB)
	Err    error // what the loop ends with
	// Bolt is set for a refusal only a bbolt file makes (a read fault on
	// its memory map): EndsWhen skips it on other backends.
	Bolt bool
}

// Refusals are the refusals a loop must end on at once (kv.DB.Done), the
// failed sync aside (EndsWhenSyncFails).
var Refusals = []Refusal{
	{Name: "closed", Refuse: func(t *testing.T, db *kv.DB) { require.NoError(t, db.Close()) }, Err: kv.ErrClosed},
	{Name: "read fault", Refuse: func(t *testing.T, db *kv.DB) {
		err := db.View(context.Background(), func(kv.Tx) error { panic(FaultOn(db)) })
		require.ErrorIs(t, err, kv.ErrReadFailed)
	}, Err: kv.ErrReadFailed, Bolt: true},
}

// Fault is a panic value kv takes for a memory fault on its file
// (kv.DB.IsFault): a runtime error with a faulting address in the file's
// memory map (FaultOn).
type Fault struct{ At uintptr }

// FaultOn returns a Fault at the start of the memory map of db, a bbolt
// file: the address of its first meta page.
func FaultOn(db *kv.DB) Fault { return Fault{At: db.Bolt().Info().Data} }

func (f Fault) Error() string {
	return fmt.Sprintf("unexpected fault address %#x (looptest.Fault)", f.At)
}
func (Fault) RuntimeError()   {}
func (f Fault) Addr() uintptr { return f.At }

// EndsWhen starts run (a loop's Run over db, which passes each pass's
// error to onPass) and requires that a first pass succeeds, and that once
// r makes db refuse calls run returns r.Err, within a generous bound,
// after onPass has had it. A run that polls once an hour shows that the
// loop ends on kv.DB.Done, not at its next poll.
func EndsWhen(t *testing.T, r Refusal, db *kv.DB, run func(ctx context.Context, onPass func(error)) error) {
	t.Helper()
	if r.Bolt {
		kvtest.RequireBolt(t, db)
	}
	passes := make(chan error, 100)
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), func(err error) {
			select {
			case passes <- err:
			default:
			}
		})
	}()
	require.NoError(t, <-passes, "a pass over the open database")
	r.Refuse(t, db)
	select {
	case err := <-done:
		require.ErrorIs(t, err, r.Err)
	case <-time.After(30 * time.Second):
		t.Fatalf("Run went on after the database refused calls (%s)", r.Name)
	}
	var last error
	for len(passes) > 0 {
		last = <-passes
	}
	require.ErrorIs(t, last, r.Err, "the pass callback had the error")
}

// EndsWhenSyncFails requires that a loop ends, with an error matching
// kv.ErrSyncFailed, at the pass whose commit's sync failed after its meta
// page was written (the database refuses every call from then on: no
// later pass could do anything), and that the pass callback had that
// error. It must be called from a top-level test: prepare writes into a
// new bbolt file at path the work the loop's first pass commits (an event
// to publish, a record to sweep, an intent to finish) and closes it; the
// test then runs again in a child process (package syncfault) whose
// second fdatasync, the first commit's meta page's, fails, and there run
// runs the loop over the file, opened, on the calling goroutine. A
// loop whose passes commit on goroutines of their own, which the child's
// count cannot follow, has run make that first commit itself, before the
// loop starts.
func EndsWhenSyncFails(t *testing.T, prepare func(path string), run func(ctx context.Context, db *kv.DB, onPass func(error)) error) {
	t.Helper()
	if !syncfault.Child() {
		path := filepath.Join(t.TempDir(), "loop.db")
		prepare(path)
		syncfault.Run(t, "2", pathEnv+"="+path)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := kv.Open(os.Getenv(pathEnv), nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	var last error
	err = run(ctx, db, func(err error) { last = err })
	require.NoError(t, ctx.Err(), "the loop went on until its context ended")
	require.ErrorIs(t, err, kv.ErrSyncFailed)
	require.ErrorIs(t, last, kv.ErrSyncFailed, "the pass callback had the error")
}

// pathEnv passes the prepared file to the child of EndsWhenSyncFails.
const pathEnv = "ONCEKV_LOOPTEST_PATH"
