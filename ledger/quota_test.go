package ledger_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/retention"
)

func tenantReq(tenant, key string) ledger.Request {
	return ledger.Request{Scope: tenant + "|POST /v1/orders", Key: key, Fingerprint: fp(key)}
}

func small(tx kv.Tx) (ledger.Response, error) {
	return ledger.Response{Status: 201, Body: []byte("ok")}, nil
}

// Per-tenant quotas (issue 13, item 9): live records and stored bytes are
// counted exactly in the transaction that writes or deletes each record, and
// a new record over the limit is rejected before anything is written.
func TestTenantQuotas(t *testing.T) {
	t.Parallel()
	l, b := setup(t, &ledger.Config{Retention: time.Hour, Lease: time.Minute, Quota: &ledger.Quota{MaxRecords: 3, RetryAfter: 30 * time.Second}})
	for i := range 3 {
		_, err := l.Do(ctx, tenantReq("acme", fmt.Sprint("k", i)), small)
		require.NoError(t, err)
	}
	u, err := l.Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, int64(3), u.Records)
	require.Positive(t, u.Bytes)

	runs := 0
	_, err = l.Do(ctx, tenantReq("acme", "k3"), func(tx kv.Tx) (ledger.Response, error) {
		if kvtest.Counts() {
			runs++
		}
		return small(tx)
	})
	var qe *ledger.QuotaError
	require.ErrorAs(t, err, &qe)
	require.ErrorIs(t, err, ledger.ErrQuotaExceeded)
	require.Equal(t, "acme", qe.Tenant)
	require.Equal(t, 30*time.Second, qe.RetryAfter)
	require.Zero(t, runs, "the work never ran")
	_, err = l.Claim(ctx, tenantReq("acme", "k4"))
	require.ErrorIs(t, err, ledger.ErrQuotaExceeded)
	_, err = l.Get(ctx, "acme|POST /v1/orders", "k4")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	// Replays are always answered; another tenant has its own count.
	res, err := l.Do(ctx, tenantReq("acme", "k0"), small)
	require.NoError(t, err)
	require.True(t, res.Replayed)
	_, err = l.Do(ctx, tenantReq("globex", "k0"), small)
	require.NoError(t, err)

	// A released claim gives its record back; expired records count until a
	// sweep removes them.
	out, err := l.Claim(ctx, tenantReq("globex", "claim"))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, out.Claim))
	u, _ = l.Usage(ctx, "globex")
	require.Equal(t, int64(1), u.Records)

	b.clock.Advance(2 * time.Hour)
	_, err = l.Do(ctx, tenantReq("acme", "k9"), small)
	require.ErrorIs(t, err, ledger.ErrQuotaExceeded, "expired, not yet swept")
	_, err = l.Do(ctx, tenantReq("acme", "k0"), small)
	require.NoError(t, err, "an expired key is replaced, not added")
	st, err := retention.Sweep(ctx, b.db, nil, ledger.RecordKind)
	require.NoError(t, err)
	require.Equal(t, 3, st.Kinds[retention.Idempotency].Deleted)
	u, _ = l.Usage(ctx, "acme")
	require.Equal(t, int64(1), u.Records)
	_, err = l.Do(ctx, tenantReq("acme", "k9"), small)
	require.NoError(t, err)

	usage := map[string]ledger.Usage{}
	require.NoError(t, b.db.View(ctx, func(tx kv.Tx) error {
		for tenant, u := range ledger.UsageTx(tx) {
			usage[tenant] = u
		}
		return nil
	}))
	require.Equal(t, int64(2), usage["acme"].Records)
	require.Equal(t, int64(0), usage["globex"].Records) // swept too
	// dbtest's cleanup check compares every counter with the records.
}

func TestByteQuota(t *testing.T) {
	t.Parallel()
	l, _ := setup(t, &ledger.Config{Quota: &ledger.Quota{For: func(tenant string) (int64, int64) {
		if tenant == "tiny" {
			return 0, 200
		}
		return 0, 0
	}}})
	big := func(tx kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 200, Body: make([]byte, 300)}, nil
	}
	_, err := l.Do(ctx, tenantReq("tiny", "a"), big)
	require.NoError(t, err, "the first record may go over: completion is never refused")
	_, err = l.Do(ctx, tenantReq("tiny", "b"), big)
	require.ErrorIs(t, err, ledger.ErrQuotaExceeded)

	// Exactly at the limit is full: a tenant whose limit is its usage to
	// the byte gets no new record.
	u, err := l.Usage(ctx, "tiny")
	require.NoError(t, err)
	exact, _ := setup(t, &ledger.Config{Quota: &ledger.Quota{For: func(tenant string) (int64, int64) {
		if tenant == "tiny" {
			return 0, u.Bytes
		}
		return 0, 0
	}}})
	_, err = exact.Do(ctx, tenantReq("tiny", "a"), big)
	require.NoError(t, err)
	got, err := exact.Usage(ctx, "tiny")
	require.NoError(t, err)
	require.Equal(t, u, got, "the same record costs the same bytes")
	_, err = exact.Do(ctx, tenantReq("tiny", "b"), big)
	require.ErrorIs(t, err, ledger.ErrQuotaExceeded)
	for i := range 5 {
		_, err = l.Do(ctx, tenantReq("roomy", fmt.Sprint(i)), big)
		require.NoError(t, err)
	}
}

// Where the records are in the log (bbolt), usage is counted from them
// when a ledger opens the file, whatever counters are in the file: those
// an older version kept (wrong ones here) are removed at the first
// writable open, so that the older version, opening the file again, counts
// afresh instead of trusting counters this version no longer keeps.
func TestUsageIsCountedFromTheRecordsAtOpen(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "writes counters into the bbolt file")
	path := t.TempDir() + "/old.db"
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	for i := range 4 {
		_, err := l.Do(ctx, tenantReq("acme", fmt.Sprint(i)), small)
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())
	usageBucket := []byte(record.ReservedPrefix + "ledger.usage")
	kvtest.RawUpdate(t, path, func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(usageBucket), "no counter is written")
		b, err := tx.CreateBucket(usageBucket)
		if err != nil {
			return err
		}
		if err := b.Put([]byte("acme"), []byte("an older version's counter, damaged")); err != nil {
			return err
		}
		return b.Put([]byte("\x00complete"), []byte{1})
	})

	db = kvtest.OpenPath(t, path, &kv.Options{NoSync: true}, ledger.RecordKind)
	l, err = ledger.New(db, nil)
	require.NoError(t, err)
	u, err := l.Usage(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, int64(4), u.Records)
	_, err = l.Do(ctx, tenantReq("acme", "after"), small)
	require.NoError(t, err, "the damaged counter is not read")
	require.NoError(t, db.Bolt().View(func(tx *bolt.Tx) error {
		require.Nil(t, tx.Bucket(usageBucket), "the older version's counters are gone")
		return nil
	}))
}

// A rejection met inside a group commit (here a tenant at its quota, which
// only the write transaction can tell) writes nothing and fails nothing:
// the ledger passes it through kv.Reject, so no commit fails and the other
// calls of its batch are not run again. Otherwise every call batched with
// a rejected one would run its work twice.
func TestRejectionsLeaveTheirBatchAlone(t *testing.T) {
	t.Parallel()
	var failed, batched atomic.Int64
	obs := &observe.Observer{Commit: func(c observe.Commit) {
		if c.Err {
			failed.Add(1)
		}
		if c.Calls > 1 {
			batched.Add(1)
		}
	}}
	db := kvtest.OpenPath(t, filepath.Join(t.TempDir(), "ledger.db"),
		&kv.Options{NoSync: true, MaxBatchDelay: 20 * time.Millisecond, Observer: obs}, ledger.RecordKind)
	kvtest.RequireGroupCommit(t, db) // elsewhere (etcd) each call commits alone
	l, err := ledger.New(db, &ledger.Config{Quota: &ledger.Quota{MaxRecords: 1}})
	require.NoError(t, err)
	_, err = l.Do(ctx, tenantReq("full", "first"), small)
	require.NoError(t, err)

	const n = 8
	var runs [n]atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := l.Do(ctx, tenantReq("full", fmt.Sprint("over-", i)), small)
			assert.ErrorIs(t, err, ledger.ErrQuotaExceeded)
		})
		wg.Go(func() {
			_, err := l.Do(ctx, tenantReq(fmt.Sprint("free-", i), "k"), func(tx kv.Tx) (ledger.Response, error) {
				if kvtest.Counts() {
					runs[i].Add(1)
				}
				return small(tx)
			})
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	for i := range runs {
		require.Equal(t, int64(1), runs[i].Load(), "free-%d's work ran once", i)
	}
	require.Zero(t, failed.Load(), "no commit failed")
	require.Positive(t, batched.Load(), "some calls shared a commit")
	u, err := l.Usage(ctx, "full")
	require.NoError(t, err)
	require.Equal(t, int64(1), u.Records, "the rejected calls stored nothing")
}
