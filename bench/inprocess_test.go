package bench

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/oncekv/oncekv/kv"
)

// BenchmarkMiddlewareInProcess is BenchmarkMiddleware without the network
// or the disk: each request goes through ServeMux.ServeHTTP into an
// httptest.ResponseRecorder, both files NoSync, one request at a time, so
// the pair differs by CPU alone: the middleware's own work (the body's
// buffering, canonical JSON and its hash, the response's capture) and the
// ledger's (look-up, record, directory, usage counter), beside the record's
// pages (it reports the pages each side writes a request: 6.0 for the
// middleware and for its floor, 5.0 for the plain handler, so what
// separates the middleware from its floor is CPU). Its profile
// (-cpuprofile) is the middleware's without the noise of sockets and
// fsync.
func BenchmarkMiddlewareInProcess(b *testing.B) { inProcessPairs(b, protectedOrders) }

// BenchmarkFloorMiddlewareInProcess is the floor under
// BenchmarkMiddlewareInProcess, as BenchmarkFloorMiddleware is under
// BenchmarkMiddleware: the plain handler whose transaction also puts a
// value as large as the middleware's log entry.
func BenchmarkFloorMiddlewareInProcess(b *testing.B) {
	size := middlewareEntrySize(b)
	inProcessPairs(b, func(_ *testing.B, db *kv.DB) http.Handler { return orderHandlerWith(db, floorRecord(size)) })
}

// inProcessPairs times, request by request, the plain order handler on its
// own file against the handler subject returns on another, each behind a
// ServeMux and served in process, NoSync.
func inProcessPairs(b *testing.B, subject func(*testing.B, *kv.DB) http.Handler) {
	plainDB := openDB(b, "plain", &kv.Options{NoSync: true})
	db := openDB(b, "subject", &kv.Options{NoSync: true})
	mux := func(h http.Handler) *http.ServeMux {
		m := http.NewServeMux()
		m.Handle("POST /v1/orders", h)
		return m
	}
	plain, wrapped := mux(orderHandler(plainDB)), mux(subject(b, db))
	serve := func(h http.Handler, i int) {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", bytes.NewReader(orderValue))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("key-%d", i))
		req.Header.Set("X-Order", string(key("ord", i)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	var p pair
	plain0, db0 := pagesWritten(plainDB), pagesWritten(db)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		p.timeBare(func() { serve(plain, i) })
		p.timeSubject(func() { serve(wrapped, i) })
	}
	p.report(b)
	b.ReportMetric(float64(pagesWritten(plainDB)-plain0)/float64(b.N), "bare-pages/op")
	b.ReportMetric(float64(pagesWritten(db)-db0)/float64(b.N), "pages/op")
}
