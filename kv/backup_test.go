package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// putPair writes key i into buckets a and b in one transaction: a copy
// that holds one without the other has split a transaction.
func putPair(tx kv.Tx, i string) error {
	for _, name := range []string{"a", "b"} {
		b, err := tx.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return err
		}
		if err := b.Put([]byte(i), []byte("v"+i)); err != nil {
			return err
		}
	}
	return nil
}

// pairs reads the keys of bucket a, checking that b holds the same.
func pairs(t *testing.T, db *kv.DB) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		clear(got) // a read run again (the rerun build) starts afresh
		a, b := tx.Bucket([]byte("a")), tx.Bucket([]byte("b"))
		c := a.Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			require.Equal(t, v, b.Get(k), "pair %s split", k)
			got[string(k)] = true
			n++
		}
		c = b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n--
		}
		require.Zero(t, n, "b holds keys a does not")
		return nil
	}))
	return got
}

// hookWriter calls once, at its first write, before passing writes on.
type hookWriter struct {
	w    io.Writer
	once sync.Once
	hook func()
}

func (h *hookWriter) Write(p []byte) (int, error) {
	h.once.Do(h.hook)
	return h.w.Write(p)
}

// A backup is one read transaction's copy: what commits while it is being
// written (a pair added, a pair deleted) is in the original and not in
// the copy, every pair committed before it is whole in the copy, and the
// copy opens as a database that passes the check and takes writes.
func TestBackupIsOneTransactionsCopy(t *testing.T) {
	t.Parallel()
	// A mapping larger than the file: a commit while the backup's read
	// transaction is open never has to remap (which would wait for it).
	db := kvtest.Open(t, &kv.Options{NoSync: true, InitialMmapSize: 64 << 20})
	const n = 2000
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range n {
			if err := putPair(tx, fmt.Sprintf("%05d", i)); err != nil {
				return err
			}
		}
		return nil
	}))

	var copied bytes.Buffer
	w := &hookWriter{w: &copied, hook: func() {
		done := make(chan error, 1)
		go func() {
			done <- db.Update(ctx, func(tx kv.Tx) error {
				if err := putPair(tx, "during"); err != nil {
					return err
				}
				for _, name := range []string{"a", "b"} {
					if err := tx.Bucket([]byte(name)).Delete([]byte("00000")); err != nil {
						return err
					}
				}
				return nil
			})
		}()
		require.NoError(t, testwait.Receive(t, done, "a commit while the backup runs"))
	}}
	size, err := db.Backup(ctx, w)
	require.NoError(t, err)
	require.Equal(t, int64(copied.Len()), size)

	path := filepath.Join(t.TempDir(), "copy.db")
	require.NoError(t, os.WriteFile(path, copied.Bytes(), 0o600))
	restored := kvtest.OpenPath(t, path, nil) // checked when the test ends
	got := pairs(t, restored)
	require.Len(t, got, n)
	require.True(t, got["00000"], "deleted after the backup began")
	require.False(t, got["during"], "committed after the backup began")

	now := pairs(t, db)
	require.True(t, now["during"])
	require.False(t, now["00000"])

	require.NoError(t, restored.Update(ctx, func(tx kv.Tx) error { return putPair(tx, "after") }))
	require.True(t, pairs(t, restored)["after"])
}

// BackupFile writes a whole copy or nothing: it never replaces a file,
// and a cancelled copy leaves no file (and no temporary one) behind.
func TestBackupFileWritesAWholeCopyOrNothing(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true})
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return putPair(tx, "x") }))
	dir := t.TempDir()

	path := filepath.Join(dir, "copy.db")
	n, err := db.BackupFile(ctx, path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, n, fi.Size())
	if runtime.GOOS != "windows" { // which has no such permissions
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}

	// An existing file, or a link to one, is never replaced.
	_, err = db.BackupFile(ctx, path)
	require.ErrorIs(t, err, os.ErrExist)
	other := filepath.Join(dir, "other")
	require.NoError(t, os.WriteFile(other, []byte("keep"), 0o600))
	link := filepath.Join(dir, "link.db")
	want := []string{"copy.db", "other", "link.db"}
	if err := os.Symlink(other, link); err != nil {
		require.Equal(t, "windows", runtime.GOOS, "%v", err) // where links need a privilege
		want = want[:2]
	} else if _, err := os.Lstat(link); err != nil {
		want = want[:2] // Wine answers a link with nil and makes none
	} else {
		_, err = db.BackupFile(ctx, link)
		require.ErrorIs(t, err, os.ErrExist)
	}
	kept, err := os.ReadFile(other)
	require.NoError(t, err)
	require.Equal(t, "keep", string(kept))

	// A cancelled copy: an error, and nothing left behind.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = db.BackupFile(cancelled, filepath.Join(dir, "cancelled.db"))
	require.ErrorIs(t, err, context.Canceled)
	// Cancelled once the copy is under way.
	mid, cancelMid := context.WithCancel(ctx)
	var sink bytes.Buffer
	_, err = db.Backup(mid, &hookWriter{w: &sink, hook: cancelMid})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, sink.Len(), db.PageSize()*3, "the copy stopped")

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.ElementsMatch(t, want, names, "no temporary file left")

	restored := kvtest.OpenPath(t, path, nil)
	require.True(t, pairs(t, restored)["x"])
}

// A closed database has nothing to copy.
func TestBackupOfAClosedDatabase(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "a.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = db.Backup(ctx, io.Discard)
	require.ErrorIs(t, err, kv.ErrClosed)
	_, err = db.BackupFile(ctx, filepath.Join(t.TempDir(), "copy.db"))
	require.ErrorIs(t, err, kv.ErrClosed)
	require.False(t, errors.Is(err, os.ErrExist))
}
