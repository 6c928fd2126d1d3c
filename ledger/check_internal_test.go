package ledger

import (
	"context"
	"path/filepath"
	"strings"
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

// The check reports a usage counter that does not decode and one kept for
// a tenant without records, beside the counts they then disagree with
// (where the records are keyed, as on etcd: in the log, usage is counted in
// memory).
func TestCheckReportsDamagedAndStrayUsage(t *testing.T) {
	ctx := context.Background()
	db := keyedDB(t, nil)
	l, err := New(db, nil)
	require.NoError(t, err)
	_, err = l.Do(ctx, Request{Scope: "acme|POST /x", Key: "k", Fingerprint: Fingerprint{1}}, func(kv.Tx) (Response, error) {
		return Response{Status: 201}, nil
	})
	require.NoError(t, err)
	problems, err := db.Check(ctx, RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b := usageNS.Bucket(tx)
		if err := b.Put([]byte("acme"), []byte("not a usage record")); err != nil {
			return err
		}
		return b.Put([]byte("ghost"), encodeUsage(Usage{Records: 2, Bytes: 90}))
	}))
	problems, err = db.Check(ctx, RecordKind)
	require.NoError(t, err)
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Message)
	}
	require.Contains(t, msgs, `tenant "ghost": usage says 2 records, 90 bytes, but it has none`+mends)
	found := false
	for _, m := range msgs {
		found = found || strings.HasPrefix(m, `usage of tenant "acme": `)
	}
	require.True(t, found, "the damaged counter is named: %v", msgs)
}
