package kv_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/syncfault"
	"github.com/oncekv/oncekv/kv"
)

// bbolt writes a commit's meta page into the file before it syncs it, and
// a reader that starts in between starts from that commit: it would hand
// out what a power cut can still take away (a replayed answer, an order
// shown, a backup). kv's readers wait for such a commit's sync to return
// and then read it. strace makes the meta page's sync wait a second
// before it starts: a View and a Backup begun in that second wait, and
// what they read was synced.
func TestReadersWaitForTheCommitsSync(t *testing.T) {
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		var synced atomic.Bool // set by bbolt once the meta page's sync has returned
		committing := make(chan struct{})
		begin := sync.OnceFunc(func() { close(committing) }) // the rerun build runs the function twice
		viewed, backedUp := make(chan error, 1), make(chan error, 1)
		go func() { viewed <- viewWhenStored(db, "o-2", &synced) }() // other threads: strace slows the writer's alone
		before := rawTx(db)
		go func() { <-committing; backedUp <- backupDuring(db, before, &synced) }()

		err = db.Update(ctx, func(tx kv.Tx) error { // syncs 1 (its pages) and 2 (its meta page, slow)
			kv.BoltTx(tx).OnCommit(func() { synced.Store(true) })
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			begin()
			return b.Put([]byte("o-2"), []byte("paid"))
		})
		require.NoError(t, err)
		require.NoError(t, <-viewed)
		require.NoError(t, <-backedUp)
		return
	}
	syncfault.Delay(t, "2", time.Second, "KV_SYNCFAIL_PATH="+paidOrders(t))
}

// viewWhenStored reads key in View after View until one finds it, and
// fails unless that View began before the commit's sync returned (it met
// the unsynced commit) and read it only after.
func viewWhenStored(db *kv.DB, key string, synced *atomic.Bool) error {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		early := !synced.Load()
		found := false
		err := db.View(ctx, func(tx kv.Tx) error {
			b := tx.Bucket([]byte("orders"))
			found = b != nil && b.Get([]byte(key)) != nil
			if found && !synced.Load() {
				return errors.New("a View read the commit before its sync returned")
			}
			return nil
		})
		if err != nil || found {
			if err == nil && !early {
				return errors.New("no View began while the commit's sync was under way: the test proved nothing")
			}
			return err
		}
	}
	return errors.New("no View found " + key)
}

// backupDuring waits for the commit's meta page to be in the file (a raw
// bbolt reader, which kv does not hold back, starts from a transaction
// other than before, the last one before the commit), then takes
// a backup. The backup must begin before the commit's sync returns, wait
// for it, and hold the commit.
func backupDuring(db *kv.DB, before int, synced *atomic.Bool) error {
	for rawTx(db) == before {
		runtime.Gosched()
	}
	if synced.Load() {
		return errors.New("the commit's sync returned before the backup began: the test proved nothing")
	}
	w := &firstWrite{synced: synced}
	if _, err := db.Backup(ctx, w); err != nil {
		return err
	}
	if !w.afterSync {
		return errors.New("a backup began copying before the commit's sync returned")
	}
	path := filepath.Join(os.TempDir(), "backup-during-sync.db")
	if err := os.WriteFile(path, w.buf.Bytes(), 0o600); err != nil {
		return err
	}
	defer func() { _ = os.Remove(path) }()
	b, err := kv.Open(path, &kv.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	return b.View(ctx, func(tx kv.Tx) error {
		if o := tx.Bucket([]byte("orders")); o == nil || o.Get([]byte("o-2")) == nil {
			return errors.New("the backup does not hold the commit it waited for")
		}
		return nil
	})
}

// rawTx is the transaction a raw bbolt reader of db starts from.
func rawTx(db *kv.DB) int {
	t, err := db.Bolt().Begin(false)
	if err != nil {
		return -1
	}
	defer func() { _ = t.Rollback() }()
	return t.ID()
}

// firstWrite buffers a backup, noting whether its first byte came after
// the commit's sync.
type firstWrite struct {
	buf       bytes.Buffer
	synced    *atomic.Bool
	started   bool
	afterSync bool
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if !w.started {
		w.started, w.afterSync = true, w.synced.Load()
	}
	return w.buf.Write(p)
}

var _ io.Writer = (*firstWrite)(nil)

// A reader that waits for a commit whose sync then fails (strace fails
// the meta page's sync after a second) reads nothing: it gets the DB's
// refusal, as every call after that failure does.
func TestReaderWaitingForAFailedSyncIsRefused(t *testing.T) {
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		before := rawTx(db)
		viewed := make(chan error, 1)
		go func() {
			for rawTx(db) == before { // the meta page is in the file, its sync under way
				runtime.Gosched()
			}
			viewed <- db.View(ctx, func(kv.Tx) error { return errors.New("a View read a commit whose sync failed") })
		}()
		err = putPaid(db, "o-2") // syncs 1 (its pages) and 2 (its meta page, failed after a second)
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		err = <-viewed
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		require.ErrorContains(t, err, "close it and open it again")
		return
	}
	syncfault.FailAfter(t, "2", time.Second, "KV_SYNCFAIL_PATH="+paidOrders(t))
}
