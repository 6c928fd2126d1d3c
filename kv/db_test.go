package kv_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/seal"
)

var ctx = context.Background()

// reserved is the prefix of oncekv's own top-level buckets.
const reserved = "\x00oncekv/"

func TestOpenCreatesFileWith0600(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a.db")
	db := kvtest.OpenPath(t, path, nil)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	if runtime.GOOS != "windows" { // which has no such permissions
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	}
	require.NotEqual(t, [16]byte{}, [16]byte(db.Incarnation()))
}

func TestOpenValidatesOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []kv.Options{
		{LockTimeout: -1}, {MaxBatchSize: -1}, {MaxBatchDelay: -1}, {InitialMmapSize: -1},
		{GatherCallers: true, MaxBatchDelay: time.Millisecond},
	} {
		_, err := kv.Open(filepath.Join(t.TempDir(), "a.db"), &o)
		require.ErrorIs(t, err, kv.ErrInvalidOptions)
	}
}

// The cache of recent records takes its default for 0, is off (0) for
// any negative bound, and keeps a bound that is set.
func TestRecentCacheBytes(t *testing.T) {
	t.Parallel()
	for set, want := range map[int]int{0: kv.DefaultRecentCacheBytes, -1: 0, math.MinInt: 0, 1 << 20: 1 << 20} {
		db := kvtest.OpenPath(t, filepath.Join(t.TempDir(), "a.db"), &kv.Options{NoSync: true, RecentCacheBytes: set})
		require.Equal(t, want, db.RecentCacheBytes(), "RecentCacheBytes %d", set)
	}
	require.Equal(t, kv.DefaultRecentCacheBytes, kvtest.OpenPath(t, filepath.Join(t.TempDir(), "b.db"), nil).RecentCacheBytes())
}

func TestOpenReadOnlyMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.db")
	_, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.ErrorIs(t, err, os.ErrNotExist)
	_, statErr := os.Stat(path)
	require.ErrorIs(t, statErr, os.ErrNotExist, "a read-only open must not create the file")
}

// A second process holding the file must produce a typed error naming the
// lock within the configured timeout, not a hang.
func TestOpenLockedByAnotherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "locked.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ONCEKV_HOLD_LOCK="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)

	for _, readOnly := range []bool{false, true} {
		done := make(chan error, 1)
		go func() {
			_, err := kv.Open(path, &kv.Options{LockTimeout: 200 * time.Millisecond, ReadOnly: readOnly})
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, kv.ErrLocked)
			var fe *kv.FileError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, path, fe.Path)
			require.Contains(t, err.Error(), map[bool]string{false: "read-write", true: "read-only"}[readOnly])
			require.Contains(t, err.Error(), "the file lock was held by another process after waiting")
		case <-time.After(time.Minute):
			t.Fatal("Open hung on a locked file")
		}
	}

	// Once the holder exits, the file opens.
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
}

func TestNewerFormatIsRefusedAndUntouched(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "new.db")
	kvtest.WriteFormat(t, path, kv.FormatVersion+1)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	for _, ro := range []bool{false, true} {
		_, err = kv.Open(path, &kv.Options{ReadOnly: ro})
		require.ErrorIs(t, err, kv.ErrNewerFormat)
		var fe *kv.FileError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, path, fe.Path)
		require.Contains(t, err.Error(), fmt.Sprintf("has oncekv format version %d, this build reads up to %d", kv.FormatVersion+1, kv.FormatVersion))
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused file must not be modified")
}

func TestCorruptFormatRecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.db")
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte(reserved + "meta"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("format"), []byte("garbage"))
	}))
	require.NoError(t, b.Close())
	_, err = kv.Open(path, nil)
	require.ErrorIs(t, err, kv.ErrCorrupt)
}

func TestReservedNamespace(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, nil)
	name := []byte(reserved + "meta")
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		require.Nil(t, tx.Bucket(name), "reserved buckets are hidden")
		_, err := tx.CreateBucketIfNotExists(name)
		require.ErrorIs(t, err, kv.ErrReservedName)
		_, err = tx.CreateBucketIfNotExists([]byte(reserved + "mine"))
		require.ErrorIs(t, err, kv.ErrReservedName)
		// A user bucket that merely contains the word is fine.
		_, err = tx.CreateBucketIfNotExists([]byte("oncekv/meta"))
		require.NoError(t, err)
		// The top-level cursor lists the caller's buckets only.
		var names []string
		c := tx.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			names = append(names, string(k))
		}
		require.Equal(t, []string{"oncekv/meta"}, names)
		k, _ := c.Seek([]byte{0})
		require.Equal(t, "oncekv/meta", string(k), "Seek skips the reserved names")
		// Backwards too: the reserved names sort first, and Prev stops
		// before them.
		k, _ = c.Last()
		require.Equal(t, "oncekv/meta", string(k))
		k, _ = c.Prev()
		require.Nil(t, k, "nothing before the caller's first bucket")
		return nil
	}))
	// The format record survived.
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.NotNil(t, kv.BoltTx(tx).Bucket(name))
		return nil
	}))
}

func TestUpdateRollsBackOnErrorAndPanic(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, nil)
	boom := errors.New("boom")
	err := db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		require.NoError(t, err)
		require.NoError(t, b.Put([]byte("k"), []byte("v")))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.PanicsWithValue(t, "oops", func() {
		_ = db.Update(ctx, func(tx kv.Tx) error {
			b, _ := tx.CreateBucketIfNotExists([]byte("b"))
			_ = b.Put([]byte("k"), []byte("v"))
			panic("oops")
		})
	})
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Nil(t, tx.Bucket([]byte("b")))
		return nil
	}))
}

func TestCanceledContextRunsNothing(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, nil)
	c, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	fn := func(kv.Tx) error { ran = true; return nil }
	require.ErrorIs(t, db.Update(c, fn), context.Canceled)
	require.ErrorIs(t, db.View(c, fn), context.Canceled)
	require.ErrorIs(t, db.Batch(c, fn), context.Canceled)
	require.False(t, ran)
}

func TestClosedDB(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "c.db"), nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "Close is idempotent")
	require.ErrorIs(t, db.Update(ctx, func(kv.Tx) error { return nil }), kv.ErrClosed)
	require.ErrorIs(t, db.Batch(ctx, func(kv.Tx) error { return nil }), kv.ErrClosed)
}

// Done is closed as soon as Close is called, while a transaction still
// runs and the file is still open: what waits on it (a background loop
// sleeping between passes) stops at once, with Err's ErrClosed.
func TestDoneClosesWhenCloseIsCalled(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "d.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	select {
	case <-db.Done():
		t.Fatal("Done is closed while the database serves")
	default:
	}
	inside, release := make(chan struct{}), make(chan struct{})
	viewed := make(chan error, 1)
	entered := sync.OnceFunc(func() { close(inside) })
	go func() { viewed <- db.View(ctx, func(kv.Tx) error { entered(); <-release; return nil }) }()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case <-db.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done stayed open after Close was called")
	}
	require.ErrorIs(t, db.Err(), kv.ErrClosed)
	select {
	case <-closed:
		t.Fatal("Close returned while a View ran: the test did not see Done before the close")
	default:
	}
	close(release)
	if err := <-viewed; !kvtest.RunsTwice() { // the second run of the rerun build meets the close
		require.NoError(t, err)
	}
	require.NoError(t, <-closed)
}

// The adapter lets a caller's own bbolt transaction carry oncekv calls, and
// the caller keeps control of commit and rollback.
func TestWrapAndWrapTx(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "w.db")
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	defer b.Close()
	db, err := kv.Wrap(b, nil)
	require.NoError(t, err)

	committed := 0
	require.NoError(t, b.Update(func(btx *bolt.Tx) error {
		tx := kv.WrapTx(btx)
		require.Same(t, btx, kv.BoltTx(tx))
		bk, err := tx.CreateBucketIfNotExists([]byte("test"))
		require.NoError(t, err)
		require.NoError(t, bk.Put([]byte("k"), []byte("v")))
		tx.OnCommit(func() { committed++ })
		// The caller's own bucket in the same transaction.
		own, err := btx.CreateBucketIfNotExists([]byte("orders"))
		require.NoError(t, err)
		return own.Put([]byte("1"), []byte("x"))
	}))
	require.Equal(t, 1, committed)

	// A rolled-back caller transaction takes oncekv's writes with it.
	_ = b.Update(func(btx *bolt.Tx) error {
		bk, _ := kv.WrapTx(btx).CreateBucketIfNotExists([]byte("test"))
		_ = bk.Put([]byte("k2"), []byte("v"))
		kv.WrapTx(btx).OnCommit(func() { committed++ })
		return errors.New("rollback")
	})
	require.Equal(t, 1, committed)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		bk := tx.Bucket([]byte("test"))
		require.Equal(t, []byte("v"), bk.Get([]byte("k")))
		require.Nil(t, bk.Get([]byte("k2")))
		return nil
	}))
	require.NoError(t, db.Close())
	require.NoError(t, b.Update(func(*bolt.Tx) error { return nil }), "Close of a wrapped DB leaves the handle open")
}

// brokenChecker reports the bucket "kv_test.broken".
type brokenChecker struct{}

func (brokenChecker) Name() string { return "kv_test" }
func (brokenChecker) Check(tx kv.Tx, report func(string)) {
	if tx.Bucket([]byte("kv_test.broken")) != nil {
		report("the kv_test.broken bucket exists")
	}
}

// The findings of the checkers passed to Check come back, named after them.
func TestCheckRunsTheGivenCheckers(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "check.db"), nil)
	require.NoError(t, err)
	defer db.Close()
	problems, err := db.Check(ctx, brokenChecker{})
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte("kv_test.broken"))
		return err
	}))
	problems, err = db.Check(ctx)
	require.NoError(t, err)
	require.Empty(t, problems, "a checker not given does not run")
	problems, err = db.Check(ctx, brokenChecker{})
	require.NoError(t, err)
	require.Equal(t, []kv.Problem{{Check: "kv_test", Message: "the kv_test.broken bucket exists"}}, problems)
}

func TestManualClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{Clock: c})
	require.Equal(t, t0, db.Clock().Now())
	c.Advance(time.Hour)
	require.Equal(t, t0.Add(time.Hour), db.Clock().Now())
}

// A read-only DB over a backend other than a bbolt file refuses writes
// with the error a read-only file gives, and still reads.
func TestReadOnlyOverAnyBackend(t *testing.T) {
	t.Parallel()
	inner := kvtest.Open(t, nil)
	require.NoError(t, inner.Update(context.Background(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}))
	ro, err := kv.New(inner, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	err = ro.Update(context.Background(), func(tx kv.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("k"), []byte("w")) })
	require.ErrorIs(t, err, berrors.ErrDatabaseReadOnly)
	require.ErrorIs(t, ro.Batch(context.Background(), func(kv.Tx) error { return nil }), berrors.ErrDatabaseReadOnly)
	require.NoError(t, ro.View(context.Background(), func(tx kv.Tx) error {
		require.Equal(t, "v", string(tx.Bucket([]byte("b")).Get([]byte("k"))))
		return nil
	}))
}

// The packages that seal values are handed only a Tx: CipherOf finds the
// ring of its DB, through the DB's own transactions, batches and a caller's
// bbolt transaction wrapped with WrapTx; a DB without one yields nil.
func TestCipherOf(t *testing.T) {
	ring, err := seal.NewRing(seal.Key{ID: 3})
	require.NoError(t, err)
	db, err := kv.Open(filepath.Join(t.TempDir(), "c.db"), &kv.Options{NoSync: true, Cipher: ring})
	require.NoError(t, err)
	require.Same(t, ring, db.Cipher())
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error { require.Same(t, ring, kv.CipherOf(tx)); return nil }))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { require.Same(t, ring, kv.CipherOf(tx)); return nil }))
	require.NoError(t, db.Batch(ctx, func(tx kv.Tx) error { require.Same(t, ring, kv.CipherOf(tx)); return nil }))
	require.NoError(t, db.Bolt().View(func(btx *bolt.Tx) error {
		require.Same(t, ring, kv.CipherOf(kv.WrapTx(btx)))
		return nil
	}))
	plain, err := kv.Open(filepath.Join(t.TempDir(), "p.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer plain.Close()
	require.NoError(t, plain.View(ctx, func(tx kv.Tx) error { require.Nil(t, kv.CipherOf(tx)); return nil }))
	require.NoError(t, db.Close())
}

// TestViewReleasesItsTransaction checks that a View ends its read
// transaction however fn returns: an error is returned as is, a panic
// propagates, and afterwards the file can still grow (bbolt remaps it
// only once no read transaction holds the old mapping) and close.
func TestViewReleasesItsTransaction(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "v.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	boom := errors.New("boom")
	require.ErrorIs(t, db.View(ctx, func(kv.Tx) error { return boom }), boom)
	require.PanicsWithValue(t, "in view", func() {
		_ = db.View(ctx, func(kv.Tx) error { panic("in view") })
	})
	require.Equal(t, 0, db.Bolt().Stats().OpenTxN)
	big := make([]byte, 1<<20)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("grow"))
		if err != nil {
			return err
		}
		for i := range 40 { // 40 MiB: past the initial mapping, so bbolt remaps
			if err := b.Put(fmt.Appendf(nil, "%02d", i), big); err != nil {
				return err
			}
		}
		return nil
	}))
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked: a View left its read transaction open")
	}
}

type closeCounter struct{ n int }

func (c *closeCounter) Close() error { c.n++; return nil }

type attachKey struct{ name string }

// Attached state is shared by every caller of one DB, and closed (once)
// with it when it is an io.Closer.
func TestAttachmentsCloseWithTheDatabase(t *testing.T) {
	db, err := kv.Open(filepath.Join(t.TempDir(), "a.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	made := 0
	get := func() *closeCounter {
		return db.Attachment(attachKey{"closer"}, func() any { made++; return &closeCounter{} }).(*closeCounter)
	}
	c := get()
	require.Same(t, c, get())
	require.Equal(t, 1, made)
	plain := db.Attachment(attachKey{"plain"}, func() any { return new(int) })
	require.NoError(t, db.Close())
	require.NoError(t, db.Close())
	require.Equal(t, 1, c.n, "an attached io.Closer is not closed exactly once with the database")
	require.NotNil(t, plain)
	late := db.Attachment(attachKey{"late"}, func() any { return &closeCounter{} }).(*closeCounter)
	require.Equal(t, 1, late.n, "one attached after the close is closed at once")
}

// unreachable is a backend that cannot be reached: every transaction
// fails before it reads anything, as etcd does when it is down.
type unreachable struct{ kv.Backend }

var errUnreachable = errors.New("dial tcp 127.0.0.1:2379: connect: connection refused")

func (unreachable) View(context.Context, func(kv.Tx) error) error   { return errUnreachable }
func (unreachable) Update(context.Context, func(kv.Tx) error) error { return errUnreachable }

// Opening tells a damaged format record from a backend that could not
// read it: the first is ErrDamaged, the second the backend's own error
// (a store that could not be reached is not damaged).
func TestOpenTellsDamageFromAFailedRead(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(reserved+"meta")).Put([]byte("format"), []byte{0xff})
	}))
	require.NoError(t, db.Close())
	_, err = kv.Open(path, nil)
	require.ErrorIs(t, err, kv.ErrDamaged)
	require.ErrorContains(t, err, "unreadable oncekv format record")

	_, err = kv.New(unreachable{kvtest.Open(t, nil)}, nil)
	require.ErrorIs(t, err, errUnreachable)
	require.NotErrorIs(t, err, kv.ErrDamaged)
	require.ErrorContains(t, err, "read the format record")
}

// PageSize is the bbolt file's page size, read at open; 0 over another
// backend.
func TestPageSize(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, nil)
	require.Equal(t, os.Getpagesize(), db.PageSize())
	require.Equal(t, db.Bolt().Info().PageSize, db.PageSize()) // at rest, Info is safe
	over, err := kv.New(db, nil)
	require.NoError(t, err)
	require.Zero(t, over.PageSize())
}

// Fit sizes bulk transactions: all of them without a bound; within it
// otherwise, by the writes each takes; never none.
func TestTraitsFit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		max, n, each, want int
	}{
		{0, 500, 4, 500},  // bbolt: no bound
		{0, 0, 4, 1},      // never none
		{120, 500, 4, 30}, // etcd's 128, less the backend's own
		{120, 500, 3, 40},
		{120, 10, 4, 10}, // fewer than fit
		{120, 500, 0, 120},
		{2, 500, 4, 1}, // not even one fits: one all the same
	} {
		got := kv.Traits{MaxTxOps: c.max}.Fit(c.n, c.each)
		if got != c.want {
			t.Errorf("Traits{MaxTxOps: %d}.Fit(%d, %d) = %d, want %d", c.max, c.n, c.each, got, c.want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ prefix, want []byte }{
		{[]byte("acme/"), []byte("acme0")},
		{[]byte("a\xff"), []byte("b")},
		{[]byte("a\xff\xff"), []byte("b")},
		{[]byte{0}, []byte{1}},
		{[]byte{0xff, 0xff}, nil},
		{nil, nil},
		{[]byte{}, nil},
	} {
		if got := kv.PrefixEnd(tc.prefix); !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	p := []byte("ab")
	_ = kv.PrefixEnd(p)
	if string(p) != "ab" {
		t.Errorf("PrefixEnd changed its argument to %q", p)
	}
}
