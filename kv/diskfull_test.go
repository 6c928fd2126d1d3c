package kv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/diskfull"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A disk that fills up under a durable database: every write that needs
// space fails with an error matching syscall.ENOSPC and leaves nothing
// behind (alone or in a batch), reads go on, and writes resume once space
// returns, without a restart. The file checks clean throughout and after a
// reopen, holding exactly the writes that were answered nil.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := diskfull.Mount(t, 1<<20)
	path := filepath.Join(dir, "full.db")
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	value := make([]byte, 8<<10) // two pages a write: the file soon needs room
	put := func(key string) error {
		return db.Update(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), value)
		})
	}
	written := map[string]bool{}
	require.NoError(t, put("before"))
	written["before"] = true

	free := diskfull.Fill(t, dir, 0)
	var refused []string
	for i := 0; len(refused) < 3; i++ { // pages bbolt freed may take a write or two first
		key := fmt.Sprintf("solo-%03d", i)
		if err := put(key); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			refused = append(refused, key)
			continue
		}
		require.Less(t, i, 64, "a full disk took 64 writes of 8 KiB")
		written[key] = true
	}
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			key := fmt.Sprintf("batch-%d", i)
			errs[i] = db.Batch(ctx, func(tx kv.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("orders"))
				if err != nil {
					return err
				}
				return b.Put([]byte(key), value)
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil { // a batch small enough for the pages bbolt freed
			written[fmt.Sprintf("batch-%d", i)] = true
			continue
		}
		require.ErrorIs(t, err, syscall.ENOSPC)
		refused = append(refused, fmt.Sprintf("batch-%d", i))
	}
	require.Equal(t, written, stored(t, db), "reads go on, and a refused write left nothing")
	kvtest.MustCheck(t, db)

	free()
	require.NoError(t, put("after"), "writes resume once space returns")
	written["after"] = true
	require.Equal(t, written, stored(t, db))

	// A service stopping on a full disk: Close's last commit (bbolt's
	// freelist, written at close) needs a page. It mostly finds one among
	// those earlier commits freed (or a refused commit's pages past the
	// file's end, which the disk already holds); if not, Close says so and
	// closes all the same, and the next open rebuilds the list. Either
	// way, the file reopens with every write answered nil.
	free = diskfull.Fill(t, dir, 0)
	for i, size := 0, len(value); size > 0; i++ { // until the file has no free page left
		key := fmt.Sprintf("last-%03d", i)
		value = value[:size]
		if err := put(key); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			size /= 2
			continue
		}
		require.Less(t, i, 256, "a full disk took 256 writes")
		written[key] = true
	}
	if err := db.Close(); err != nil {
		require.ErrorIs(t, err, syscall.ENOSPC)
		require.ErrorContains(t, err, "freelist")
	}
	require.ErrorIs(t, db.Update(ctx, func(kv.Tx) error { return nil }), kv.ErrClosed)
	free()

	db = kvtest.OpenPath(t, path, nil)
	require.Equal(t, written, stored(t, db), "the reopened file holds exactly the writes answered nil")
	kvtest.MustCheck(t, db)
	for _, key := range refused {
		require.NoError(t, put(key))
	}
}

// After a commit fails for lack of space, bbolt rebuilds its list of free
// pages by reading the whole file. The commits that follow are refused
// without trying, their functions never run, with an error that matches
// ENOSPC and says until when (kv.NoSpaceError), so that a full disk does
// not keep the writer failing; reads go on. A commit is tried again as
// soon as space returns, or once the pause has passed; one that commits
// ends the pause.
func TestFullDiskPausesCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := diskfull.Mount(t, 1<<20)
	db, err := kv.Open(filepath.Join(dir, "full.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	kv.SetNoSpaceWait(db, time.Hour, time.Hour) // until space returns
	value := make([]byte, 8<<10)
	ran := 0
	write := func(tx kv.Tx, key string) error {
		ran++
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), value)
	}
	put := func(key string) error { return db.Update(ctx, func(tx kv.Tx) error { return write(tx, key) }) }
	// fillUp fills the disk and writes until a commit fails for lack of
	// space, which it returns.
	fills := 0
	fillUp := func() (free func(), failed error) {
		free = diskfull.Fill(t, dir, 0)
		fills++
		for i := 0; ; i++ {
			require.Less(t, i, 64, "a full disk took 64 writes of 8 KiB")
			if err := put(fmt.Sprintf("fill-%d-%03d", fills, i)); err != nil {
				return free, err
			}
		}
	}
	require.NoError(t, put("before"))
	free, failed := fillUp()
	require.ErrorIs(t, failed, syscall.ENOSPC)
	require.NotErrorAs(t, failed, new(*kv.NoSpaceError), "the first is the commit's own failure")

	ran = 0
	for i := range 3 {
		err := put(fmt.Sprint("paused-", i))
		require.ErrorIs(t, err, syscall.ENOSPC)
		var nse *kv.NoSpaceError
		require.ErrorAs(t, err, &nse)
		require.ErrorContains(t, err, "write refused without trying")
		require.WithinDuration(t, time.Now().Add(time.Hour), nse.Until, time.Minute)
	}
	err = db.Batch(ctx, func(tx kv.Tx) error { return write(tx, "paused-batch") })
	require.ErrorAs(t, err, new(*kv.NoSpaceError))
	require.Zero(t, ran, "a refused write's function never ran")
	require.True(t, stored(t, db)["before"], "reads go on")
	require.NoError(t, db.Err(), "a full disk is no failure of the database")

	free()
	require.NoError(t, put("after"), "space returned: the next commit is tried")
	require.Positive(t, ran)
	require.NoError(t, put("after-2"), "and it ended the pause")

	// A pause that has passed: the next commit is tried, and fails on
	// the disk, full again, with its own error.
	kv.SetNoSpaceWait(db, 0, 0)
	free, failed = fillUp()
	require.NotErrorAs(t, failed, new(*kv.NoSpaceError))
	ran = 0
	err = put("tried")
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.NotErrorAs(t, err, new(*kv.NoSpaceError), "tried, not refused")
	require.Positive(t, ran)
	free()
	require.NoError(t, put("last"))
	kvtest.MustCheck(t, db)
}

// A transaction function's own ENOSPC (a file it wrote on another disk)
// begins no pause: only a commit's does.
func TestFunctionsNoSpaceIsNotTheCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kvtest.Open(t, nil)
	kvtest.RequireBolt(t, db)
	kv.SetNoSpaceWait(db, time.Hour, time.Hour)
	theirs := &os.PathError{Op: "write", Path: "/elsewhere/report.csv", Err: syscall.ENOSPC}
	require.ErrorIs(t, db.Update(ctx, func(kv.Tx) error { return theirs }), theirs)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte("orders"))
		return err
	}))
}

// stored returns the keys of the orders bucket.
func stored(t *testing.T, db *kv.DB) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	require.NoError(t, db.View(context.Background(), func(tx kv.Tx) error {
		b := tx.Bucket([]byte("orders"))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys[string(k)] = true
		}
		return nil
	}))
	return keys
}

// A backup onto a disk that fills up part way fails with an error matching
// syscall.ENOSPC and leaves nothing: no copy, no temporary file.
func TestBackupOntoAFullDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	kvtest.RequireBolt(t, db)
	value := make([]byte, 64<<10)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		for i := 0; err == nil && i < 16; i++ {
			err = b.Put(fmt.Appendf(nil, "o-%d", i), value)
		}
		return err
	}))
	dir := diskfull.Mount(t, 512<<10) // room for half the file

	_, err := db.BackupFile(ctx, filepath.Join(dir, "copy.db"))
	require.ErrorIs(t, err, syscall.ENOSPC)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no copy and no temporary file left")
}
