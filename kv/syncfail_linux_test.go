package kv_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/syncfault"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A commit whose meta page is written and whose sync then fails (a disk
// that failed the write-back, injected by strace): bbolt rolls back and
// returns the error, and yet goes on from that commit, which the disk may
// not hold. Its call gets an error matching ErrCommitUnknown and
// ErrSyncFailed (and the sync's EIO); from then on the DB refuses every
// call, reads included, and its Close writes nothing (every later sync
// would fail too, so a write at close would fail the Close). The open
// after reads what the file holds (here, the commit: strace failed the
// sync without making it, and the page cache kept the meta page) and
// serves again.
func TestSyncFailedAfterTheMetaPageRefusesEveryCall(t *testing.T) {
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		require.NoError(t, db.Err())
		require.False(t, isClosed(db.Done()), "Done while the database serves")
		err = putPaid(db, "o-2") // syncs 1 (its pages) and 2 (its meta page, failed)
		require.ErrorIs(t, err, kv.ErrCommitUnknown)
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		require.ErrorIs(t, err, syscall.EIO)
		require.ErrorContains(t, err, "after its meta page was written")

		refused := func(err error) {
			t.Helper()
			require.ErrorIs(t, err, kv.ErrSyncFailed)
			require.NotErrorIs(t, err, kv.ErrCommitUnknown, "nothing was sent")
			require.ErrorContains(t, err, "close it and open it again")
		}
		refused(db.Err())
		require.True(t, isClosed(db.Done()), "Done once the database refuses calls")
		refused(db.View(ctx, func(kv.Tx) error { t.Error("a read ran"); return nil }))
		refused(putPaid(db, "o-3"))
		refused(db.Batch(ctx, func(kv.Tx) error { t.Error("a batch ran"); return nil }))
		_, err = db.Backup(ctx, &bytes.Buffer{})
		refused(err)
		require.NoError(t, db.Close(), "a Close that wrote would meet a failed sync")
		require.ErrorIs(t, db.Err(), kv.ErrClosed)
		return
	}

	path := runPaidOrders(t, "2+")
	db := kvtest.OpenPath(t, path, nil)
	require.Equal(t, map[string]bool{"o-1": true, "o-2": true}, stored(t, db))
	require.NoError(t, putPaid(db, "o-3"))
}

// Group commit meets the failure the same way: the batch's commit fails
// after its meta page, its calls get ErrCommitUnknown and ErrSyncFailed,
// and the DB refuses calls from then on.
func TestSyncFailedInABatch(t *testing.T) {
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		err = db.Batch(ctx, func(tx kv.Tx) error { // led by this goroutine: syncs 1 and 2, failed
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte("o-2"), []byte("paid"))
		})
		require.ErrorIs(t, err, kv.ErrCommitUnknown)
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		require.ErrorIs(t, db.Err(), kv.ErrSyncFailed)
		require.NoError(t, db.Close())
		return
	}
	path := runPaidOrders(t, "2")
	db := kvtest.OpenPath(t, path, nil)
	require.Equal(t, map[string]bool{"o-1": true, "o-2": true}, stored(t, db))
}

// A commit whose first sync fails (its pages', before the meta page is
// written) leaves the file as it was: its call gets the sync's error, not
// ErrSyncFailed, and the DB goes on serving, the next write included.
func TestSyncFailedBeforeTheMetaPageLeavesTheFileAsItWas(t *testing.T) {
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		err = putPaid(db, "o-2") // sync 1, its pages', fails
		require.ErrorIs(t, err, syscall.EIO)
		require.NotErrorIs(t, err, kv.ErrSyncFailed)
		require.NotErrorIs(t, err, kv.ErrCommitUnknown)
		require.Equal(t, map[string]bool{"o-1": true}, stored(t, db))
		require.NoError(t, db.Err(), "still serving")
		require.False(t, isClosed(db.Done()), "still serving")
		require.NoError(t, putPaid(db, "o-3"))
		require.NoError(t, db.Close())
		return
	}

	path := runPaidOrders(t, "1")
	db := kvtest.OpenPath(t, path, nil)
	require.Equal(t, map[string]bool{"o-1": true, "o-3": true}, stored(t, db))
}

// runPaidOrders writes a file holding the paid order o-1 and runs t's
// test again in a child whose fdatasync calls when fail (package
// syncfault), over that file; it returns the file's path.
func runPaidOrders(t *testing.T, when string) string {
	t.Helper()
	path := paidOrders(t)
	syncfault.Run(t, when, "KV_SYNCFAIL_PATH="+path)
	return path
}

// paidOrders writes a file holding the paid order o-1, for a child test
// (KV_SYNCFAIL_PATH), and returns its path.
func paidOrders(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orders.db")
	db := kvtest.OpenPath(t, path, nil)
	kvtest.RequireBolt(t, db)
	require.NoError(t, putPaid(db, "o-1"))
	require.NoError(t, db.Close())
	return path
}

// putPaid stores the order key as paid, in a transaction of its own.
func putPaid(db *kv.DB, key string) error {
	return db.Update(context.Background(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte("paid"))
	})
}

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
