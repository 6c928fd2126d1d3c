package kv_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

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
		c := tx.Bucket([]byte("orders")).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			faultSink += v[0]
		}
		return nil
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
	require.NoError(t, os.Truncate(path, 4*int64(db.PageSize())))
	return db
}

// A fault in a write transaction is the database's refusal, and Close
// still returns: bbolt's rollback of that transaction reads the file again
// (its free pages), faults there too and never gives the writer back, and
// Close, which waits for the writer, waited for ever.
func TestCloseReturnsAfterAFaultInAWrite(t *testing.T) {
	db := cutShort(t)
	err := db.Update(ctx, func(tx kv.Tx) error {
		c := tx.Bucket([]byte("orders")).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			faultSink += v[0]
		}
		return nil
	})
	require.ErrorIs(t, err, kv.ErrReadFailed)
	err = db.Close()
	require.ErrorIs(t, err, kv.ErrReadFailed)
}
