package ledger

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
)

// After a record is stored, the buffer Do allocates before its next
// transaction (entryBuffer) holds a record of the same size: store encodes
// that one straight into it, log entry and all, without allocating another
// under the writer's lock. On bbolt, whose write transaction hands back the
// slice it was given (what the test looks at), whatever backend the suite
// runs on.
func TestTheNextRecordIsEncodedIntoTheBufferAllocatedAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := kv.Open(filepath.Join(t.TempDir(), "buf.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l, err := New(db, nil)
	require.NoError(t, err)
	require.Nil(t, l.entryBuffer(), "no size known before the first record")

	const scope = "acme|POST /v1/orders"
	resp := Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ord_1","status":"pending"}`)}
	_, err = l.Do(ctx, Request{Scope: scope, Key: "first", Fingerprint: Fingerprint{1}}, func(kv.Tx) (Response, error) { return resp, nil })
	require.NoError(t, err)

	// inBuf reports whether the value stored for key in tx lies in buf's
	// array: bbolt hands back, within the writing transaction, the slice
	// it was given.
	inBuf := func(tx kv.Tx, key string, buf []byte) bool {
		_, v, err := l.records.Get(tx, scope, key)
		require.NoError(t, err)
		require.NotEmpty(t, v)
		all := buf[:cap(buf)]
		for i := range all {
			if &all[i] == &v[0] {
				return true
			}
		}
		return false
	}
	now := time.Now()
	record := func(key string) *Record {
		return &Record{Scope: scope, Key: key, Status: StatusCompleted, Fingerprint: Fingerprint{2}, Version: 1,
			CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(time.Hour), Response: &resp}
	}
	buf := l.entryBuffer()
	require.NotNil(t, buf)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		require.NoError(t, l.store(ctx, tx, recstore.Ref{}, record("ahead"), nil, buf))
		require.True(t, inBuf(tx, "ahead", buf), "encoded into the buffer allocated ahead")
		return nil
	}))

	// A two-phase claim stores a record without a response, smaller than
	// Do's: the buffer stays sized for Do's records.
	_, err = l.Claim(ctx, Request{Scope: scope, Key: "claimed", Fingerprint: Fingerprint{3}})
	require.NoError(t, err)
	buf = l.entryBuffer()
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		require.NoError(t, l.store(ctx, tx, recstore.Ref{}, record("after-claim"), nil, buf))
		require.True(t, inBuf(tx, "after-claim", buf), "a claim does not shrink the buffer under Do's record")
		return nil
	}))
}
