package kv_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// faultSink keeps the reads of a faulting map from being optimised away.
var faultSink byte

// A memory fault on a map of the caller's own, met in a transaction's
// function (a file it maps, cut short beneath it), is not the database's:
// the call panics with it as with any panic of the function, and the
// database serves on. Before kv told the two apart by the address, such
// a fault made the database refuse every call (ErrReadFailed).
func TestAFaultOnAMapOfYourOwnIsYourPanic(t *testing.T) {
	db, err := kv.Open(filepath.Join(t.TempDir(), "orders.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	own := kvtest.CutShortMap(t)
	readOwn := func(kv.Tx) error {
		faultSink += own[len(own)/2]
		return nil
	}
	for name, call := range map[string]func() error{
		"view":   func() error { return db.View(ctx, readOwn) },
		"update": func() error { return db.Update(ctx, readOwn) },
		"batch":  func() error { return db.Batch(ctx, readOwn) },
	} {
		t.Run(name, func(t *testing.T) {
			p, err := recovered(call)
			require.NoError(t, err)
			require.True(t, kv.IsFault(p), "the call did not panic with the fault: %v", p)
			require.False(t, db.IsFault(p), "a fault on the test's own map was taken for the file's")
			require.NoError(t, db.Err())
			require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("orders"))
				if err != nil {
					return err
				}
				return b.Put([]byte("after-"+name), []byte("v"))
			}))
		})
	}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n := 0
		c := tx.Bucket([]byte("orders")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		require.Equal(t, 3, n, "a write after each fault")
		return nil
	}))
}

// A fault on the database's own file, here cut short beneath the process
// (no powercut needed), is the file's: DB.IsFault says so, the call gets
// ErrReadFailed, and the database refuses every call.
func TestAFaultOnTheFileCutShortIsTheFiles(t *testing.T) {
	db := cutShort(t)
	t.Cleanup(func() { _ = db.Close() })

	var fault any
	err := db.View(ctx, func(tx kv.Tx) error {
		defer func() {
			if fault = recover(); fault != nil {
				panic(fault) // as a recover of the caller's should: db.IsFault
			}
		}()
		return readOrders(tx)
	})
	require.ErrorIs(t, err, kv.ErrReadFailed)
	require.True(t, db.IsFault(fault), "a fault on the file cut short was not taken for the file's: %v", fault)
	require.ErrorIs(t, db.Err(), kv.ErrReadFailed)
}

// A fault at an address in no mapping may be on the file's old map
// (bbolt remaps the file as it grows, and may have since the faulting
// transaction let go of it): it counts as the file's. A fault in a live
// map of another file does not, nor does a panic that is no fault.
func TestIsFaultWhenTheAddressIsInNoMapping(t *testing.T) {
	db, err := kv.Open(filepath.Join(t.TempDir(), "orders.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.True(t, db.IsFault(unmappedFault{}))
	require.True(t, kv.IsFault(unmappedFault{}))
	require.False(t, db.IsFault(errors.New("no fault")))
	require.False(t, db.IsFault("boom"))
}

// unmappedFault is a memory fault at an address no process maps.
type unmappedFault struct{}

func (unmappedFault) Error() string { return "unexpected fault address 0x8" }
func (unmappedFault) RuntimeError() {}
func (unmappedFault) Addr() uintptr { return 0x8 }

// recovered runs call, returning what it panicked with, or its error.
func recovered(call func() error) (p any, err error) {
	defer func() { p = recover() }()
	return nil, call()
}

// cutShort returns a database whose file holds some 200 leaf pages of
// orders, cut to its first four pages beneath the process.
func cutShort(t *testing.T) *kv.DB {
	t.Helper()
	db, path := ordersFile(t)
	require.NoError(t, os.Truncate(path, 4*int64(db.PageSize())))
	return db
}

// readOrders reads every order of ordersFile's file (a fault, once it is
// cut short).
func readOrders(tx kv.Tx) error {
	c := tx.Bucket([]byte("orders")).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		faultSink += v[0]
	}
	return nil
}

// ordersFile returns a database whose file holds some 200 leaf pages of
// orders, just opened (bbolt's freelist read from its page), and the
// file's path.
func ordersFile(t *testing.T) (*kv.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orders.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		for i := 0; err == nil && i < 4000; i++ {
			err = b.Put(fmt.Appendf(nil, "order-%05d", i), make([]byte, 200))
		}
		return err
	}))
	require.NoError(t, db.Close())
	db, err = kv.Open(path, nil)
	require.NoError(t, err)
	return db, path
}

// A fault in a write transaction, in its function or in bbolt's commit,
// is the database's refusal, and the transaction rolls back without
// reading the file: Close closes it. bbolt's Update rolled it back as
// after a failed commit, reading its list of free pages again: from the
// list's page in a process's first write, which faulted too and never
// gave the writer back (Close waited for it for ever, then returned with
// the file left open and locked); after a commit, by walking every page
// of the file in a goroutine of bbolt's own, where the fault ended the
// process ("unexpected fault address" in bbolt's freepages, as make
// powerloss met it).
func TestAFaultInAWriteRollsBackWithoutReadingTheFile(t *testing.T) {
	for _, tc := range []struct {
		name        string
		afterCommit bool // a commit in this process first: bbolt's list of free pages is no longer in the file
		inCommit    bool // the fault in bbolt's Commit, not in the function
	}{
		{name: "first write/in its function"},
		{name: "first write/in the commit", inCommit: true},
		{name: "after a commit/in its function", afterCommit: true},
		{name: "after a commit/in the commit", afterCommit: true, inCommit: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, path := ordersFile(t)
			if tc.afterCommit {
				require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
					return tx.Bucket([]byte("orders")).Put([]byte("order-00000"), []byte("paid"))
				}))
			}
			cut := func() error { return os.Truncate(path, 4*int64(db.PageSize())) }
			fn := readOrders
			if tc.inCommit {
				fn = func(tx kv.Tx) error {
					// The Put reads its leaf; the commit frees the leaf's
					// page, reading its header, after the cut.
					if err := tx.Bucket([]byte("orders")).Put([]byte("order-03999"), []byte("paid")); err != nil {
						return err
					}
					return cut()
				}
			} else {
				require.NoError(t, cut())
			}
			err := db.Update(ctx, fn)
			require.ErrorIs(t, err, kv.ErrReadFailed)
			require.ErrorIs(t, db.Err(), kv.ErrReadFailed)
			require.NoError(t, db.Close(), "the writer was not given back")
			// Closed: the file's lock is free, and this process no longer
			// holds it open. Opening it again walks the file cut short.
			_, err = kv.Open(path, &kv.Options{LockTimeout: 100 * time.Millisecond})
			var fe *kv.FileError
			require.ErrorAs(t, err, &fe)
			require.ErrorIs(t, err, kv.ErrDamaged)
		})
	}
}

// A write transaction's function that commits its bbolt.Tx itself is a
// misuse, a panic at the transaction's end as bbolt's own Update's is.
func TestAFunctionThatCommitsItsTransactionPanics(t *testing.T) {
	db, err := kv.Open(filepath.Join(t.TempDir(), "orders.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	p, err := recovered(func() error {
		return db.Update(ctx, func(tx kv.Tx) error { return kv.BoltTx(tx).Commit() })
	})
	require.NoError(t, err)
	perr, ok := p.(error)
	require.True(t, ok, "the call did not panic with an error: %v", p)
	require.ErrorContains(t, perr, "committed or rolled back its bbolt.Tx itself")
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte("orders"))
		return err
	}), "the writer was given back")
}

// A fault as bbolt begins a transaction (it reads the meta pages then,
// here cut from the file beneath the process) is the database's refusal
// too. bbolt has taken a lock by then that it never gives back (a
// write's, the writer's; a read's, the one every Begin and Close takes
// next), so Close returns at once, saying the file stays open until the
// process ends, instead of waiting for that lock for ever.
func TestAFaultAsATransactionBeginsIsRefusedAndCloseReturns(t *testing.T) {
	read := func(kv.Tx) error { return nil }
	for name, call := range map[string]func(db *kv.DB) error{
		"view":   func(db *kv.DB) error { return db.View(ctx, read) },
		"update": func(db *kv.DB) error { return db.Update(ctx, read) },
		"batch":  func(db *kv.DB) error { return db.Batch(ctx, read) },
	} {
		t.Run(name, func(t *testing.T) {
			db, path := ordersFile(t)
			require.NoError(t, os.Truncate(path, 0))
			require.ErrorIs(t, call(db), kv.ErrReadFailed)
			closed := make(chan error, 1)
			go func() { closed <- db.Close() }()
			select {
			case err := <-closed:
				require.ErrorIs(t, err, kv.ErrReadFailed)
				require.ErrorContains(t, err, "stays open, and locked, until the process ends")
			case <-time.After(30 * time.Second):
				t.Fatal("Close waits for a lock bbolt never gives back")
			}
		})
	}
}
