package kv_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
)

// A write whose function does not return kept Close waiting for ever.
// CloseContext gives up when its context ends, says why, and refuses new
// calls at once; the database closes once the write ends (which commits),
// and a Close after waits for that and returns with it.
func TestCloseContextBoundsTheWaitForAHeldWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "held.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	release, held := make(chan struct{}), make(chan struct{})
	heldOnce := sync.OnceFunc(func() { close(held) }) // once: the rerun build runs the function twice
	done := make(chan error, 1)
	go func() {
		done <- db.Update(ctx, func(tx kv.Tx) error {
			heldOnce()
			<-release
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte("o-1"), []byte("paid"))
		})
	}()
	testwait.Receive(t, held, "the writer held")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = db.CloseContext(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "the writer held for")
	require.ErrorIs(t, db.Update(ctx, func(kv.Tx) error { return nil }), kv.ErrClosed, "closed to new calls")
	select {
	case <-done:
		t.Fatal("the held write ended before it was let go")
	default:
	}

	close(release)
	require.NoError(t, testwait.Receive(t, done, "the held write's answer"), "the write that held the writer commits")
	require.NoError(t, db.Close(), "a Close after waits for the first close's end")

	reopened, err := kv.Open(path, &kv.Options{LockTimeout: time.Second}) // the file's lock is let go
	require.NoError(t, err)
	defer func() { require.NoError(t, reopened.Close()) }()
	require.NoError(t, reopened.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("orders"))
		require.NotNil(t, b)
		require.Equal(t, "paid", string(b.Get([]byte("o-1"))))
		return nil
	}))
}

// A database closed answers every later close with the first one's
// answer, whatever the context; one closed with a context already ended
// closes all the same, and its file opens again.
func TestCloseContextAfterAndWithAnEndedContext(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "idle.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.CloseContext(ended), "already closed")
	require.NoError(t, db.Close())

	path := filepath.Join(t.TempDir(), "ended.db")
	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	if err := db.CloseContext(ended); err != nil {
		require.ErrorIs(t, err, context.Canceled) // it may answer before the close ends
	}
	require.NoError(t, db.Close())
	again, err := kv.Open(path, &kv.Options{LockTimeout: time.Second})
	require.NoError(t, err)
	require.NoError(t, again.Close())
}
