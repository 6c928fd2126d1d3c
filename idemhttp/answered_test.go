package idemhttp_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// A client that has read a whole answer finds it counted: Stats, OnEvent
// and the observer report a request before its answer is written. A small
// answer left only as the handler returned, after the report, but a large
// one with its Content-Length leaves as it is written, and used to reach
// the client before the report (a service's test that read Stats after
// the response saw the request missing). OnEvent here waits before it
// notes the event, so that an answer sent before it is seen.
func TestAnswerIsCountedBeforeItIsSent(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 256<<10) // past every buffer between the handler and the socket
	var counted atomic.Int32
	reported := make(chan struct{}, 16)
	onEvent := func(idemhttp.Event) {
		time.Sleep(50 * time.Millisecond)
		counted.Add(1)
		reported <- struct{}{}
	}

	db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind, sideeffect.RecordKind)
	l, err := ledger.New(db, &ledger.Config{MaxResponseBytes: 1 << 20})
	require.NoError(t, err)
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: providertest.New(providertest.Rates{}, 1)}}})
	require.NoError(t, err)
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Executor: x, Tenant: func(*http.Request) (string, error) { return "acme", nil },
		KeepHeaders: []string{"Content-Length"}, OnEvent: onEvent})
	require.NoError(t, err)

	var status atomic.Int32
	status.Store(http.StatusCreated)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/reports", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		b, err := tx.CreateBucketIfNotExists([]byte("reports"))
		if err == nil {
			err = b.Put([]byte(r.Header.Get("Idempotency-Key")), []byte("made"))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write(big)
	})))
	mux.Handle("POST /v1/reports/{id}/pay", mw.WrapExternal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Perform(w, r, sideeffect.Spec{Kind: "charge", Subject: "report/" + r.PathValue("id"), Scope: "acme", Key: r.PathValue("id"), Purpose: "charge"},
			func(kv.Tx, *sideeffect.Intent) (ledger.Response, error) {
				return ledger.Response{Status: http.StatusOK, Header: http.Header{"Content-Length": {strconv.Itoa(len(big))}}, Body: big}, nil
			})
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	send := func(path, key string, wantStatus int) {
		t.Helper()
		before := counted.Load()
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader([]byte(`{}`)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, resp.Body.Close())
		require.NoError(t, err)
		require.Equal(t, wantStatus, resp.StatusCode)
		require.Len(t, body, len(big))
		assert.Equal(t, before+1, counted.Load(), fmt.Sprintf("%s %s: the answer reached the client before its event was reported", path, key))
		testwait.Receive(t, reported, "the event of", path, key) // reported by now, or on its way: the next request starts from it
	}

	send("/v1/reports", "r1", http.StatusCreated) // executed
	send("/v1/reports", "r1", http.StatusCreated) // replayed, with the kept Content-Length
	status.Store(http.StatusServiceUnavailable)   // not stored: the handler's own answer
	send("/v1/reports", "r2", http.StatusServiceUnavailable)
	send("/v1/reports/p1/pay", "p1", http.StatusOK) // a provider's side effect, executed
	send("/v1/reports/p1/pay", "p1", http.StatusOK) // and replayed before the handler runs
	st := mw.Stats()
	require.Equal(t, uint64(2), st.Executed)
	require.Equal(t, uint64(2), st.Replayed)
	require.Equal(t, uint64(1), st.NotStored)
}
