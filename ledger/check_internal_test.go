package ledger

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
)

// The check reports a claim whose lease outlives its record's retention
// (the sweep would keep it past its expiry), and nothing for a claim whose
// lease ends first.
func TestCheckReportsALeaseOutlivingItsRetention(t *testing.T) {
	ctx := context.Background()
	db, err := kv.Open(filepath.Join(t.TempDir(), "c.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	l, err := New(db, &Config{Retention: time.Hour, Lease: time.Minute})
	require.NoError(t, err)
	for _, k := range []string{"fine", "outlives"} {
		_, err := l.Claim(ctx, Request{Scope: "acme|POST /x", Key: k, Fingerprint: Fingerprint{1}})
		require.NoError(t, err)
	}
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		ref, r, err := l.load(tx, "acme|POST /x", "outlives", false)
		require.NoError(t, err)
		prev := *r
		r.LeaseExpiresAt = r.ExpiresAt.Add(time.Minute)
		return l.store(ctx, tx, ref, r, &prev, nil)
	}))
	problems, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Len(t, problems, 1)
	require.Contains(t, problems[0].Message, `"outlives": in progress with a lease`)
}
