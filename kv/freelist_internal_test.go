package kv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// lastMeta returns the newer of the file's two meta pages.
func lastMeta(t *testing.T, path string) boltMeta {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	m0, ok := parseMeta(raw)
	require.True(t, ok, "first meta page")
	metas := []boltMeta{m0}
	if m1, ok := parseMeta(raw[m0.pageSize:]); ok {
		metas = append(metas, m1)
	}
	return newest(metas)
}

func putValues(t *testing.T, db *DB, n int) {
	t.Helper()
	require.NoError(t, db.Update(context.Background(), func(tx Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("values"))
		if err != nil {
			return err
		}
		for i := range n {
			if err := b.Put(fmt.Appendf(nil, "k%06d", i), make([]byte, 1024)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// crash closes db's bbolt file without DB.Close, as a killed process
// leaves it: the last commit's meta page is the file's.
func crash(t *testing.T, db *DB) {
	t.Helper()
	require.NoError(t, db.backend.Close())
	unregister(db)
}

// While open, commits leave bbolt's freelist out of the file unless
// SyncFreelist is set; Close writes it either way. A file moves from one
// setting to the other, its data intact, and bbolt's own check passes.
func TestFreelistIsWrittenAtCloseOrAtEveryCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	for i, sync := range []bool{false, true, false, true} {
		db, err := Open(path, &Options{NoSync: true, SyncFreelist: sync})
		require.NoError(t, err)
		putValues(t, db, 100*(i+1))
		if sync {
			require.NotEqual(t, noFreelist, lastMeta(t, path).freelist, "open %d: SyncFreelist writes it at every commit", i)
		} else {
			require.Equal(t, noFreelist, lastMeta(t, path).freelist, "open %d: commits leave it out", i)
		}
		require.NoError(t, db.View(context.Background(), func(tx Tx) error {
			require.NotNil(t, tx.Bucket([]byte("values")).Get([]byte("k000099")), "written by the first open")
			for err := range BoltTx(tx).Check() {
				return err
			}
			return nil
		}))
		require.NoError(t, db.Close())
		require.NotEqual(t, noFreelist, lastMeta(t, path).freelist, "open %d: Close writes it", i)
	}
}

// After a crash the file has no freelist: the pages freed before it are
// found again at the next open (bbolt walks the file) and reused, so the
// file does not grow when as much data comes back.
func TestFreedPagesAreFoundAgainAfterACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := Open(path, &Options{NoSync: true})
	require.NoError(t, err)
	putValues(t, db, 2000)
	require.NoError(t, db.Update(context.Background(), func(tx Tx) error {
		return BoltTx(tx).DeleteBucket([]byte("values"))
	}))
	crash(t, db)
	high := lastMeta(t, path).pgid
	require.Equal(t, noFreelist, lastMeta(t, path).freelist)

	db, err = Open(path, &Options{NoSync: true})
	require.NoError(t, err)
	require.Greater(t, db.Bolt().Stats().FreePageN, 900, "the 2000 values' pages are free again")
	putValues(t, db, 2000)
	require.NoError(t, db.Close())
	require.LessOrEqual(t, lastMeta(t, path).pgid, high, "the freed pages were reused")
}

// The walk that guards the open of a file without a freelist is skipped
// while a writer holds the file, which bbolt locks exclusively: it would
// read pages changing under it.
func TestLockedForReadingSeesAWriter(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("bbolt does not lock with flock here")
	}
	path := filepath.Join(t.TempDir(), "f.db")
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, ok := lockedForReading(f)
	require.False(t, ok, "a writer holds the file")
	require.NoError(t, b.Close())
	unlock, ok := lockedForReading(f)
	require.True(t, ok, "nobody holds it")
	// While the shared lock is held, a writer cannot take the file.
	_, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 50e6})
	require.Error(t, err)
	unlock()
	b, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: 50e6})
	require.NoError(t, err)
	require.NoError(t, b.Close())
}
