package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

// payRoute serves POST /v1/orders/{id}/pay in the request's transaction: it
// marks the order paid and answers with its ID. Orders A and B start pending.
func payRoute(t *testing.T) (*kv.DB, *httptest.Server) {
	t.Helper()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind, sideeffect.RecordKind)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	require.NoError(t, err)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		for _, id := range []string{"A", "B"} {
			if err := b.Put([]byte(id), []byte("pending")); err != nil {
				return err
			}
		}
		return nil
	}))
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders/{id}/pay", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		id := r.PathValue("id")
		if err := tx.Bucket([]byte("orders")).Put([]byte(id), []byte("paid")); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "paid %s (dry_run=%q)", id, r.URL.Query().Get("dry_run"))
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return db, srv
}

// postPay POSTs an empty body to srv's path with the Idempotency-Key key
// (none when key is empty).
func postPay(t *testing.T, srv *httptest.Server, path, key string) reply {
	t.Helper()
	r, err := tryPost(t, srv, path, key, "")
	require.NoError(t, err)
	return r
}

// tryPost is postPay with a body, returning the error of a request that
// got no answer (a connection the server broke).
func tryPost(t *testing.T, srv *httptest.Server, path, key, body string) (reply, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, nil
}

func orderState(t *testing.T, db *kv.DB, id string) string {
	var s string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		s = string(tx.Bucket([]byte("orders")).Get([]byte(id)))
		return nil
	}))
	return s
}

// A key reused on another resource of the same route is a mismatch (422),
// never a replay of the first resource's answer (issue 13, item 1).
func TestKeyReusedOnAnotherResourceIsRejected(t *testing.T) {
	t.Parallel()
	db, srv := payRoute(t)
	a := postPay(t, srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 200, a.status)
	require.Equal(t, `paid A (dry_run="")`, a.body)

	b := postPay(t, srv, "/v1/orders/B/pay", "K")
	require.Equal(t, 422, b.status, b.body)
	require.Equal(t, idemhttp.ProblemKeyReused, problemType(t, b))
	require.Empty(t, b.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, "pending", orderState(t, db, "B"), "B was not touched")

	// The same resource is still a replay.
	again := postPay(t, srv, "/v1/orders/A/pay", "K")
	require.Equal(t, "true", again.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, a.body, again.body)

	// Escaped paths are compared as sent: %41 is not A.
	esc := postPay(t, srv, "/v1/orders/%41/pay", "K")
	require.Equal(t, 422, esc.status, esc.body)
}

// A POST that differs only in its query string is another request.
func TestKeyReusedWithAnotherQueryIsRejected(t *testing.T) {
	t.Parallel()
	db, srv := payRoute(t)
	first := postPay(t, srv, "/v1/orders/B/pay?dry_run=1", "Q")
	require.Equal(t, 200, first.status)
	require.Equal(t, `paid B (dry_run="1")`, first.body)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		return tx.Bucket([]byte("orders")).Put([]byte("B"), []byte("pending"))
	}))
	other := postPay(t, srv, "/v1/orders/B/pay", "Q")
	require.Equal(t, 422, other.status, other.body)
	require.Equal(t, "pending", orderState(t, db, "B"))
	require.Equal(t, 422, postPay(t, srv, "/v1/orders/B/pay?dry_run=0", "Q").status)
	require.Equal(t, "true", postPay(t, srv, "/v1/orders/B/pay?dry_run=1", "Q").header.Get(idemhttp.HeaderReplayed))
}
