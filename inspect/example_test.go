package inspect_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// exampleDB opens a scratch database holding two completed orders of
// tenant acme.
func exampleDB() (db *kv.DB, done func()) {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	l, _ := ledger.New(db, nil)
	scope, _ := ledger.Scope("acme", "POST", "/v1/orders")
	for _, key := range []string{"order-1", "order-2"} {
		_, err := l.Do(context.Background(), ledger.Request{Scope: scope, Key: key, Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) {
				return ledger.Response{Status: 201, Body: []byte(`{"id":"` + key + `"}`)}, nil
			})
		if err != nil {
			panic(err)
		}
	}
	return db, func() { _ = db.Close(); _ = os.RemoveAll(dir) }
}

// An Inspector answers the questions asked on call: which keys a tenant
// has, and what one of them stored.
func ExampleInspector() {
	db, done := exampleDB()
	defer done()
	ctx := context.Background()

	in, err := inspect.New(db)
	if err != nil {
		panic(err)
	}
	keys, err := in.Keys(ctx, inspect.KeysQuery{ScopePrefix: "acme|", Status: "completed"})
	if err != nil {
		panic(err)
	}
	for _, k := range keys {
		fmt.Println(k.Scope, k.Key, k.Status, k.ResponseStatus)
	}
	rec, err := in.Get(ctx, "acme|POST /v1/orders", "order-2", true)
	fmt.Println(rec.Key.Key, rec.BodyEncoding, rec.Body, err)
	_, err = in.Get(ctx, "acme|POST /v1/orders", "order-3", false)
	fmt.Println(err)
	// Output:
	// acme|POST /v1/orders order-1 completed 201
	// acme|POST /v1/orders order-2 completed 201
	// order-2 text {"id":"order-2"} <nil>
	// inspect: no such record: scope "acme|POST /v1/orders" key "order-3"
}

// Handler serves the same queries as JSON (and the web console under
// /console/). With no token it answers loopback callers only, bodies
// redacted; mount it on an admin listener, not the public one.
func ExampleHandler() {
	db, done := exampleDB()
	defer done()

	h, err := inspect.Handler(db, inspect.HandlerOptions{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h) // 127.0.0.1: a loopback caller
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/get?scope=acme%7CPOST+/v1/orders&key=order-1&body=1")
	if err != nil {
		panic(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var rec inspect.Record
	_ = json.Unmarshal(raw, &rec)
	fmt.Println(resp.StatusCode, rec.Key.Key, rec.Status, rec.BodyEncoding)

	resp, err = http.Get(srv.URL + "/check")
	if err != nil {
		panic(err)
	}
	_ = resp.Body.Close()
	fmt.Println("/check without the token:", resp.StatusCode)
	http.DefaultClient.CloseIdleConnections()
	// Output:
	// 200 order-1 completed redacted
	// /check without the token: 403
}
