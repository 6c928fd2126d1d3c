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
	"github.com/oncekv/oncekv/observe"
)

// reportCommits reports, with prefix, the requests per commit, the mean
// commit's time (its transaction, page writes and fsync) and its write
// phase alone, and the pages it wrote, from the commits c counted for ops
// requests.
func reportCommits(b *testing.B, prefix string, c *commitStats, ops int) {
	var res Result
	res.Ops = int64(ops)
	c.fill(&res)
	b.ReportMetric(res.Batch, prefix+"batch")
	b.ReportMetric(res.CommitUs, prefix+"commit-us")
	b.ReportMetric(res.WriteUs, prefix+"write-us")
	b.ReportMetric(res.Pages, prefix+"pages")
}

// orderHandler is the business handler: store the order, answer 201. With
// the middleware it writes through the request's transaction; without it,
// it runs its own group-committed transaction, as a plain service would.
func orderHandler(db *kv.DB) http.Handler { return orderHandlerWith(db, nil) }

// orderHandlerWith is orderHandler whose transaction also runs also (if
// not nil) after the order's Put.
func orderHandlerWith(db *kv.DB, also func(kv.Tx) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("X-Order")
		write := func(tx kv.Tx) error {
			if err := putOrder(tx, []byte(id)); err != nil || also == nil {
				return err
			}
			return also(tx)
		}
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
func BenchmarkMiddleware(b *testing.B) { httpPairs(b, protectedOrders) }

// protectedOrders is the order handler behind the idempotency middleware,
// on a ledger over db.
func protectedOrders(b *testing.B, db *kv.DB) http.Handler {
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	if err != nil {
		b.Fatal(err)
	}
	return mw.Wrap(orderHandler(db))
}

// BenchmarkFloorMiddleware is the floor under BenchmarkMiddleware: the
// same handler without the middleware, whose transaction also puts a
// value as large as the middleware's log entry at the tail of a second
// bucket (raw bbolt, no fingerprint, no look-up, no encoding).
func BenchmarkFloorMiddleware(b *testing.B) {
	size := middlewareEntrySize(b)
	httpPairs(b, func(_ *testing.B, db *kv.DB) http.Handler { return orderHandlerWith(db, floorRecord(size)) })
}

// middlewareEntrySize returns the size of the log entry the middleware
// stores for an order (measured on a scratch file).
func middlewareEntrySize(b *testing.B) int {
	req := ledger.Request{Scope: "acme|POST /v1/orders", Key: "key-1000000", Fingerprint: ledger.Fingerprint{1}}
	resp := ledger.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}},
		Body: fmt.Appendf(nil, `{"id":%q,"bytes":%d}`, key("ord", 1000000), len(orderValue))}
	size, err := storedEntrySize(ctx, openDB(b, "size", &kv.Options{NoSync: true}), req, resp)
	if err != nil {
		b.Fatal(err)
	}
	return size
}

// httpPairs runs, durable or not and at 1 and 16 clients, the plain
// order handler against the handler subject returns on its own file, each
// behind a ServeMux on a loopback server (so the pair differs by what
// subject adds alone), alternating rounds in one run.
func httpPairs(b *testing.B, subject func(*testing.B, *kv.DB) http.Handler) {
	for _, sync := range []bool{false, true} {
		for _, clients := range []int{1, 16} {
			b.Run(fmt.Sprintf("durable=%t/clients=%d", sync, clients), func(b *testing.B) {
				var plainStats, subjectStats commitStats
				plainDB := openDB(b, "plain", &kv.Options{NoSync: !sync, Observer: &observe.Observer{Commit: plainStats.add}})
				subjectDB := openDB(b, "subject", &kv.Options{NoSync: !sync, Observer: &observe.Observer{Commit: subjectStats.add}})
				plainStats.db, subjectStats.db = plainDB, subjectDB
				serve := func(h http.Handler) *httptest.Server {
					mux := http.NewServeMux()
					mux.Handle("POST /v1/orders", h)
					srv := httptest.NewServer(mux)
					b.Cleanup(srv.Close)
					return srv
				}
				plain, wrapped := serve(orderHandler(plainDB)), serve(subject(b, subjectDB))

				var seq atomic.Int64
				var p pair
				b.ResetTimer()
				plainStats.reset()
				subjectStats.reset()
				const rounds = 4
				per := max(b.N/rounds, clients)
				for range rounds {
					p.bare += load(b, plain.URL+"/v1/orders", per, clients, &seq) * time.Duration(b.N) / rounds
					p.subject += load(b, wrapped.URL+"/v1/orders", per, clients, &seq) * time.Duration(b.N) / rounds
				}
				p.report(b)
				reportCommits(b, "bare-", &plainStats, per*rounds)
				reportCommits(b, "", &subjectStats, per*rounds)
			})
		}
	}
}
