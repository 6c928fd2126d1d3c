package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/retention"
)

// The sweeper re-checks each record before it deletes it; a mutation that
// dropped those checks survived every test (issue 13, item 17). Here the
// index says "due" for records that must stay: an in-progress claim whose
// lease is still live (a clock step can cause it), an index entry whose time
// differs from the record's expiry, and a record not yet expired.
func TestSweepRechecksRecordState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := kvtest.NewManualClock(t0)
	db, err := kv.Open(filepath.Join(t.TempDir(), "s.db"), &kv.Options{NoSync: true, Clock: clock})
	require.NoError(t, err)
	defer db.Close()
	l, err := New(db, &Config{Retention: time.Hour, Lease: time.Minute})
	require.NoError(t, err)
	for _, k := range []string{"live-lease", "moved", "fresh", "gone"} {
		_, err := l.Claim(ctx, Request{Scope: "acme|POST /x", Key: k, Fingerprint: Fingerprint{1}})
		require.NoError(t, err)
	}
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		edit := func(key string, f func(r *Record)) {
			ref, r, err := l.load(tx, "acme|POST /x", key, true)
			require.NoError(t, err)
			prev := *r
			f(r)
			require.NoError(t, l.store(ctx, tx, ref, r, &prev, nil))
		}
		edit("live-lease", func(r *Record) { r.LeaseExpiresAt = t0.Add(10 * time.Hour) })
		edit("fresh", func(r *Record) { r.ExpiresAt = t0.Add(48 * time.Hour) })
		// "moved": its log entry moves to its new expiry; a stale copy is
		// left at the old place, where the record's expiry does not match.
		edit("moved", func(r *Record) { r.ExpiresAt = t0.Add(30 * time.Minute) })
		ref, _, err := l.records.Get(tx, "acme|POST /x", "moved")
		require.NoError(t, err)
		require.NoError(t, recstore.FlushTail(tx, recordSpec))
		log := keyspace.New(recordSpec.Name + ".log").Bucket(tx)
		stale := binary.BigEndian.AppendUint64(nil, uint64(t0.Add(time.Hour).Unix())<<30|7)
		return log.Put(stale, bytes.Clone(log.Get(ref.Cursor())))
	}))
	clock.Advance(2 * time.Hour)
	st, err := retention.Sweep(ctx, db, nil, RecordKind)
	require.NoError(t, err)
	ks := st.Kinds[retention.Idempotency]
	require.Equal(t, 2, ks.Deleted, "gone, and moved at its real expiry")
	require.Equal(t, map[string]int{"live lease": 1, "index mismatch": 1}, ks.Skipped)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for _, k := range []string{"live-lease", "fresh"} {
			_, err := l.GetTx(tx, "acme|POST /x", k, true)
			require.NoError(t, err, "%s was kept", k)
		}
		return nil
	}))
	clock.Advance(47 * time.Hour) // fresh expires; live-lease's lease is over
	st, err = retention.Sweep(ctx, db, nil, RecordKind)
	require.NoError(t, err)
	require.Equal(t, 2, st.Kinds[retention.Idempotency].Deleted)
}
