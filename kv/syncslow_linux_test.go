package kv_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/syncfault"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// bbolt writes a commit's meta page into the file before it syncs it, and
// a reader that starts in between starts from that commit: it would hand
// out what a power cut can still take away (a replayed answer, an order
// shown, a backup). kv's readers wait for such a commit's sync to return
// and then read it. strace makes the meta page's sync wait a second
// before it starts: a View and a Backup begun in that second wait, and
// read the commit only once the second has passed. (A lower bound, not a
// timing: the sync cannot return sooner than a second after the Update
// began, however slow the machine.)
func TestReadersWaitForTheCommitsSync(t *testing.T) {
	const delay = time.Second
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		before := rawTx(db)
		start := time.Now()
		synced := start.Add(delay) // the earliest the meta page's sync can return
		viewed, backedUp := make(chan error, 1), make(chan error, 1)
		go func() { viewed <- viewWhenStored(db, "o-2", synced) }() // other threads: strace slows the writer's alone
		go func() { backedUp <- backupDuring(db, before, synced) }()
		err = putPaid(db, "o-2") // syncs 1 (its pages) and 2 (its meta page, slow)
		require.NoError(t, err)
		require.NoError(t, <-viewed)
		require.NoError(t, <-backedUp)
		return
	}
	syncfault.Delay(t, "2", delay, "KV_SYNCFAIL_PATH="+paidOrders(t))
}

// viewWhenStored reads key in View after View until one finds it, and
// fails unless that View began before synced (so, as it found the key,
// once the commit's meta page was in the file and before its sync could
// return) and read it no sooner than synced.
func viewWhenStored(db *kv.DB, key string, synced time.Time) error {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		began := time.Now()
		found := false
		err := db.View(ctx, func(tx kv.Tx) error {
			b := tx.Bucket([]byte("orders"))
			found = b != nil && b.Get([]byte(key)) != nil
			if found && time.Now().Before(synced) {
				return errors.New("a View read the commit before its sync returned")
			}
			return nil
		})
		if err != nil || found {
			if err == nil && !began.Before(synced) {
				return errors.New("the View that found the commit began after its sync could have returned: the test proved nothing")
			}
			return err
		}
	}
	return errors.New("no View found " + key)
}

// backupDuring waits for the commit's meta page to be in the file (a raw
// bbolt reader, which kv does not hold back, starts from a transaction
// other than before, the last one before the commit), then takes a
// backup. The backup must wait for the commit's sync (its first byte no
// sooner than synced), and hold the commit.
func backupDuring(db *kv.DB, before int, synced time.Time) error {
	for rawTx(db) == before {
		runtime.Gosched()
	}
	w := &firstWrite{}
	if _, err := db.Backup(ctx, w); err != nil {
		return err
	}
	if w.first.Before(synced) {
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

// A write that was on its way while a commit's sync failed after its
// meta page (it came in before the DB refused calls, and waited for the
// writer's turn) is refused once it has the turn: it would commit on top
// of the commit the disk may not hold, and be answered as done. The
// payments example met it: the first retention sweep's commit failed, and
// the create behind it was answered 201.
func TestAWriteQueuedBehindAFailedSyncIsRefused(t *testing.T) {
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("KV_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		defer func() { require.NoError(t, db.Close()) }()
		before := rawTx(db)
		queued := make(chan error, 1)
		waiting := make(chan bool, 1)
		go func() {
			for rawTx(db) == before { // the meta page is in the file, its sync under way
				runtime.Gosched()
			}
			waiting <- db.Err() == nil // the write below is not refused at its door
			queued <- putPaid(db, "o-3")
		}()
		err = putPaid(db, "o-2") // syncs 1 (its pages) and 2 (its meta page, failed after three seconds)
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		require.True(t, <-waiting, "the write came in before the refusal")
		err = <-queued
		require.ErrorIs(t, err, kv.ErrSyncFailed)
		require.NotErrorIs(t, err, kv.ErrCommitUnknown, "the queued write is refused, not committed")
		require.ErrorContains(t, err, "close it and open it again")
		return
	}
	path := paidOrders(t)
	syncfault.FailAfter(t, "2", 3*time.Second, "KV_SYNCFAIL_PATH="+path) // a wide window: the queued write must come in before the refusal
	db := kvtest.OpenPath(t, path, nil)
	require.Equal(t, map[string]bool{"o-1": true, "o-2": true}, stored(t, db), "o-3 was not written")
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

// firstWrite buffers a backup, noting when its first byte came.
type firstWrite struct {
	buf   bytes.Buffer
	first time.Time
}

func (w *firstWrite) Write(p []byte) (int, error) {
	if w.first.IsZero() {
		w.first = time.Now()
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
