package kv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

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
