package idemhttptest_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/idemhttp/idemhttptest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service is a small endpoint built the recommended way: the middleware
// and a handler that writes through the request's transaction.
func service(t *testing.T, path string) (idemhttptest.Target, func() error) {
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	l, err := ledger.New(db, &ledger.Config{RecoverOrphans: true})
	require.NoError(t, err)
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		n, _ := strconv.Atoi(string(b.Get([]byte("count"))))
		if err := b.Put([]byte("count"), []byte(strconv.Itoa(n+1))); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		idemhttptest.Crashpoint("in-handler") // written, not committed
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"order":%d}`, n+1)
	})))
	tg := idemhttptest.Target{
		Handler: mux,
		Request: func() *http.Request {
			r, _ := http.NewRequest("POST", "http://service/v1/orders", strings.NewReader(`{"amount_cents":2500}`))
			r.Header.Set("Idempotency-Key", "order-1")
			r.Header.Set("Content-Type", "application/json")
			return r
		},
		Executions: func() int {
			var n int
			_ = db.View(context.Background(), func(tx kv.Tx) error {
				if b := tx.Bucket([]byte("orders")); b != nil {
					n, _ = strconv.Atoi(string(b.Get([]byte("count"))))
				}
				return nil
			})
			return n
		},
	}
	return tg, db.Close
}

func TestStorm(t *testing.T) {
	t.Parallel()
	tg, closeDB := service(t, filepath.Join(t.TempDir(), "s.db"))
	defer closeDB()
	answers := idemhttptest.Storm(t, tg, 50)
	require.Len(t, answers, 50)
}

func TestLostResponses(t *testing.T) {
	t.Parallel()
	tg, closeDB := service(t, filepath.Join(t.TempDir(), "l.db"))
	defer closeDB()
	a := idemhttptest.LostResponses(t, tg, 3)
	require.Equal(t, 201, a.Status)
	require.Equal(t, `{"order":1}`, string(a.Body))
}

func TestCloseRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.db")
	a := idemhttptest.CloseRestart(t, path, func(p string) (idemhttptest.Target, func() error) { return service(t, p) })
	require.Equal(t, 201, a.Status)
}

// A real crash (issue 13, item 18): the service runs in a child process
// that is killed with SIGKILL inside the handler (before the commit) or
// after the commit with the response not yet sent; the restarted service
// answers the retry, and the work ran once.
func TestKillRestart(t *testing.T) {
	svc := idemhttptest.Service{
		Open: func(path string) http.Handler {
			tg, _ := service(t, path)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tg.Handler.ServeHTTP(w, r)
				idemhttptest.Crashpoint("after-commit") // committed; the response is still buffered
			})
		},
		Request: func() *http.Request { tg, _ := requestOnly(); return tg },
		Executions: func(path string) int {
			db, err := kv.Open(path, &kv.Options{ReadOnly: true})
			require.NoError(t, err)
			defer db.Close()
			n := 0
			require.NoError(t, db.View(context.Background(), func(tx kv.Tx) error {
				if b := tx.Bucket([]byte("orders")); b != nil {
					n, _ = strconv.Atoi(string(b.Get([]byte("count"))))
				}
				return nil
			}))
			return n
		},
	}
	for _, point := range []string{"in-handler", "after-commit"} {
		t.Run(point, func(t *testing.T) {
			a := idemhttptest.KillRestart(t, svc, point)
			require.Equal(t, 201, a.Status)
			require.Equal(t, `{"order":1}`, string(a.Body))
		})
	}
}

func requestOnly() (*http.Request, error) {
	r, err := http.NewRequest("POST", "http://service/v1/orders", strings.NewReader(`{"amount_cents":2500}`))
	r.Header.Set("Idempotency-Key", "order-1")
	r.Header.Set("Content-Type", "application/json")
	return r, err
}

// The kit catches an endpoint that is not idempotent.
func TestKitCatchesDoubleExecution(t *testing.T) {
	t.Parallel()
	count := 0
	bad := idemhttptest.Target{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { count++; w.WriteHeader(201) }),
		Request: func() *http.Request {
			r, _ := http.NewRequest("POST", "http://service/x", nil)
			return r
		},
		Executions: func() int { return count },
	}
	ft := &fakeT{}
	func() {
		defer func() { _ = recover() }()
		idemhttptest.LostResponses(ft, bad, 1)
	}()
	require.True(t, ft.failed, "a handler without the middleware runs twice and the kit says so")
}

// fakeT records a failure instead of failing the real test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = true
	panic(fmt.Sprintf(format, args...))
}

// scripted is a target whose handler answers the i-th request it gets
// (from 0) with answer(i), which also says whether that request did the
// work.
func scripted(answer func(i int64) (status int, body string, worked bool)) (idemhttptest.Target, *atomic.Int64) {
	var seen, executed atomic.Int64
	return idemhttptest.Target{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			status, body, worked := answer(seen.Add(1) - 1)
			if worked {
				executed.Add(1)
			}
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		}),
		Request: func() *http.Request {
			r, _ := http.NewRequest("POST", "http://service/x", nil)
			return r
		},
		Executions: func() int { return int(executed.Load()) },
	}, &seen
}

// kitFails runs f against a fakeT and reports whether the kit failed it.
func kitFails(f func(testing.TB)) bool {
	ft := &fakeT{}
	func() {
		defer func() { _ = recover() }()
		f(ft)
	}()
	return ft.failed
}

// Storm fails an endpoint whose duplicates get different answers, or a
// 5xx, even when the work ran once; a storm whose copies all met the
// first in progress (409) is finished by re-sending, through 5xx answers,
// until a final one.
func TestStormJudgesTheAnswers(t *testing.T) {
	t.Parallel()
	const n = 4
	differ, _ := scripted(func(i int64) (int, string, bool) {
		if i == 0 {
			return http.StatusCreated, "first", true
		}
		return http.StatusOK, fmt.Sprint("copy ", i), false
	})
	require.True(t, kitFails(func(t testing.TB) { idemhttptest.Storm(t, differ, n) }), "answers differ")

	failing, _ := scripted(func(i int64) (int, string, bool) { return http.StatusInternalServerError, "down", i == 0 })
	require.True(t, kitFails(func(t testing.TB) { idemhttptest.Storm(t, failing, n) }), "every answer a 500, alike")

	// Every copy meets the first in progress; the retries then meet a 500
	// before the answer.
	busy, seen := scripted(func(i int64) (int, string, bool) {
		switch {
		case i < n:
			return http.StatusConflict, "in progress", false
		case i == n:
			return http.StatusInternalServerError, "a moment", false
		}
		return http.StatusCreated, "done", true
	})
	require.False(t, kitFails(func(t testing.TB) { idemhttptest.Storm(t, busy, n) }))
	require.EqualValues(t, n+2, seen.Load(), "the kit re-sent past the 409s and the 500 to the answer")
}
