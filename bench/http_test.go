package bench

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// orderHandler is the business handler: store the order, answer 201. With
// the middleware it writes through the request's transaction; without it,
// it runs its own group-committed transaction, as a plain service would.
func orderHandler(db *kv.DB) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("X-Order")
		write := func(tx kv.Tx) error { return putOrder(tx, []byte(id)) }
		var err error
		if tx, ok := idemhttp.Tx(r.Context()); ok {
			err = write(tx)
		} else {
			err = db.Batch(r.Context(), write)
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"bytes":%d}`, id, len(body))
	})
}

// load sends n POSTs from c concurrent clients and returns the mean latency.
func load(b *testing.B, url string, n, c int, seq *atomic.Int64) time.Duration {
	var total atomic.Int64
	var wg sync.WaitGroup
	work := make(chan struct{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c}}
	for range c {
		wg.Go(func() {
			for range work {
				i := seq.Add(1)
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(orderValue))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer bench")
				req.Header.Set("Idempotency-Key", fmt.Sprintf("key-%d", i))
				req.Header.Set("X-Order", string(key("ord", int(i))))
				start := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				total.Add(int64(time.Since(start)))
				if resp.StatusCode != 201 {
					b.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	client.CloseIdleConnections()
	return time.Duration(total.Load() / int64(n))
}

// BenchmarkMiddleware compares the latency of POST /v1/orders through the
// idempotency middleware with the same handler without it, on real loopback
// servers, at the same concurrency, alternating rounds in one run.
func BenchmarkMiddleware(b *testing.B) {
	for _, sync := range []bool{false, true} {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("durable=%t/clients=%d", sync, clients), func(b *testing.B) {
				opts := &kv.Options{NoSync: !sync}
				plainDB, mwDB := openDB(b, "plain", opts), openDB(b, "mw", opts)
				l, err := ledger.New(mwDB, nil)
				if err != nil {
					b.Fatal(err)
				}
				mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
				if err != nil {
					b.Fatal(err)
				}
				plain := httptest.NewServer(orderHandler(plainDB))
				defer plain.Close()
				mux := http.NewServeMux()
				mux.Handle("POST /v1/orders", mw.Wrap(orderHandler(mwDB)))
				wrapped := httptest.NewServer(mux)
				defer wrapped.Close()

				var seq atomic.Int64
				var p pair
				b.ResetTimer()
				const rounds = 4
				per := max(b.N/rounds, clients)
				for range rounds {
					p.bare += load(b, plain.URL+"/v1/orders", per, clients, &seq) * time.Duration(b.N) / rounds
					p.subject += load(b, wrapped.URL+"/v1/orders", per, clients, &seq) * time.Duration(b.N) / rounds
				}
				p.report(b)
			})
		}
	}
}
