package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// Wrap an in-transaction handler: its writes, the idempotency record and the
// stored response commit together. A retry with the same key gets the stored
// answer byte for byte; the same key on another order is a 422.
func Example() {
	dir, _ := os.MkdirTemp("", "idemhttp-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	l, _ := ledger.New(db, nil)
	mw, err := idemhttp.New(&idemhttp.Config{
		Ledger: l,
		Tenant: func(r *http.Request) (string, error) { return "acme", nil }, // from your own authentication
	})
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders/{id}/pay", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context()) // the ledger's transaction
		paid, err := tx.CreateBucketIfNotExists([]byte("paid"))
		if err == nil {
			err = paid.Put([]byte(r.PathValue("id")), []byte("yes"))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: nothing stored
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%q,"paid":true}`, r.PathValue("id"))
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	pay := func(order, key string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/orders/"+order+"/pay", strings.NewReader(`{"amount":1200}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed), strings.TrimSpace(string(body))[:min(len(body), 40)])
	}
	pay("A", "k-1") // runs
	pay("A", "k-1") // a retry: replayed
	pay("B", "k-1") // the key reused on another resource: 422
	// Output:
	// 201  {"order":"A","paid":true}
	// 201 true {"order":"A","paid":true}
	// 422  {"type":"https://oncekv.dev/problems/ide
}
