package ledger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/diskfull"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// On bbolt the records are in the log and usage is counted in memory
// (recstore.Tally). These tests hold it to what the counters in the file
// gave: exact after every commit, whoever runs the transaction and however
// it ends.

func talliedLedger(t *testing.T, quota *Quota) (*kv.DB, *Ledger) {
	t.Helper()
	db := kvtest.Open(t, nil)
	kvtest.RequireBolt(t, db)
	l, err := New(db, &Config{Quota: quota})
	require.NoError(t, err)
	return db, l
}

func acmeReq(key string) Request {
	return Request{Scope: "acme|POST /x", Key: key, Fingerprint: Fingerprint{1}}
}

func created(kv.Tx) (Response, error) { return Response{Status: 201, Body: []byte("ok")}, nil }

func acmeUsage(t *testing.T, l *Ledger) Usage {
	t.Helper()
	u, err := l.Usage(context.Background(), "acme")
	require.NoError(t, err)
	return u
}

func requireChecked(t *testing.T, db *kv.DB) {
	t.Helper()
	problems, err := db.Check(context.Background(), RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
}

var errRolledBack = errors.New("the caller rolls back")

// A caller's own transaction that runs DoTx and rolls back leaves no
// trace in usage, although oncekv never sees the rollback: not when the
// next transaction, with the same ID, commits without a record, nor at
// the next write. The quota then admits what it should.
func TestTallyIgnoresARolledBackCallerTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, l := talliedLedger(t, &Quota{MaxRecords: 2})
	err := db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := l.DoTx(ctx, kv.WrapTx(btx), acmeReq("k1"), created)
		require.NoError(t, err)
		u, err := l.usage(kv.WrapTx(btx), "acme")
		require.NoError(t, err)
		require.EqualValues(t, 1, u.Records, "the transaction sees its own record counted")
		return errRolledBack
	})
	require.ErrorIs(t, err, errRolledBack)
	require.Zero(t, acmeUsage(t, l).Records)

	// The next write transaction gets the rolled-back one's ID.
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := btx.CreateBucketIfNotExists([]byte("app"))
		return err
	}))
	require.Zero(t, acmeUsage(t, l).Records)

	for _, k := range []string{"k2", "k3"} {
		_, err = l.Do(ctx, acmeReq(k), created)
		require.NoError(t, err, "the rolled-back record is not counted against the quota")
	}
	_, err = l.Do(ctx, acmeReq("k4"), created)
	require.ErrorIs(t, err, ErrQuotaExceeded)
	require.EqualValues(t, 2, acmeUsage(t, l).Records)
	requireChecked(t, db)
}

// bbolt runs a commit's handlers after it releases the writer lock: the
// next transaction can begin before the tally hears of the commit. It
// must count the committed record all the same (the stamp the commit left
// says so), in a write's quota check and in a read.
func TestTallyCountsACommitBeforeItsHandlerRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		next string
		body []byte
	}{{"read", []byte("ok")}, {"write", []byte("ok")}, {"read", largeBody(3000)}, {"write", largeBody(3000)}} {
		next := tc.next
		t.Run(fmt.Sprintf("%s/%d", next, len(tc.body)), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, l := talliedLedger(t, &Quota{MaxRecords: 1})
			var read Usage
			var wrote error
			require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
				// Registered first, so it runs before the tally's handler.
				btx.OnCommit(func() {
					if next == "read" {
						read = acmeUsage(t, l)
					} else {
						_, wrote = l.Do(ctx, acmeReq("k2"), created)
					}
				})
				_, err := l.DoTx(ctx, kv.WrapTx(btx), acmeReq("k1"), func(kv.Tx) (Response, error) { return Response{Status: 201, Body: tc.body}, nil })
				return err
			}))
			if next == "read" {
				require.EqualValues(t, 1, read.Records, "a read after the commit counts its record")
			} else {
				require.ErrorIs(t, wrote, ErrQuotaExceeded, "the next write counts the committed record")
			}
			require.EqualValues(t, 1, acmeUsage(t, l).Records)
			requireChecked(t, db)
		})
	}
}

// A read gets usage as of its snapshot. While the changes committed since
// it began are among the last 64 the tally keeps, it takes them back out
// of the counts (a record more, another tenant's first, a released
// claim's record gone); older ones, it counts the records. The check,
// which compares the two in the read's snapshot, agrees either way.
func TestUsageTxIsTheSnapshots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The read below stays open while 65 writes commit: a map as large
	// as the file will be, for bbolt's remap waits for every reader.
	db := kvtest.Open(t, &kv.Options{InitialMmapSize: 16 << 20})
	kvtest.RequireBolt(t, db)
	l, err := New(db, nil)
	require.NoError(t, err)
	_, err = l.Do(ctx, acmeReq("k1"), created)
	require.NoError(t, err)
	claimed, err := l.Claim(ctx, acmeReq("claimed"))
	require.NoError(t, err)
	snapshot := map[string]Usage{"acme": acmeUsage(t, l)}
	require.EqualValues(t, 2, snapshot["acme"].Records)

	btx, err := db.Bolt().Begin(false)
	require.NoError(t, err)
	defer func() { _ = btx.Rollback() }()
	tx := kv.WrapTx(btx)
	usageIn := func() map[string]Usage {
		usage := map[string]Usage{}
		for tenant, u := range UsageTx(tx) {
			usage[tenant] = u
		}
		var problems []string
		checkUsage(tx, recordedUsage(tx), func(m string) { problems = append(problems, m) })
		require.Empty(t, problems)
		return usage
	}
	at, exact := recstore.TallyOf(tx, recordSpec).At(tx)
	require.True(t, exact)
	require.EqualValues(t, 2, at["acme"].Records)

	_, err = l.Do(ctx, acmeReq("k2"), created)
	require.NoError(t, err)
	_, err = l.Do(ctx, Request{Scope: "globex|POST /x", Key: "g1", Fingerprint: Fingerprint{1}}, created)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, claimed.Claim))
	n := 3 // changes committed since the read began
	for ; n < 64; n++ {
		_, err = l.Do(ctx, acmeReq(fmt.Sprint("later-", n)), created)
		require.NoError(t, err)
	}
	at, exact = recstore.TallyOf(tx, recordSpec).At(tx)
	require.True(t, exact, "64 changes since the read began: all kept")
	require.Equal(t, map[string]recstore.Count{"acme": recstore.Count(snapshot["acme"])}, at)
	require.Equal(t, snapshot, usageIn())

	_, err = l.Do(ctx, acmeReq("one-too-many"), created)
	require.NoError(t, err)
	_, exact = recstore.TallyOf(tx, recordSpec).At(tx)
	require.False(t, exact, "65 changes since the read began: the first no longer kept")
	require.Equal(t, snapshot, usageIn(), "the records counted")
	require.EqualValues(t, 64, acmeUsage(t, l).Records, "the latest: 2 + 63 - 1")
}

// A database opened read-only (oncekv's commands) counts usage from the
// records when the ledger opens, as a writable one does.
func TestUsageOnAReadOnlyOpen(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "opens the bbolt file read-only")
	ctx := context.Background()
	path := t.TempDir() + "/ro.db"
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	l, err := New(db, nil)
	require.NoError(t, err)
	for i := range 3 {
		_, err := l.Do(ctx, acmeReq(fmt.Sprint(i)), created)
		require.NoError(t, err)
	}
	want := acmeUsage(t, l)
	require.NoError(t, db.Close())

	ro, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	l, err = New(ro, nil)
	require.NoError(t, err)
	require.Equal(t, want, acmeUsage(t, l))
	require.EqualValues(t, 3, want.Records)
	requireChecked(t, ro)
}

// The stamp that orders the tally is the sequence of the log's tail
// bucket, set by each transaction that changes a count to its own ID,
// whether its record went to the tail or, large, to the log itself. A
// file an earlier build wrote keeps it in a bucket "ledger.tally" of its
// own: the first writable open removes that bucket, and counts what the
// records say.
func TestTallyStampIsTheTailsSequence(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "reopens the bbolt file")
	ctx := context.Background()
	path := t.TempDir() + "/stamp.db"
	db := kvtest.OpenPath(t, path, nil)
	kvtest.RequireBolt(t, db)
	l, err := New(db, nil)
	require.NoError(t, err)
	tailSeq := func() (seq, lastTx uint64) {
		require.NoError(t, db.Bolt().View(func(btx *bolt.Tx) error {
			seq, lastTx = btx.Bucket(recstore.TailBucket(recordSpec)).Sequence(), uint64(btx.ID())
			return nil
		}))
		return seq, lastTx
	}
	for _, body := range [][]byte{largeBody(3000), []byte("ok")} { // the first makes no tail: its stamp does
		_, err := l.Do(ctx, acmeReq(fmt.Sprint(len(body))), func(kv.Tx) (Response, error) { return Response{Status: 201, Body: body}, nil })
		require.NoError(t, err)
		seq, lastTx := tailSeq()
		require.Equal(t, lastTx, seq, "a %d-byte answer's commit stamps the tail with its ID", len(body))
	}
	// A transaction that changes no count leaves the stamp as it was.
	before, _ := tailSeq()
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		_, err := btx.CreateBucketIfNotExists([]byte("app"))
		return err
	}))
	after, lastTx := tailSeq()
	require.Equal(t, before, after)
	require.Greater(t, lastTx, after)

	// An earlier build's file: its stamp bucket, with a stamp that
	// matches nothing.
	writeOldStamp(t, db)
	require.NoError(t, db.Close())
	db = kvtest.OpenPath(t, path, nil)
	l, err = New(db, nil)
	require.NoError(t, err)
	require.False(t, hasOldStamp(t, db), "the open removed the old stamp's bucket")
	require.Equal(t, Usage{Records: 2, Bytes: acmeUsage(t, l).Bytes}, acmeUsage(t, l))
	_, err = l.Do(ctx, acmeReq("k3"), created)
	require.NoError(t, err)
	require.EqualValues(t, 3, acmeUsage(t, l).Records)
	requireChecked(t, db)
}

// On a full disk the open of a file an earlier build wrote cannot remove
// its old stamp bucket: the ledger opens all the same (nothing reads that
// bucket), counts usage from the records, and the next open, with space
// again, removes it.
func TestOldStampBucketOnAFullDisk(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "fills the disk under a bbolt file")
	ctx := context.Background()
	dir := diskfull.Mount(t, 1<<20)
	path := dir + "/old.db"
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	l, err := New(db, nil)
	require.NoError(t, err)
	for _, k := range []string{"k1", "k2"} {
		_, err := l.Do(ctx, acmeReq(k), created)
		require.NoError(t, err)
	}
	want := acmeUsage(t, l)
	writeOldStamp(t, db)
	require.NoError(t, db.Close())

	// Reopened, the disk fills up before the ledger opens: the commits
	// that follow a failed one are refused for a while (kv's pause), the
	// old bucket's removal among them.
	db, err = kv.Open(path, nil)
	require.NoError(t, err)
	free := diskfull.Fill(t, dir, 0)
	value := make([]byte, 8<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 64, "a full disk took 64 writes of 8 KiB")
		err := db.Update(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("app"))
			if err != nil {
				return err
			}
			return b.Put(fmt.Appendf(nil, "v%03d", i), value)
		})
		if err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			break
		}
	}
	l, err = New(db, nil)
	require.NoError(t, err, "the ledger opens on a full disk")
	require.Equal(t, want, acmeUsage(t, l))
	_, err = l.Do(ctx, acmeReq("k1"), created)
	require.NoError(t, err, "and replays")
	require.True(t, hasOldStamp(t, db), "the old bucket stays until an open can remove it")
	free()
	require.NoError(t, db.Close())

	db = kvtest.OpenPath(t, path, nil)
	l, err = New(db, nil)
	require.NoError(t, err)
	require.False(t, hasOldStamp(t, db), "the next open removed it")
	require.Equal(t, want, acmeUsage(t, l))
	requireChecked(t, db)
}

// writeOldStamp gives db's file the stamp bucket an earlier build kept,
// with a stamp that matches nothing.
func writeOldStamp(t *testing.T, db *kv.DB) {
	t.Helper()
	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		b, err := btx.CreateBucket(recstore.OldTallyBucket(recordSpec))
		if err != nil {
			return err
		}
		return b.Put([]byte("at"), []byte("0123456789ab"))
	}))
}

// hasOldStamp reports whether db's file holds that bucket.
func hasOldStamp(t *testing.T, db *kv.DB) (there bool) {
	t.Helper()
	require.NoError(t, db.Bolt().View(func(btx *bolt.Tx) error {
		there = btx.Bucket(recstore.OldTallyBucket(recordSpec)) != nil
		return nil
	}))
	return there
}

// largeBody returns n bytes that do not compress: a record that big goes
// to the log itself, past the tail.
func largeBody(n int) []byte {
	b := make([]byte, n)
	x := uint64(0x9E3779B97F4A7C15)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// Writes of many tenants from many goroutines, with reads of their usage
// beside them, a sweep and a recount: usage matches the records at the
// end, and the check agrees (run it under -race).
func TestTallyUnderConcurrentWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, l := talliedLedger(t, &Quota{MaxRecords: 1 << 20})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 40 {
				scope := fmt.Sprintf("t%02d|POST /x", (g*40+i)%25)
				_, err := l.Do(ctx, Request{Scope: scope, Key: fmt.Sprint(g, "-", i), Fingerprint: Fingerprint{1}}, created)
				assert.NoError(t, err)
			}
		})
	}
	wg.Go(func() {
		for range 40 {
			_, err := l.Usage(ctx, "t03")
			assert.NoError(t, err)
			assert.NoError(t, db.View(ctx, func(tx kv.Tx) error {
				for range UsageTx(tx) {
				}
				return nil
			}))
		}
	})
	wg.Wait()
	mended, err := RecountUsage(ctx, db)
	require.NoError(t, err)
	require.Empty(t, mended)
	requireChecked(t, db)
	var total int64
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		total = 0
		for tenant, u := range UsageTx(tx) {
			require.True(t, strings.HasPrefix(tenant, "t"))
			total += u.Records
		}
		return nil
	}))
	require.EqualValues(t, 160, total)
	require.Equal(t, 25, l.Stats().Tenants)
}

// A recount and a check on a file whose ledger has no record yet (its log
// bucket comes with the first) count in memory as on any other: no
// counters' bucket, which an older version would trust, is created.
func TestRecountBeforeTheFirstRecordWritesNoCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, l := talliedLedger(t, nil)
	mended, err := RecountUsage(ctx, db)
	require.NoError(t, err)
	require.Empty(t, mended)
	requireChecked(t, db)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Nil(t, usageNS.Bucket(tx))
		return nil
	}))
	_, err = l.Do(ctx, acmeReq("k1"), created)
	require.NoError(t, err)
	require.EqualValues(t, 1, acmeUsage(t, l).Records)
}

// Usage that drifted in one of its two numbers only (records, or bytes)
// is reported by the check and mended by a recount, which changes that
// number alone: in the tally (bbolt's log) as in the counters kept where
// the records are keyed (etcd).
func TestRecountMendsOneNumberOfUsage(t *testing.T) {
	t.Parallel()
	for _, logged := range []bool{true, false} {
		t.Run(fmt.Sprintf("logged=%t", logged), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := keyedDB(t, nil)
			if logged {
				db = kvtest.Open(t, nil)
				kvtest.RequireBolt(t, db) // the tally counts the log, on bbolt
			}
			l, err := New(db, nil)
			require.NoError(t, err)
			for _, scope := range []string{"acme|POST /x", "globex|POST /x"} {
				for _, k := range []string{"k1", "k2"} {
					_, err := l.Do(ctx, Request{Scope: scope, Key: k, Fingerprint: Fingerprint{1}}, created)
					require.NoError(t, err)
				}
			}
			acme := acmeUsage(t, l)
			globex, err := l.Usage(ctx, "globex")
			require.NoError(t, err)
			require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
				tally := recstore.TallyOf(tx, recordSpec)
				require.Equal(t, logged, tally != nil)
				if err := account(tx, tally, "acme|POST /x", "k1", 1, 0); err != nil {
					return err
				}
				return account(tx, tally, "globex|POST /x", "k1", 0, 7)
			}))
			require.Equal(t, Usage{Records: acme.Records + 1, Bytes: acme.Bytes}, acmeUsage(t, l))
			problems, err := db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.Len(t, problems, 2, "%v", problems)

			mended, err := RecountUsage(ctx, db)
			require.NoError(t, err)
			require.Equal(t, []UsageRecount{
				{Tenant: "acme", Was: Usage{Records: acme.Records + 1, Bytes: acme.Bytes}, Now: acme},
				{Tenant: "globex", Was: Usage{Records: globex.Records, Bytes: globex.Bytes + 7}, Now: globex},
			}, mended)
			require.Equal(t, acme, acmeUsage(t, l))
			requireChecked(t, db)
		})
	}
}

// A record whose scope names no tenant (written before such scopes were
// refused) is left out of usage when the directory is rebuilt at open,
// as it is by the check and the recount (TestAScopeWithoutATenant).
func TestRebuildCountsNoRecordWithoutATenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kvtest.RequireLocal(t, "reopens the bbolt file: the directory is rebuilt at open")
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	l, err := New(db, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		_, err := l.doTx(ctx, tx, Request{Scope: "|POST /x", Key: "k", Fingerprint: Fingerprint{1}}, created, nil, recstore.Probe{})
		return err
	}))
	_, err = l.Do(ctx, acmeReq("k"), created)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	db, err = kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	l, err = New(db, nil)
	require.NoError(t, err)
	got := map[string]Usage{}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		clear(got) // a rerun build reads twice
		for tenant, u := range UsageTx(tx) {
			got[tenant] = u
		}
		return nil
	}))
	require.Equal(t, map[string]Usage{"acme": acmeUsage(t, l)}, got)
	require.Equal(t, 1, l.Stats().Tenants)
	requireChecked(t, db)
}
