package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/diskfull"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// On a full disk a request that needs space is answered 503 with
// Retry-After (not a 500: nothing is wrong with the request or the
// service's code), stores nothing and is logged as an error; replays go
// on. Once space returns, its retry runs, once, without a restart.
func TestDiskFullIsServiceUnavailable(t *testing.T) {
	t.Parallel()
	dir := diskfull.Mount(t, 1<<20)
	db := kvtest.OpenPath(t, filepath.Join(dir, "orders.db"), nil, ledger.RecordKind) // durable
	kvtest.RequireBolt(t, db)
	mw, logs := loggedMiddleware(t, db)
	var runs atomic.Int32
	body := strings.Repeat("x", 3000) // a stored answer that needs pages of its own
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		countRun(&runs)
		if writeOrder(w, r, []byte(r.Header.Get("Idempotency-Key"))) {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, body)
		}
	})))
	t.Cleanup(srv.Close)

	require.Equal(t, http.StatusCreated, postPay(t, srv, "/", "k-before").status)
	free := diskfull.Fill(t, dir, 0)
	var r reply
	var refused string
	for i := 0; ; i++ { // pages bbolt freed may take a request or two first
		refused = fmt.Sprintf("k-full-%d", i)
		r = postPay(t, srv, "/", refused)
		if r.status != http.StatusCreated {
			break
		}
		require.Less(t, i, 32, "a full disk took 32 answers of 3 KB")
	}
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
	require.Equal(t, idemhttp.ProblemUnavailable, problemType(t, r))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Contains(t, r.body, "disk is full")
	require.Contains(t, logs.String(), `level=ERROR msg="idempotent request not stored: the database's disk is full"`)
	replay := postPay(t, srv, "/", "k-before")
	require.Equal(t, http.StatusCreated, replay.status)
	require.Equal(t, "true", replay.header.Get(idemhttp.HeaderReplayed), "replays go on")
	orders := countOrders(t, db)

	free()
	ran := runs.Load()
	retry := postPay(t, srv, "/", refused)
	require.Equal(t, http.StatusCreated, retry.status, retry.body)
	require.Equal(t, body, retry.body)
	require.Empty(t, retry.header.Get(idemhttp.HeaderReplayed), "the refused request stored nothing")
	require.Equal(t, ran+1, runs.Load(), "its retry runs, once")
	require.Equal(t, orders+1, countOrders(t, db))
}
