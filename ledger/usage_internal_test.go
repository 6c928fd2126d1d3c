package ledger

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/retention"
)

// A tenant's usage is spread over counters, a record counted in the one
// its key hashes to: two writers on one tenant seldom write the same key
// (on etcd one counter per tenant made every request of a tenant conflict
// with every other). The sum stays exact, with a count from before the
// shards (under the bare tenant key) decremented through them.
func TestUsageIsShardedAndExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := kvtest.Open(t, nil)
	db, err := kv.New(severalWriters{file}, nil) // as etcd: several writers
	require.NoError(t, err)
	l, err := New(db, nil)
	require.NoError(t, err)
	do := func(scope, key string) {
		_, err := l.Do(ctx, Request{Scope: scope, Key: key, Fingerprint: Fingerprint{1}}, func(kv.Tx) (Response, error) {
			return Response{Status: 201, Body: []byte("ok")}, nil
		})
		require.NoError(t, err)
	}
	for i := range 64 {
		do("acme|POST /x", fmt.Sprintf("k-%d", i))
	}
	do("acmecorp|POST /x", "k-0") // a tenant whose name extends another's
	var counters map[string]int
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		counters = map[string]int{} // a read run again (etcd) starts afresh
		c := keyspace.Raw(tx).Bucket(usageNS.Bytes()).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if k[0] != 0 {
				counters[string(usageTenant(k))]++
			}
		}
		return nil
	}))
	require.Greater(t, counters["acme"], 48, "64 records land in many of the 1,024 counters")
	require.Equal(t, 1, counters["acmecorp"])
	u, err := l.Usage(ctx, "acme")
	require.NoError(t, err)
	require.EqualValues(t, 64, u.Records)
	got := map[string]Usage{}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for tenant, u := range UsageTx(tx) {
			got[tenant] = u
		}
		return nil
	}))
	require.Len(t, got, 2)
	require.EqualValues(t, 64, got["acme"].Records)
	require.EqualValues(t, 1, got["acmecorp"].Records)

	// A count kept under the bare tenant key (before the shards) moves
	// into the shards as records go: removing one leaves its counter
	// negative and the sum exact.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := keyspace.Raw(tx).Bucket(usageNS.Bytes())
		return b.Put([]byte("legacy"), encodeUsage(Usage{Records: 2, Bytes: 20}))
	}))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return account(tx, nil, "legacy|POST /x", "a", -1, -10) }))
	u, err = l.Usage(ctx, "legacy")
	require.NoError(t, err)
	require.Equal(t, Usage{Records: 1, Bytes: 10}, u)

	// So do the 256 counters of versions before 2026-12, their shard in
	// one byte: they add to the 1,024 of now, which take the records
	// they counted away.
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := keyspace.Raw(tx).Bucket(usageNS.Bytes())
		if err := b.Put([]byte("old\x00\x07"), encodeUsage(Usage{Records: 2, Bytes: 20})); err != nil {
			return err
		}
		return b.Put([]byte("old\x00\xff"), encodeUsage(Usage{Records: 1, Bytes: 10}))
	}))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error { return account(tx, nil, "old|POST /x", "a", -1, -10) }))
	u, err = l.Usage(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, Usage{Records: 2, Bytes: 20}, u)
	require.Len(t, usageKey("old", "old|POST /x", "a"), len("old")+3, "a shard of now is two bytes")
}

// bounded presents a backend whose transactions carry at most maxOps
// operations (0: as the backend says).
type bounded struct {
	kv.Backend
	maxOps int
}

func (b bounded) Traits() kv.Traits {
	t := b.Backend.Traits()
	if b.maxOps > 0 {
		t.MaxTxOps = b.maxOps
	}
	return t
}

// keyedDB opens a database over a bbolt file as a backend with several
// writers (etcd): the records are keyed, and usage kept in counters.
func keyedDB(t *testing.T, opts *kv.Options) *kv.DB {
	t.Helper()
	db, err := kv.New(severalWriters{kvtest.Open(t, opts)}, opts)
	require.NoError(t, err)
	return db
}

// severalWriters presents a backend as one with several writers.
type severalWriters struct{ kv.Backend }

func (b severalWriters) Traits() kv.Traits {
	t := b.Backend.Traits()
	t.SingleWriter = false
	return t
}

// A usage counter whose value does not decode is reported by the check,
// by tenant; the complete-marker beside the counters is not a counter.
// (Counters are kept where the records are keyed: etcd.)
func TestCheckReportsADamagedUsageCounter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := keyedDB(t, nil)
	l, err := New(db, nil)
	require.NoError(t, err)
	_, err = l.Do(ctx, Request{Scope: "acme|POST /x", Key: "k", Fingerprint: Fingerprint{1}},
		func(kv.Tx) (Response, error) { return Response{Status: 201}, nil })
	require.NoError(t, err)
	ps, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, ps, "the marker and a good counter are no problem")
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		return keyspace.Raw(tx).Bucket(usageNS.Bytes()).Put([]byte("globex"), []byte{0xff})
	}))
	ps, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	var msgs []string
	for _, p := range ps {
		msgs = append(msgs, p.Message)
	}
	require.Contains(t, strings.Join(msgs, "\n"), `usage of tenant "globex": `)
}

// RecountUsage mends what the check finds in the usage counters: a
// counter that does not decode (which stops its tenant's writes), one that
// drifted from the records, one kept for a tenant without records, and a
// file whose usage was never counted; afterwards the check is clean, the
// tenant writes again and its usage is exact. With one writer and with
// (Counters are kept where the records are keyed, as on etcd, where a
// tenant's counters are shards), and on a backend whose transactions carry
// few writes (the recount then takes several).
func TestRecountUsageMendsTheCounters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		maxOps  int
		commits int // the recount's transactions
	}{
		{"several-writers", 0, 1},
		{"bounded-transactions", 4, 2}, // 2 writes each: acme (2), then ghost and globex
		{"bounded-exactly", 8, 1},      // 4 writes: acme (2), ghost and globex fill one exactly
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var commits atomic.Int64
			db, err := kv.New(bounded{severalWriters{kvtest.Open(t, nil)}, tc.maxOps}, &kv.Options{Observer: &observe.Observer{
				Commit: func(observe.Commit) { commits.Add(1) },
			}})
			require.NoError(t, err)
			l, err := New(db, &Config{Quota: &Quota{MaxRecords: 1000, MaxCountAge: -1}}) // every check reads every counter of the tenant
			require.NoError(t, err)
			do := func(scope, key string) error {
				_, err := l.Do(ctx, Request{Scope: scope, Key: key, Fingerprint: Fingerprint{1}}, func(kv.Tx) (Response, error) {
					return Response{Status: 201, Body: []byte("ok " + key)}, nil
				})
				return err
			}
			for i := range 3 {
				require.NoError(t, do("acme|POST /x", fmt.Sprintf("a-%d", i)))
			}
			for i := range 2 {
				require.NoError(t, do("globex|POST /x", fmt.Sprintf("g-%d", i)))
			}
			acme, err := l.Usage(ctx, "acme")
			require.NoError(t, err)
			globex, err := l.Usage(ctx, "globex")
			require.NoError(t, err)
			require.EqualValues(t, 3, acme.Records)
			nothing, err := RecountUsage(ctx, db)
			require.NoError(t, err)
			require.Empty(t, nothing, "every counter was right")

			require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
				b := usageNS.Bucket(tx)
				c := b.Cursor()
				k, _ := c.Seek([]byte("acme"))
				require.Equal(t, "acme", string(usageTenant(k)))
				if err := b.Put(bytes.Clone(k), []byte("not a usage record")); err != nil {
					return err
				}
				if err := b.Put([]byte("ghost"), encodeUsage(Usage{Records: 2, Bytes: 90})); err != nil {
					return err
				}
				return account(tx, nil, "globex|POST /x", "g-0", 5, 100) // drifted
			}))
			err = do("acme|POST /x", "a-3")
			require.ErrorContains(t, err, `usage of tenant "acme" (RecountUsage, or oncekv recount, counts it again)`)
			problems, err := db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.Len(t, problems, 4, "%v", problems) // acme's damaged counter and its sum, globex, ghost
			for _, p := range problems {
				require.Contains(t, p.Message, mends)
			}

			before := commits.Load()
			mended, err := RecountUsage(ctx, db)
			require.NoError(t, err)
			require.EqualValues(t, tc.commits, commits.Load()-before)
			require.Len(t, mended, 3)
			require.Equal(t, "acme", mended[0].Tenant)
			require.Equal(t, 1, mended[0].Damaged)
			require.Equal(t, acme, mended[0].Now)
			require.Equal(t, UsageRecount{Tenant: "ghost", Was: Usage{Records: 2, Bytes: 90}}, mended[1])
			require.Equal(t, UsageRecount{Tenant: "globex", Was: Usage{Records: globex.Records + 5, Bytes: globex.Bytes + 100}, Now: globex}, mended[2])
			problems, err = db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.Empty(t, problems)
			for tenant, want := range map[string]Usage{"acme": acme, "globex": globex, "ghost": {}} {
				u, err := l.Usage(ctx, tenant)
				require.NoError(t, err)
				require.Equal(t, want, u, tenant)
			}
			require.NoError(t, do("acme|POST /x", "a-3"), "the tenant writes again")
			u, err := l.Usage(ctx, "acme")
			require.NoError(t, err)
			require.EqualValues(t, 4, u.Records)

			// A file whose usage was never counted (counted at the next
			// writable open), with a counter that drifted: the recount
			// mends and reports it, and marks the file counted.
			require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
				if err := usageNS.Bucket(tx).Delete(usageComplete); err != nil {
					return err
				}
				return account(tx, nil, "globex|POST /x", "g-1", 1, 7)
			}))
			mended, err = RecountUsage(ctx, db)
			require.NoError(t, err)
			require.Equal(t, []UsageRecount{{Tenant: "globex", Was: Usage{Records: globex.Records + 1, Bytes: globex.Bytes + 7}, Now: globex}}, mended)
			require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
				require.NotNil(t, usageNS.Bucket(tx).Get(usageComplete))
				return nil
			}))
		})
	}
}

// A scope without a tenant ("|POST /x") is refused with ErrInvalidScope.
// It used to be taken: on bbolt its usage counter's key was empty, and the
// write failed with bbolt's bare "key required"; on etcd its counters went
// under keys beginning with NUL, among the usage bucket's markers. Records
// written then (etcd, or a file from before usage was kept) are not
// counted: opening the file counts usage without them, the check and the
// recount leave them out, and the sweep removes them.
func TestAScopeWithoutATenant(t *testing.T) {
	t.Parallel()
	for _, several := range []bool{false, true} {
		t.Run(fmt.Sprintf("several=%t", several), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := kvtest.NewManualClock(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
			file := kvtest.Open(t, &kv.Options{Clock: clock})
			db := file
			if several {
				var err error
				db, err = kv.New(severalWriters{file}, &kv.Options{Clock: clock})
				require.NoError(t, err)
			}
			l, err := New(db, &Config{Retention: time.Hour})
			require.NoError(t, err)
			ok := func(kv.Tx) (Response, error) { return Response{Status: 201, Body: []byte("ok")}, nil }
			req := Request{Scope: "|POST /x", Key: "k", Fingerprint: Fingerprint{1}}
			_, err = l.Do(ctx, req, ok)
			require.ErrorIs(t, err, ErrInvalidScope)
			require.ErrorContains(t, err, "empty tenant")
			_, err = l.Usage(ctx, "")
			require.ErrorIs(t, err, ErrInvalidScope)

			// A record written before the scope was refused.
			require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
				_, err := l.doTx(ctx, tx, req, ok, nil, recstore.Probe{})
				return err
			}))
			_, err = l.Do(ctx, Request{Scope: "acme|POST /x", Key: "k", Fingerprint: Fingerprint{1}}, ok)
			require.NoError(t, err)
			usageKeys := func() (keys []string) {
				require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
					keys = nil // a read run again (etcd) starts afresh
					b := keyspace.Raw(tx).Bucket(usageNS.Bytes())
					if b == nil {
						return nil
					}
					c := b.Cursor()
					for k, _ := c.First(); k != nil; k, _ = c.Next() {
						keys = append(keys, string(k))
					}
					return nil
				}))
				return keys
			}
			usage := func() map[string]Usage {
				got := map[string]Usage{}
				require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
					clear(got)
					for tenant, u := range UsageTx(tx) {
						got[tenant] = u
					}
					return nil
				}))
				return got
			}
			// Counters where the records are keyed (shards: several
			// writers), none where they are in the log (counted in memory).
			want := []string{string(usageComplete), string(usageKey("acme", "acme|POST /x", "k"))}
			logged := db.Bolt() != nil
			if logged {
				want = nil
			}
			require.Equal(t, want, usageKeys(), "the record without a tenant is counted")
			require.Len(t, usage(), 1, "the record without a tenant is not counted")
			problems, err := db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.Empty(t, problems)
			mended, err := RecountUsage(ctx, db)
			require.NoError(t, err)
			require.Empty(t, mended)

			// Usage counted at open, for a file from before it was kept.
			if !logged {
				stale := usageKeys()
				require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
					b := keyspace.Raw(tx).Bucket(usageNS.Bytes())
					for _, k := range stale {
						if err := b.Delete([]byte(k)); err != nil {
							return err
						}
					}
					return nil
				}))
			}
			l, err = New(db, &Config{Retention: time.Hour})
			require.NoError(t, err, "the record without a tenant stops the count at open")
			require.Equal(t, want, usageKeys())
			u, err := l.Usage(ctx, "acme")
			require.NoError(t, err)
			require.EqualValues(t, 1, u.Records)

			clock.Advance(2 * time.Hour)
			st, err := retention.Sweep(ctx, db, nil, RecordKind)
			require.NoError(t, err)
			require.Equal(t, 2, st.Deleted())
			if !logged {
				require.Equal(t, []string{string(usageComplete)}, usageKeys())
			}
			require.Empty(t, usage())
			problems, err = db.Check(ctx, RecordKind)
			require.NoError(t, err)
			require.Empty(t, problems)
		})
	}
}

// Where usage is kept in counters (etcd), a store whose records were
// written before usage was kept has no counters yet: the next ledger.New
// counts them. The check says so when it runs in a write transaction (a
// caller's own, through RecordKind.Check); in a read transaction (DB.Check,
// the CLI) it compares nothing and reports nothing, since the writer that
// opens it next counts it. Without records there is nothing to count.
func TestCheckOfUsageNotCountedYet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, records := range []int{0, 1} {
		db := keyedDB(t, nil)
		l, err := New(db, nil)
		require.NoError(t, err)
		for i := range records {
			_, err = l.Do(ctx, Request{Scope: "acme|POST /x", Key: fmt.Sprint(i), Fingerprint: Fingerprint{1}}, created)
			require.NoError(t, err)
		}
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			b, err := usageNS.Create(tx)
			if err != nil {
				return err
			}
			return b.Delete(usageComplete) // as a store from before usage was kept
		}))
		var reports []string
		check := func(tx kv.Tx) error {
			reports = nil // a rerun build runs this twice
			RecordKind.Check(tx, func(msg string) { reports = append(reports, msg) })
			return nil
		}
		require.NoError(t, db.View(ctx, check))
		require.Empty(t, reports, "read-only: the next writer counts it")
		require.NoError(t, db.Update(ctx, check))
		if records == 0 {
			require.Empty(t, reports, "nothing to count")
		} else {
			require.Equal(t, []string{"tenant usage is not counted although records exist" + mends}, reports)
		}
	}
}
