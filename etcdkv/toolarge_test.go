package etcdkv_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// openDB opens a database on a one-member cluster of its own, under
// prefix, closed when the test ends; it returns the cluster too.
func openDB(t *testing.T, prefix string) (*kv.DB, *embedded.Cluster) {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return dbOn(t, b, nil), c
}

// An answer too large for one etcd transaction (2 MiB that do not
// compress, under the ledger's 8 MiB bound) is a 500 that says so, not
// the generic internal error: nothing is stored, the handler's write
// included, and a retry fails the same way.
func TestAnswerTooLargeForEtcdSaysSo(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, "/large/")
	l, err := ledger.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20)
	_, _ = rand.Read(big)
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		bk, err := tx.CreateBucketIfNotExists([]byte("exports"))
		if err == nil {
			err = bk.Put([]byte("e1"), []byte("made"))
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(big)
	})))
	defer srv.Close()
	for attempt := range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/exports", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemhttp.HeaderKey, "export-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p idemhttp.Problem
		_ = json.Unmarshal(body, &p)
		if resp.StatusCode != http.StatusInternalServerError || p.Title != "Too large to store" || !strings.Contains(p.Detail, "a retry fails the same way") {
			t.Fatalf("attempt %d: %d %q; want 500 Too large to store", attempt, resp.StatusCode, clip(body))
		}
	}
	if err := db.View(t.Context(), func(tx kv.Tx) error {
		if bk := tx.Bucket([]byte("exports")); bk != nil && bk.Get([]byte("e1")) != nil {
			return fmt.Errorf("the handler's write was stored without its answer")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if u, err := l.Usage(t.Context(), "acme"); err != nil || u != (ledger.Usage{}) {
		t.Fatalf("the tenant's usage is %+v, %v; want no record stored", u, err)
	}
}

func clip(b []byte) string { return string(b[:min(len(b), 300)]) }

// A transaction that read more keys than one etcd Txn may compare is
// guarded by a compare of each bucket's whole range instead (coarser:
// more conflicts, but it fits). It is still refused when another process
// writes a key it read, and runs again.
func TestCoarseComparesStillGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	a, err := etcdkv.New(client(t, c), &etcdkv.Options{Prefix: "/coarse/", MaxTxOps: 8, NoGuessing: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcdkv.New(client(t, c), &etcdkv.Options{Prefix: "/coarse/"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(t, b, fmt.Sprint("k", i), "0")
	}
	runs := 0
	if err := a.Update(ctx, func(tx kv.Tx) error {
		runs++
		bk := tx.Bucket([]byte("a"))
		sum := 0
		for i := range 20 {
			n, _ := strconv.Atoi(string(bk.Get([]byte(fmt.Sprint("k", i)))))
			sum += n
		}
		if runs == 1 {
			put(t, b, "k13", "5")
		}
		return bk.Put([]byte("sum"), []byte(strconv.Itoa(sum)))
	}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, a, "sum"); got != "5" || runs != 2 {
		t.Errorf("sum = %q after %d runs, want 5 after 2: the write of a key read went unseen", got, runs)
	}
}
