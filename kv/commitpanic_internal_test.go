package kv

import (
	"context"
	"io"
	"log"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// commitPanicLogger is bbolt's logger, panicking as a commit begins (bbolt
// logs it from inside Tx.Commit) while armed: a panic inside bbolt's
// Commit, which nothing else lets a test raise.
type commitPanicLogger struct {
	*bolt.DefaultLogger
	armed atomic.Bool
}

func (l *commitPanicLogger) Debugf(format string, v ...any) {
	if l.armed.Load() && strings.HasPrefix(format, "Committing transaction") {
		panic("a panic inside bbolt's Commit")
	}
}

// A panic inside bbolt's Commit rolls the transaction back without reading
// the file, and the writer is given back: the DB serves on. bbolt's list of
// free pages in memory may then lack pages the commit took, so Close
// leaves the list out of the file (the next open builds it from the
// pages) instead of writing a short one, and the file checks clean.
func TestAPanicInBboltsCommitLeavesTheFreelistOutAtClose(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f.db")
	lg := &commitPanicLogger{DefaultLogger: &bolt.DefaultLogger{Logger: log.New(io.Discard, "", 0)}}
	o := (&Options{NoSync: true}).withDefaults()
	b, err := boltOpen(path, o)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	b, err = bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, Logger: lg})
	require.NoError(t, err)
	db, err := newBoltDB(b, path, o)
	require.NoError(t, err)
	putValues(t, db, 100)

	lg.armed.Store(true)
	p := func() (p any) {
		defer func() { p = recover() }()
		_ = db.Update(ctx, func(tx Tx) error {
			return tx.Bucket([]byte("values")).Put([]byte("k000000"), []byte("lost"))
		})
		return nil
	}()
	lg.armed.Store(false)
	require.Equal(t, "a panic inside bbolt's Commit", p)
	require.True(t, db.backend.(*boltBackend).freelistShort.Load())
	require.NoError(t, db.Err(), "not a fault: the DB serves on")

	putValues(t, db, 200) // the writer was given back
	require.NoError(t, db.View(ctx, func(tx Tx) error {
		require.Len(t, tx.Bucket([]byte("values")).Get([]byte("k000000")), 1024, "the panicked commit's Put rolled back")
		return nil
	}))
	require.NoError(t, db.Close())
	require.Equal(t, noFreelist, lastMeta(t, path).freelist, "Close left bbolt's list out")

	db, err = Open(path, &Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.View(ctx, func(tx Tx) error {
		for err := range BoltTx(tx).Check() {
			return err
		}
		return nil
	}))
	require.NoError(t, db.Close())
}
