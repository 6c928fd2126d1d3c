package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A count is far from the bounds while it is more than an eighth of each
// bound below it (at least one): of records, of bytes, or both.
func TestFarBelowTheBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxRecords, maxBytes int64
		u                    Usage
		far                  bool
	}{
		{16, 0, Usage{Records: 13, Bytes: 1 << 40}, true}, // no bound of bytes
		{16, 0, Usage{Records: 14}, false},                // within 2 of 16
		{4, 0, Usage{Records: 2}, true},                   // an eighth of 4 is less than one: one
		{4, 0, Usage{Records: 3}, false},
		{0, 800, Usage{Records: 1 << 40, Bytes: 699}, true}, // no bound of records
		{0, 800, Usage{Bytes: 700}, false},
		{16, 800, Usage{Records: 13, Bytes: 699}, true},
		{16, 800, Usage{Records: 13, Bytes: 700}, false}, // near one bound is near
		{16, 800, Usage{Records: 14, Bytes: 0}, false},
		{-1, -1, Usage{Records: 1 << 40, Bytes: 1 << 40}, true},
	} {
		require.Equal(t, tc.far, farBelow(tc.maxRecords, tc.maxBytes)(tc.u), "%+v", tc)
	}
}

// What a check relies on without reading: the count last read, plus what
// this process added since it was asked for, while it is recent and far
// from the bound; one check at a time reads it again, the others wait for
// that read instead of each reading in its transaction.
func TestQuotaViews(t *testing.T) {
	t.Parallel()
	q := newQuotaViews(time.Minute)
	far := farBelow(16, 0) // far below 14
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

	known, renew, wait := q.admit("acme", t0, far)
	require.False(t, known, "nothing read yet")
	require.True(t, renew)
	require.Nil(t, wait)
	// A second check while the first reads waits for it.
	known, renew, wait = q.admit("acme", t0, far)
	require.False(t, known)
	require.False(t, renew, "one read at a time")
	require.NotNil(t, wait)
	q.add("acme", Usage{Records: 1, Bytes: 10}) // stored while the read was under way
	q.renewed("acme", Usage{Records: 10, Bytes: 1000}, nil)
	select {
	case <-wait:
	default:
		t.Fatal("the read ended and the wait did not")
	}

	// 10 read, 1 added since: 11, and each admission counts one more.
	for want := int64(12); want <= 14; want++ {
		known, renew, wait = q.admit("acme", t0.Add(time.Second), far)
		require.True(t, known)
		require.False(t, renew)
		require.Nil(t, wait)
		require.Equal(t, Usage{Records: want, Bytes: 1010}, q.estimate("acme"))
	}
	// At 14 of 16, within an eighth of the bound: the check reads.
	known, renew, wait = q.admit("acme", t0.Add(time.Second), far)
	require.False(t, known, "near the bound")
	require.False(t, renew, "the count is recent: the check reads in its transaction, the view is not renewed")
	require.Nil(t, wait)

	// Past half the age allowed, a check that is still known renews it.
	q.renewed("acme", Usage{Records: 2}, nil) // ignored: nothing asked for it
	require.Equal(t, int64(14), q.estimate("acme").Records)
	q2 := newQuotaViews(time.Minute)
	q2.admit("globex", t0, far)
	q2.renewed("globex", Usage{Records: 1}, nil)
	known, renew, _ = q2.admit("globex", t0.Add(30*time.Second), far)
	require.True(t, known, "still recent")
	require.True(t, renew, "and read again for the next checks")
	q2.add("globex", Usage{Records: 1})
	q2.renewed("globex", Usage{Records: 5}, nil)
	require.Equal(t, Usage{Records: 7}, q2.estimate("globex"), "the read, plus what was admitted and added since it was asked for")

	// Too old, or from a clock that stepped back, it is not relied on.
	for _, at := range []time.Time{t0.Add(30*time.Second + time.Minute), t0.Add(29 * time.Second)} {
		known, renew, _ = q2.admit("globex", at, far)
		require.False(t, known, at)
		require.True(t, renew, at)
		q2.renewed("globex", Usage{}, errors.New("etcd unreachable"))
		known, _, _ = q2.admit("globex", at, far)
		require.False(t, known, "a failed read renews nothing")
		q2.renewed("globex", Usage{}, errors.New("etcd unreachable"))
	}
}

// The views are bounded: past maxQuotaViews tenants, one is forgotten for
// each new one, never one being read.
func TestQuotaViewsAreBounded(t *testing.T) {
	t.Parallel()
	q := newQuotaViews(time.Minute)
	far := farBelow(1000, 0)
	now := time.Now()
	for i := range maxQuotaViews + 100 {
		_, renew, _ := q.admit(fmt.Sprint("t", i), now, far)
		require.True(t, renew)
		if i%2 == 1 {
			q.renewed(fmt.Sprint("t", i), Usage{}, nil)
		}
	}
	require.Len(t, q.m, maxQuotaViews)
	renewing := 0
	for _, v := range q.m {
		if v.renewing {
			renewing++
		}
	}
	require.Equal(t, (maxQuotaViews+100)/2, renewing, "a view being read is never dropped: its reader will end it")
}

// estimate is what admit would go by for tenant.
func (q *quotaViews) estimate(tenant string) Usage {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := q.m[tenant]
	return v.base.plus(v.added)
}

// A counter damaged under a ledger that relies on its count: the checks
// go on by the count read before, for up to MaxCountAge; then the read
// that would renew it fails, nothing is admitted on a count that could
// not be read, and the tenant's requests fail with the damage named, as
// where every check reads (TestRecountUsageMendsTheCounters).
func TestQuotaViewOfADamagedCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := kvtest.NewManualClock(time.Now())
	db, err := kv.New(severalWriters{kvtest.Open(t, nil)}, &kv.Options{Clock: clock})
	require.NoError(t, err)
	l, err := New(db, &Config{Quota: &Quota{MaxRecords: 1000, MaxCountAge: time.Minute}})
	require.NoError(t, err)
	require.NotNil(t, l.views, "a store several processes write")
	do := func(key string) error {
		_, err := l.Do(ctx, Request{Scope: "acme|POST /x", Key: key, Fingerprint: Fingerprint{1}}, func(kv.Tx) (Response, error) {
			return Response{Status: 201}, nil
		})
		return err
	}
	require.NoError(t, do("a-0"))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := usageNS.Bucket(tx)
		k, _ := b.Cursor().Seek([]byte("acme"))
		require.Equal(t, "acme", string(usageTenant(k)))
		return b.Put(bytes.Clone(k), []byte("not a usage record"))
	}))
	require.NoError(t, do("a-1"), "the count read a moment ago, far from the bound")
	clock.Advance(time.Minute)
	require.ErrorContains(t, do("a-2"), `usage of tenant "acme" (RecountUsage, or oncekv recount, counts it again)`)
	require.ErrorContains(t, do("a-3"), `usage of tenant "acme"`, "still")
}
