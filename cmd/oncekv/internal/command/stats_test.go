package command

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

func TestStats(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("stats", "--db", db)
	require.Equal(t, 0, code)
	require.Regexp(t, `idempotency.completed\s+3`, out)
	require.Regexp(t, `ledger\.tail\s+5\s+1`, out)
	require.Regexp(t, `TENANT\s+RECORDS\s+STORED BYTES\nacme\s+4\s+\d+\nglobex\s+1\s+\d+`, out, "usage per tenant (issue 13, item 9)")
	out, _, _ = run("stats", "--db", db, "--json")
	var st inspect.Stats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, map[string]int{
		"idempotency.completed": 3, "idempotency.in_progress": 1, "idempotency.expired": 1,
		"intent.succeeded": 1, "intent.needs_attention": 1, "intent.pending": 1,
		"outbox.pending": 1, "outbox.published": 2, "outbox.quarantined": 1, "inbox.ids": 2,
	}, st.Counts)
	require.Equal(t, kv.FormatVersion, st.FormatVersion)
	require.Positive(t, st.FileBytes)
	require.Equal(t, 4096, st.PageSize)
	require.Len(t, st.Tenants, 2)
	require.Equal(t, inspect.TenantUsage{Tenant: "acme", Records: 4, Bytes: st.Tenants[0].Bytes}, st.Tenants[0])
	require.Positive(t, st.Tenants[0].Bytes)
}

// The writer line of `oncekv stats`: idle, or held for how long, with the
// writes queued either way.
func TestWriterLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "idle; 0 writes queued", writerLine(inspect.Stats{}))
	require.Equal(t, "held for 2.5s by the running write transaction; 7 writes queued",
		writerLine(inspect.Stats{WriterHeldSeconds: 2.5, WriterQueued: 7}))
}

// `oncekv stats --addr` shows what the service's backend counts of its
// own (etcd's conflicts and lost answers: here a backend that counts its
// write transactions), in text and in --json; a file has none to show.
func TestStatsShowTheBackendsCounts(t *testing.T) {
	t.Parallel()
	backend := kvtest.Counting(kvtest.Open(t, &kv.Options{NoSync: true}))
	db, err := kv.New(backend, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	_, err = l.Do(t.Context(), ledger.Request{Scope: "acme|POST /x", Key: "k", Fingerprint: ledger.Fingerprint{1}},
		func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
	require.NoError(t, err)
	h, err := inspect.Handler(db, inspect.HandlerOptions{})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	n := backend.Updates()
	out, stderr, code := run("stats", "--addr", srv.URL)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, fmt.Sprintf(`BACKEND COUNT \(counting\)\s+VALUE\nupdates\s+%d\n`, n), out)
	out, _, code = run("stats", "--addr", srv.URL, "--json")
	require.Equal(t, 0, code)
	var st inspect.Stats
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, []inspect.BackendCount{{Name: "updates", Value: n, Unit: "{transaction}", Description: "Write transactions run."}}, st.BackendCounts)

	out, _, _ = run("stats", "--db", fixture(t))
	require.NotContains(t, out, "BACKEND COUNT")
}
