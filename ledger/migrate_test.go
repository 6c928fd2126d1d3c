package ledger_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/oldformat"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// A file of format 1 is migrated when first opened for writing: every
// record moves to the log in bounded batches and answers exactly as before
// (replays byte for byte, a live claim still in progress, a damaged record
// still an error, expired records still absent), the format becomes 3, and
// a read-only open before the migration is refused with a message naming
// `oncekv migrate` instead of misreading the file.
func TestFormatOneFileIsMigrated(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	const n = 2300 // three migration batches
	oldformat.WriteFormat1(t, path, func(l *ledger.Ledger, in *inbox.Inbox) {
		for i := range n {
			_, err := l.Do(ctx, req(fmt.Sprint(i), "x"), order(fmt.Sprint(i), nil))
			require.NoError(t, err)
		}
		_, err := l.Claim(ctx, req("claimed", "x"))
		require.NoError(t, err)
		for i := range 10 {
			_, err := in.Handle(ctx, "billing", fmt.Sprint(i), func(kv.Tx) error { return nil })
			require.NoError(t, err)
		}
	})

	ro, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	_, err = ledger.New(ro, nil)
	require.ErrorIs(t, err, recstore.ErrNeedsMigration)
	require.ErrorContains(t, err, "oncekv migrate --db "+path)
	require.NoError(t, ro.Close())

	db, l, in := openService(t, path)
	st := l.Stats()
	require.Equal(t, "log", st.Layout)
	require.Equal(t, n+1, st.Records)
	require.Equal(t, int64(n+1)*ledger.DirectoryBytesPerRecord, st.DirectoryBytes)

	requireReplays(t, l, n)
	_, err = l.Do(ctx, req("claimed", "x"), mustNotRun(t))
	require.ErrorIs(t, err, ledger.ErrInProgress, "a live claim moved with its lease")
	for i := range 10 {
		requireDuplicate(t, in, fmt.Sprint(i))
	}
	require.Equal(t, uint32(recstore.TailFormat), storedFormat(t, db))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Nil(t, keyspace.New("ledger").Bucket(tx), "the keyed buckets are gone")
		require.Nil(t, keyspace.New("ledger.expiry").Bucket(tx))
		return nil
	}))
	requireClean(t, db)
}

// A file of format 2 (every entry in the log, no tail) is read as it is,
// read-only, and stamped 3 when first opened for writing, before any entry
// goes to the tail: every record answers as before, and new ones go to the
// tail beside them.
func TestFormatTwoFileIsUpgraded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "two.db")
	const n = 50
	oldformat.WriteFormat2(t, path, func(l *ledger.Ledger, in *inbox.Inbox) {
		for i := range n {
			_, err := l.Do(ctx, req(fmt.Sprint(i), "x"), order(fmt.Sprint(i), nil))
			require.NoError(t, err)
		}
		_, err := in.Handle(ctx, "billing", "m1", func(kv.Tx) error { return nil })
		require.NoError(t, err)
	})

	ro, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	require.Equal(t, uint32(2), storedFormat(t, ro))
	rl, err := ledger.New(ro, nil)
	require.NoError(t, err)
	require.Equal(t, n, rl.Stats().Records)
	require.NoError(t, ro.View(ctx, func(tx kv.Tx) error {
		require.Nil(t, keyspace.Raw(tx).Bucket(recstore.TailBucket(recstore.Spec{Name: "ledger"})), "written as format 2 wrote it")
		r, err := rl.GetTx(tx, req("7", "x").Scope, "7", false)
		require.NoError(t, err)
		require.Equal(t, ledger.StatusCompleted, r.Status)
		return nil
	}))
	require.NoError(t, ro.Close())

	db, l, in := openService(t, path)
	require.Equal(t, uint32(recstore.TailFormat), storedFormat(t, db))
	requireReplays(t, l, n)
	requireDuplicate(t, in, "m1")
	_, err = l.Do(ctx, req("new", "x"), order("new", nil))
	require.NoError(t, err)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		b, k, ok := recstore.Locate(tx, recstore.Spec{Name: "ledger"}, req("new", "x").Scope, "new")
		require.True(t, ok)
		require.Equal(t, recstore.TailBucket(recstore.Spec{Name: "ledger"}), b, "a new record goes to the tail")
		require.Len(t, k, 8)
		return nil
	}))
	requireClean(t, db)
}

// The directory is authoritative for misses only if every committed record
// has an entry: the Tx form inside a caller's own bbolt transaction adds it
// there, and a rollback of that transaction leaves no answer behind.
func TestRolledBackCallerTxLeavesNoTrace(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "rb.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	err = db.Update(ctx, func(tx kv.Tx) error {
		res, err := l.DoTx(ctx, tx, req("k", "x"), order("k", nil))
		require.NoError(t, err)
		require.False(t, res.Replayed)
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)

	replay, err := l.Peek(ctx, req("k", "x"))
	require.NoError(t, err)
	require.Nil(t, replay, "nothing to replay after the rollback")
	require.Zero(t, l.Stats().Cached, "the rolled-back record is in the cache of recent records")
	ran := false
	res, err := l.Do(ctx, req("k", "x"), func(tx kv.Tx) (ledger.Response, error) {
		ran = true
		return order("k", nil)(tx)
	})
	require.NoError(t, err)
	require.True(t, ran, "the work runs: the rolled-back attempt left no record")
	require.False(t, res.Replayed)
	require.Equal(t, 1, l.Stats().Records, "the rolled-back attempt's directory entry went with the next write")
	again, err := l.Do(ctx, req("k", "x"), mustNotRun(t))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	problems, err := db.Check(ctx, ledger.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func mustNotRun(t *testing.T) ledger.Work {
	return func(kv.Tx) (ledger.Response, error) {
		t.Error("the work ran for a request that has a record")
		return ledger.Response{}, fmt.Errorf("must not run")
	}
}

var errRollback = fmt.Errorf("roll back")

// requireReplays requires the requests 0..n-1 to replay the orders the
// tests' fill wrote, byte for byte, without running.
func requireReplays(t *testing.T, l *ledger.Ledger, n int) {
	t.Helper()
	for i := range n {
		res, err := l.Do(ctx, req(fmt.Sprint(i), "x"), mustNotRun(t))
		require.NoError(t, err)
		require.True(t, res.Replayed)
		require.Equal(t, fmt.Sprintf(`{"id":"%d","status":"pending"}`, i), string(res.Response.Body))
	}
}

// openService opens path for writing with a ledger and an inbox, as a
// service does when it starts (migrating or stamping the file), and closes
// it when the test ends.
func openService(t *testing.T, path string) (*kv.DB, *ledger.Ledger, *inbox.Inbox) {
	t.Helper()
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	return db, l, in
}

// storedFormat returns the format version db records.
func storedFormat(t *testing.T, db *kv.DB) uint32 {
	t.Helper()
	var v uint32
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		var err error
		v, err = keyspace.StoredFormat(tx)
		return err
	}))
	return v
}

// requireDuplicate requires the billing message id to be handled already.
func requireDuplicate(t *testing.T, in *inbox.Inbox, id string) {
	t.Helper()
	d, err := in.Handle(ctx, "billing", id, func(kv.Tx) error { return fmt.Errorf("applied twice") })
	require.NoError(t, err)
	require.True(t, d.Duplicate)
}

// requireClean requires the ledger's and the inbox's checks to find nothing.
func requireClean(t *testing.T, db *kv.DB) {
	t.Helper()
	problems, err := db.Check(ctx, ledger.RecordKind, inbox.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}
