package idemhttp_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
)

// These tests pin down edges that mutants (make mutate) showed no test
// looked at.

// Statuses at the edges: 999 is a status (passed through, not stored:
// only statuses below 500 are); 500 is not stored, so a retry runs again;
// a 400 that wrote nothing is not stored; a 4xx error body of exactly
// MaxStoredErrorBytes is stored.
func TestStatusEdges(t *testing.T) {
	b := setup(t, func(c *idemhttp.Config) { c.MaxStoredErrorBytes = len("failed") })
	body := `{"amount_cents":100}`

	b.fail.Store(999)
	r := b.post(t, "sk_acme", "k-999", body)
	require.Equal(t, 999, r.status)
	b.fail.Store(500)
	for range 2 {
		r = b.post(t, "sk_acme", "k-500", body)
		require.Equal(t, 500, r.status)
	}
	require.EqualValues(t, 3, b.runs.Load(), "a 500 is not stored: the retry ran again")

	b.fail.Store(409)
	for range 2 {
		r = b.post(t, "sk_acme", "k-409", body)
		require.Equal(t, 409, r.status)
	}
	require.EqualValues(t, 4, b.runs.Load(), "an error body of exactly the limit is stored and replayed")
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))

	b.fail.Store(0)
	for range 2 {
		r = b.post(t, "sk_acme", "k-400", "not json", "Content-Type", "text/plain")
		require.Equal(t, 400, r.status)
	}
	require.EqualValues(t, 4, b.runs.Load(), "the handler refused before writing")
	require.Equal(t, "bad json\n", r.body, "the handler's own 400, not the middleware's")
	require.Empty(t, r.header.Get("Idempotent-Replayed"), "a 400 that wrote nothing is not stored")
}

// A handler answering a status no stored answer can have (a 101, which
// hands the connection to another protocol; one outside 100-999, on
// which net/http panics) gets a 500 problem naming it, with a key or
// without one (KeyOptional): its writes roll back, nothing is stored, the
// service's log says which status, and the retry runs again.
func TestStatusThatCannotBeStoredIsAProblem(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		logger, logs := testlog.New()
		b := setup(t, func(c *idemhttp.Config) {
			c.KeyOptional = !keyed
			c.Logger = logger
		})
		logged := `level=ERROR msg="handler wrote an invalid status; transaction rolled back" method=POST route=/v1/orders status=`
		if keyed {
			logged = `level=ERROR msg="handler wrote an invalid status; transaction rolled back" scope="acme|POST /v1/orders" key=k-`
		}
		for i, code := range []int32{http.StatusSwitchingProtocols, 1000} {
			b.fail.Store(code)
			key := ""
			if keyed {
				key = fmt.Sprint("k-", code)
			}
			for try := range 2 {
				r := b.post(t, "sk_acme", key, `{"amount_cents":1}`)
				require.Equal(t, 500, r.status, r.body)
				require.Equal(t, idemhttp.ProblemInternal, problemType(t, r))
				require.Contains(t, r.body, fmt.Sprintf("status %d, which cannot be stored", code))
				require.EqualValues(t, 2*i+try+1, b.runs.Load(), "the retry ran again")
			}
			require.Zero(t, b.orderCount(t), "the handler's writes rolled back")
			require.Equal(t, 2*(i+1), strings.Count(logs.String(), logged), logs.String())
			require.Contains(t, logs.String(), fmt.Sprintf("status=%d\n", code))
		}
	}
}

// A handler's trailers (declared in its Trailer header and set after the
// body, or set under http.TrailerPrefix) left the first response as header
// fields before its body, and a replay had none. They follow the body now;
// a replay carries the declared ones that KeepHeaders keeps, as trailers.
func TestTrailersFollowTheBody(t *testing.T) {
	handler := func(w http.ResponseWriter, r *http.Request) {
		if !writeOrder(w, r, []byte("ord_1")) {
			return
		}
		w.Header().Set("Trailer", "x-sum, X-Count")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "created")
		w.Header().Set("X-Sum", "abc")
		w.Header().Set("X-Count", "7")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	}
	send := func(srv *httptest.Server, key string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body) // trailers arrive after the body
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "created", string(body))
		return resp
	}
	for _, keep := range [][]string{nil, {"Trailer", "X-Sum"}} {
		_, srv := wrapped(t, nil, nil, idemhttp.Config{KeepHeaders: keep}, handler)
		first := send(srv, "k")
		require.Empty(t, first.Header.Get("X-Sum"), "a trailer is not a header field")
		require.Empty(t, first.Header.Get("X-Late"))
		require.Equal(t, http.Header{"X-Sum": {"abc"}, "X-Count": {"7"}, "X-Late": {"late"}}, first.Trailer)

		replay := send(srv, "k")
		require.Equal(t, "true", replay.Header.Get(idemhttp.HeaderReplayed))
		require.Empty(t, replay.Header.Get("X-Sum"))
		if keep == nil {
			require.Empty(t, replay.Trailer, "trailers are not stored")
		} else {
			require.Equal(t, "abc", replay.Trailer.Get("X-Sum"), "the kept trailer, as a trailer")
			require.Empty(t, replay.Trailer.Values("X-Count"), "declared, not kept: no value")
			require.NotContains(t, replay.Trailer, "X-Late")
		}
	}
}

// A handler that flushes in the middle of its answer sends nothing before
// its transaction commits: Flush is accepted (no error from
// http.ResponseController) and ignored, so an attempt that fails after it
// leaks none of its bytes, and a retry with the same key runs again.
func TestFlushSendsNothingBeforeTheCommit(t *testing.T) {
	t.Parallel()
	var flushErrs []error
	var mu sync.Mutex
	var fail atomic.Bool // the next run panics after its flush
	db, srv := wrapped(t, nil, nil, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if !writeOrder(w, r, []byte("ord_1")) {
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "part,")
		err := http.NewResponseController(w).Flush()
		mu.Lock()
		if kvtest.Counts() {
			flushErrs = append(flushErrs, err)
		}
		mu.Unlock()
		if fail.Load() {
			panic("after the flush")
		}
		fmt.Fprint(w, "rest")
	})

	fail.Store(true)
	r := postPay(t, srv, "/", "k")
	require.Equal(t, http.StatusInternalServerError, r.status)
	require.NotContains(t, r.body, "part,", "nothing the failed attempt wrote left before the rollback")
	require.Zero(t, countOrders(t, db))

	fail.Store(false)
	r = postPay(t, srv, "/", "k")
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, "part,rest", r.body, "the key runs again, and its whole answer is sent")
	require.Empty(t, r.header.Get(idemhttp.HeaderReplayed))
	r = postPay(t, srv, "/", "k")
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, "part,rest", r.body)
	require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, 1, countOrders(t, db))
	require.Equal(t, []error{nil, nil}, flushErrs, "two runs flushed, without an error; the replay ran nothing")
}

// A replay says it is one even when the handler set Idempotent-Replayed
// itself and KeepHeaders names it: that field is never stored.
func TestReplayedHeaderIsNeverStored(t *testing.T) {
	_, srv := wrapped(t, nil, nil, idemhttp.Config{KeepHeaders: []string{"idempotent-replayed"}}, func(w http.ResponseWriter, r *http.Request) {
		if !writeOrder(w, r, []byte("ord_1")) {
			return
		}
		w.Header().Set(idemhttp.HeaderReplayed, "false")
		w.WriteHeader(http.StatusCreated)
	})
	for _, want := range []string{"false", "true"} {
		resp := postPay(t, srv, "", "k")
		require.Equal(t, http.StatusCreated, resp.status)
		require.Equal(t, []string{want}, resp.header.Values(idemhttp.HeaderReplayed))
	}
}

// Config.Store decides what is stored: a status it refuses is rolled back
// with the handler's writes and runs again on retry, even a 201; one it
// accepts is stored and replayed, even a 500 from a handler that wrote
// nothing (the rule that such an answer is a rejection is for 4xx only).
func TestStoreDecidesWhatIsStored(t *testing.T) {
	var runs atomic.Int32
	db, srv := wrapped(t, nil, nil, idemhttp.Config{Store: func(status int) bool { return status == http.StatusInternalServerError }},
		func(w http.ResponseWriter, r *http.Request) {
			countRun(&runs)
			if r.URL.Query().Has("fail") {
				http.Error(w, "down", http.StatusInternalServerError) // writes nothing
				return
			}
			if !writeOrder(w, r, []byte("ord_1")) {
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
	for range 2 {
		resp := postPay(t, srv, "", "created")
		require.Equal(t, http.StatusCreated, resp.status)
		require.Empty(t, resp.header.Get(idemhttp.HeaderReplayed))
	}
	require.EqualValues(t, 2, runs.Load(), "a 201 Store refuses is not stored: the retry ran again")
	require.NoError(t, db.View(context.Background(), func(tx kv.Tx) error {
		require.Nil(t, tx.Bucket([]byte("orders")), "and its writes rolled back")
		return nil
	}))

	for i, want := range []string{"", "true"} {
		resp := postPay(t, srv, "?fail", "failed")
		require.Equal(t, http.StatusInternalServerError, resp.status)
		require.Equal(t, want, resp.header.Get(idemhttp.HeaderReplayed), "request %d", i)
	}
	require.EqualValues(t, 3, runs.Load(), "the stored 500 was replayed")
}

// A 4xx is stored when the handler wrote before answering it, whichever
// way it wrote (a Delete, a sequence number, raw bbolt through kv.BoltTx),
// and not when it only read (Get, a cursor): only a request rejected before
// it did anything runs again on retry.
func TestA4xxIsStoredOnlyAfterAWrite(t *testing.T) {
	for name, c := range map[string]struct {
		act    func(tx kv.Tx) error
		stored bool
	}{
		"delete": {func(tx kv.Tx) error { return tx.Bucket([]byte("orders")).Delete([]byte("ord_1")) }, true},
		"sequence": {func(tx kv.Tx) error {
			_, err := tx.Bucket([]byte("orders")).NextSequence()
			return err
		}, true},
		"raw bbolt": {func(tx kv.Tx) error { return kv.BoltTx(tx).Bucket([]byte("orders")).Put([]byte("ord_2"), []byte("1")) }, true},
		"get":       {func(tx kv.Tx) error { _ = tx.Bucket([]byte("orders")).Get([]byte("ord_1")); return nil }, false},
		"cursor": {func(tx kv.Tx) error {
			k, _ := tx.Bucket([]byte("orders")).Cursor().First()
			if k == nil {
				return errors.New("no orders")
			}
			return nil
		}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "raw bbolt" {
				kvtest.RequireLocal(t, "kv.BoltTx is bbolt's")
			}
			var runs atomic.Int32
			db, srv := wrapped(t, &kv.Options{NoSync: true}, nil, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
				countRun(&runs)
				tx, _ := idemhttp.Tx(r.Context())
				if err := c.act(tx); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				http.Error(w, "order cancelled", http.StatusConflict)
			})
			require.NoError(t, db.Update(context.Background(), func(tx kv.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("orders"))
				if err != nil {
					return err
				}
				return b.Put([]byte("ord_1"), []byte("1"))
			}))
			for range 2 {
				r := postPay(t, srv, "", "k")
				require.Equal(t, http.StatusConflict, r.status, r.body)
			}
			if c.stored {
				require.EqualValues(t, 1, runs.Load(), "the 409 after a write was stored and replayed")
			} else {
				require.EqualValues(t, 2, runs.Load(), "the 409 after reads only was not stored: the retry ran again")
			}
		})
	}
}

// Without a key (KeyOptional), a 500 rolls the handler's writes back.
func TestUnkeyedServerErrorRollsBack(t *testing.T) {
	b := setup(t, func(c *idemhttp.Config) { c.KeyOptional = true })
	before := b.orderCount(t)
	b.fail.Store(500)
	r := b.post(t, "sk_acme", "", `{"amount_cents":1}`)
	require.Equal(t, 500, r.status)
	require.Equal(t, before, b.orderCount(t))
	b.fail.Store(0)
	r = b.post(t, "sk_acme", "", `{"amount_cents":1}`)
	require.Equal(t, 201, r.status)
	require.Equal(t, before+1, b.orderCount(t))
}

// A quoted key may use up to twice MaxKeyLen bytes of escapes; one byte
// more is refused.
func TestQuotedKeyLength(t *testing.T) {
	b := setup(t, nil)
	longest := `"` + strings.Repeat(`\\`, ledger.MaxKeyLen) + `"`
	require.Len(t, longest, 2*ledger.MaxKeyLen+2)
	r := b.post(t, "sk_acme", longest, `{"amount_cents":1}`)
	require.Equal(t, 201, r.status, r.body)
	r = b.post(t, "sk_acme", `"`+strings.Repeat(`\\`, ledger.MaxKeyLen)+`a"`, `{"amount_cents":1}`)
	require.Equal(t, 400, r.status)
}

// A stored response may be exactly the ledger's MaxResponseBytes; one byte
// more is a 500 and nothing is stored; every request reaches the
// observer as an "http" call.
func TestResponseLimitAndObserver(t *testing.T) {
	var mu sync.Mutex
	var outcomes []string
	obs := &observe.Observer{Request: func(_ context.Context, e observe.Request) {
		if e.Call == "http" {
			mu.Lock()
			outcomes = append(outcomes, string(e.Outcome))
			mu.Unlock()
		}
	}}
	var accepted atomic.Int64
	_, srv := wrapped(t, &kv.Options{NoSync: true, Observer: obs}, &ledger.Config{MaxResponseBytes: 64}, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		var in struct{ N int }
		_ = json.NewDecoder(r.Body).Decode(&in)
		tx, _ := idemhttp.Tx(r.Context())
		bk, _ := tx.CreateBucketIfNotExists([]byte("x"))
		_ = bk.Put([]byte(fmt.Sprint(in.N)), []byte("1"))
		w.WriteHeader(201)
		if in.N < 0 { // streams until the writer refuses (or 1 MiB)
			for accepted.Load() < 1<<20 {
				n, err := w.Write([]byte("0123456789abcdef"))
				accepted.Add(int64(n))
				if err != nil {
					return
				}
			}
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("b", in.N)))
	})
	send := func(key string, n int) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(fmt.Sprintf(`{"N":%d}`, n)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 201, send("fits", 64))
	require.Equal(t, 500, send("over", 65))
	require.Equal(t, 201, send("fits", 64))
	// A handler that streams is refused once past the limit: the
	// middleware buffers no more than the limit, whatever it is sent.
	require.Equal(t, 500, send("stream", -1))
	require.LessOrEqual(t, accepted.Load(), int64(64))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, outcomes, 4)
}

// Problem details are clipped at MaxProblemDetail bytes, never inside a
// UTF-8 sequence; a detail of exactly the limit is kept whole.
func TestProblemDetailClipping(t *testing.T) {
	detail := func(d string) string {
		rec := httptest.NewRecorder()
		idemhttp.WriteProblem(rec, idemhttp.Problem{Type: "t", Title: "x", Status: 400, Detail: d}, 0)
		var p idemhttp.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		return p.Detail
	}
	exact := strings.Repeat("a", idemhttp.MaxProblemDetail)
	require.Equal(t, exact, detail(exact))
	require.Equal(t, exact+"...", detail(exact+"b"))
	// "é" is two bytes; the limit falls between them: cut before the rune.
	rune2 := strings.Repeat("a", idemhttp.MaxProblemDetail-1) + "é"
	require.Equal(t, strings.Repeat("a", idemhttp.MaxProblemDetail-1)+"...", detail(rune2))
	// A detail with no rune start before the limit (invalid UTF-8 from a
	// tenant function's error, say) is cut to nothing, not past its start.
	garbage := strings.Repeat("\x80", idemhttp.MaxProblemDetail+1)
	require.Equal(t, "...", detail(garbage))
}

// A handler that sends an informational status first (103 Early Hints)
// and then its answer gets its answer through the middleware, keyed and
// unkeyed, and its retry the same: the 1xx used to be taken for the
// status, so the 201 was stored and sent as a 200. Nothing leaves before
// the commit, so the 1xx itself is not sent; the headers set before it
// stay.
func TestInformationalStatusIsNotTheAnswer(t *testing.T) {
	var runs atomic.Int32
	_, srv := wrapped(t, nil, nil, idemhttp.Config{KeyOptional: true, KeepHeaders: []string{"Link"}}, func(w http.ResponseWriter, r *http.Request) {
		if !writeOrder(w, r, fmt.Appendf(nil, "ord_%d", countRun(&runs))) {
			return
		}
		w.Header().Set("Link", "</terms.css>; rel=preload")
		if r.URL.Query().Has("ok-first") {
			w.WriteHeader(http.StatusOK) // a final status: the 201 below is ignored
		}
		w.WriteHeader(http.StatusContinue)
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusCreated)
		w.WriteHeader(http.StatusOK) // ignored, as net/http ignores it
		fmt.Fprint(w, "created")
	})

	send := func(key string, query ...string) (int, string, http.Header, int) {
		t.Helper()
		informational := 0
		trace := &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error { informational++; return nil }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, srv.URL+strings.Join(query, ""), strings.NewReader("{}"))
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body), resp.Header, informational
	}
	for i, key := range []string{"k-hints", "k-hints", ""} {
		status, body, h, informational := send(key)
		require.Equal(t, http.StatusCreated, status, "request %d", i)
		require.Equal(t, "created", body)
		require.Equal(t, "</terms.css>; rel=preload", h.Get("Link"))
		require.Zero(t, informational, "nothing is sent before the commit")
		require.Equal(t, i == 1, h.Get(idemhttp.HeaderReplayed) == "true")
	}
	require.EqualValues(t, 2, runs.Load(), "the keyed retry was replayed")

	// The first final status is the answer, as in net/http.
	status, _, _, _ := send("k-ok-first", "?ok-first")
	require.Equal(t, http.StatusOK, status)
}

// A handler that compresses its own answer (Content-Encoding: gzip) has it
// replayed with its Content-Encoding: the stored bytes are the compressed
// ones, and without the header a retry got them as if they were the JSON
// itself.
func TestCompressedAnswerIsReplayedWithItsEncoding(t *testing.T) {
	const answer = `{"id":"ord_1","status":"pending"}`
	var runs atomic.Int32
	_, srv := wrapped(t, nil, nil, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		countRun(&runs)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusCreated)
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, answer)
		_ = zw.Close()
	})
	for i := range 2 {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k-gzip")
		req.Header.Set("Accept-Encoding", "gzip") // asked for, so the client does not undo it
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), "request %d", i)
		zr, err := gzip.NewReader(resp.Body)
		require.NoError(t, err, "request %d", i)
		body, err := io.ReadAll(zr)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, answer, string(body))
	}
	require.EqualValues(t, 1, runs.Load(), "the retry was replayed")
}

// A request without a key (KeyOptional) has its body read before its
// transaction, as a keyed one's is. Group commit runs a handler again when
// a later call of its batch fails, and the second run read a body the
// first had drained: two valid requests were answered 400 (a handler that
// took the empty body for defaults would have written them). The body was
// also read from the client inside the transaction, holding the writer.
func TestUnkeyedRequestRunAgainReadsItsWholeBody(t *testing.T) {
	// Batches of exactly two calls, whatever the order they arrive in.
	var runs atomic.Int32
	db, srv := wrapped(t, &kv.Options{NoSync: true, MaxBatchSize: 2, MaxBatchDelay: time.Minute}, nil, idemhttp.Config{KeyOptional: true}, func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ID == "" {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		if countRun(&runs) == 2 { // the batch's second call fails once: the first runs again
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		if !writeOrder(w, r, []byte(in.ID)) {
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	kvtest.RequireGroupCommit(t, db)

	statuses := make([]int, 2)
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(fmt.Sprintf(`{"id":"ord_%d"}`, i)))
			if err == nil {
				statuses[i] = resp.StatusCode
				err = resp.Body.Close()
			}
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.Equal(t, []int{http.StatusCreated, http.StatusCreated}, statuses)
	require.EqualValues(t, 4, runs.Load(), "two runs in the failed batch, one each after it")
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("orders"))
		require.NotNil(t, b)
		require.NotNil(t, b.Get([]byte("ord_0")))
		require.NotNil(t, b.Get([]byte("ord_1")))
		return nil
	}))

	// Read first, it is bounded as a keyed body is.
	resp, err := srv.Client().Post(srv.URL, "application/json", strings.NewReader(`{"id":"`+strings.Repeat("x", idemhttp.DefaultMaxBodyBytes)+`"}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.EqualValues(t, 4, runs.Load(), "the handler did not run")
}

// wrapped serves h on loopback through a middleware configured by cfg, over
// a ledger (lcfg) on a fresh database (opts; nil means NoSync). cfg's
// Ledger is filled in, and its Tenant when unset: "acme" for everyone.
func wrapped(t *testing.T, opts *kv.Options, lcfg *ledger.Config, cfg idemhttp.Config, h http.HandlerFunc) (*kv.DB, *httptest.Server) {
	t.Helper()
	if opts == nil {
		opts = &kv.Options{NoSync: true}
	}
	db := kvtest.Open(t, opts, ledger.RecordKind)
	var err error
	cfg.Ledger, err = ledger.New(db, lcfg)
	require.NoError(t, err)
	if cfg.Tenant == nil {
		cfg.Tenant = func(*http.Request) (string, error) { return "acme", nil }
	}
	mw, err := idemhttp.New(&cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Wrap(h))
	t.Cleanup(srv.Close)
	return db, srv
}

// writeOrder puts the order key through the request's transaction, as an
// in-transaction handler does; on failure it answers 500 and returns false.
func writeOrder(w http.ResponseWriter, r *http.Request, key []byte) bool {
	tx, _ := idemhttp.Tx(r.Context())
	b, err := tx.CreateBucketIfNotExists([]byte("orders"))
	if err == nil {
		err = b.Put(key, []byte("1"))
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	return true
}

// New refuses a configuration it cannot serve, saying which field.
func TestNewRefusesAnInvalidConfig(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	tenant := func(*http.Request) (string, error) { return "acme", nil }
	for _, c := range []struct {
		cfg  *idemhttp.Config
		want string
	}{
		{nil, "Config.Ledger and Config.Tenant are required"},
		{&idemhttp.Config{Tenant: tenant}, "Config.Ledger and Config.Tenant are required"},
		{&idemhttp.Config{Ledger: l}, "Config.Ledger and Config.Tenant are required"},
		{&idemhttp.Config{Ledger: l, Tenant: tenant, MaxBodyBytes: -1}, "MaxBodyBytes -1 is negative"},
		{&idemhttp.Config{Ledger: l, Tenant: tenant, MaxStoredErrorBytes: -2}, "MaxStoredErrorBytes -2 is negative"},
		{&idemhttp.Config{Ledger: l, Tenant: tenant, Wait: -time.Second}, "Wait -1s is negative"},
	} {
		_, err := idemhttp.New(c.cfg)
		require.ErrorIs(t, err, idemhttp.ErrInvalidConfig)
		require.ErrorContains(t, err, c.want)
	}
	_, err = idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: tenant})
	require.NoError(t, err)
}

// net/http sends a response's header with its status: a field set or
// changed after WriteHeader (or the first Write) is dropped, trailers
// excepted. The middleware sent and stored such changes; it drops them now,
// on the first response and in what a replay carries, as the same handler
// served without it does.
func TestHeaderChangesAfterTheStatusAreDropped(t *testing.T) {
	handler := func(explicit bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Before", "1")
			if explicit {
				w.WriteHeader(http.StatusCreated)
			}
			fmt.Fprint(w, "done")
			w.Header().Set("X-Before", "2")
			w.Header().Set("X-After", "late")
		}
	}
	for _, explicit := range []bool{true, false} {
		plain := httptest.NewServer(handler(explicit))
		defer plain.Close()
		want := postPay(t, plain, "", "k")
		require.Equal(t, "done", want.body)
		require.Equal(t, "1", want.header.Get("X-Before"), "net/http sends the field as it was")
		require.NotContains(t, want.header, "X-After")

		_, srv := wrapped(t, nil, nil, idemhttp.Config{KeepHeaders: []string{"X-Before", "X-After"}}, handler(explicit))
		for i := range 2 { // the first response, then its replay
			got := postPay(t, srv, "", "k")
			require.Equal(t, want.status, got.status)
			require.Equal(t, want.body, got.body)
			require.Equal(t, want.header.Values("X-Before"), got.header.Values("X-Before"), "response %d", i)
			require.NotContains(t, got.header, "X-After", "response %d", i)
		}
	}
}

// A handler that panics, with a key or without one (KeyOptional), rolls
// its writes back and answers a 500 problem; the panic and its stack go to
// the log as the service's error, and a retry with the key runs again. A
// panic with http.ErrAbortHandler aborts the response as net/http does:
// the client gets no answer, nothing is written, and nothing is logged.
func TestHandlerPanicsRollBackAndAreLogged(t *testing.T) {
	t.Parallel()
	logger, logs := testlog.New()
	var runs atomic.Int32
	var mode atomic.Value // "boom", "abort" or ""
	mode.Store("")
	db, srv := wrapped(t, nil, nil, idemhttp.Config{KeyOptional: true, Logger: logger},
		func(w http.ResponseWriter, r *http.Request) {
			countRun(&runs)
			if !writeOrder(w, r, []byte(fmt.Sprintf("ord_%d", runs.Load()))) {
				return
			}
			switch mode.Load() {
			case "boom":
				panic("boom in the order handler")
			case "abort":
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(http.StatusCreated)
		})
	send := func(key string) (reply, error) { return tryPost(t, srv, "/v1/orders", key, `{}`) }
	for _, key := range []string{"k-panic", ""} {
		name := map[bool]string{true: "keyed", false: "unkeyed"}[key != ""]
		runsBefore, orders, mark := runs.Load(), countOrders(t, db), len(logs.String())

		mode.Store("boom")
		r, err := send(key)
		require.NoError(t, err, name)
		require.Equal(t, http.StatusInternalServerError, r.status, name)
		require.Equal(t, idemhttp.ProblemInternal, problemType(t, r), name)
		require.Equal(t, orders, countOrders(t, db), "%s: the panicking run's order was rolled back", name)
		log := logs.String()[mark:]
		require.Equal(t, 1, strings.Count(log, "level=ERROR"), name)
		require.Contains(t, log, `level=ERROR msg="handler panicked; transaction rolled back"`, name)
		require.Contains(t, log, `panic="boom in the order handler"`, name)
		require.Contains(t, log, "TestHandlerPanicsRollBackAndAreLogged", "%s: the stack names the handler", name)

		mode.Store("abort")
		_, err = send(key)
		require.Error(t, err, "%s: an aborted response reaches the client as a broken connection", name)
		require.Equal(t, orders, countOrders(t, db), name)
		require.Equal(t, 1, strings.Count(logs.String()[mark:], "level=ERROR"), "%s: an abort is not logged as an error", name)

		mode.Store("")
		r, err = send(key)
		require.NoError(t, err, name)
		require.Equal(t, http.StatusCreated, r.status, "%s: the retry runs again", name)
		require.Empty(t, r.header.Get(idemhttp.HeaderReplayed), name)
		// net/http's client sends a request with an Idempotency-Key again
		// when its connection breaks: the abort may have run twice.
		require.GreaterOrEqual(t, runs.Load(), runsBefore+3, name)
		require.Equal(t, orders+1, countOrders(t, db), name)
	}
}

// A request the service could not run because its database is closed (a
// shutdown under way) or its deadline passed while it waited is a 503 with
// Retry-After, on every kind of route: nothing was stored, so the same key
// may be sent again. Neither is logged as the service's error.
func TestRequestNotFinishedIsServiceUnavailable(t *testing.T) {
	t.Parallel()
	check := func(name string, r reply) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, r.status, "%s: %s", name, r.body)
		require.Equal(t, idemhttp.ProblemUnavailable, problemType(t, r), name)
		require.Equal(t, "1", r.header.Get("Retry-After"), name)
	}

	// A deadline that passed before the transaction: keyed and unkeyed.
	logger, logs := testlog.New()
	var runs atomic.Int32
	db, srv := wrapped(t, nil, nil, idemhttp.Config{KeyOptional: true, Logger: logger},
		func(w http.ResponseWriter, r *http.Request) {
			countRun(&runs)
			if writeOrder(w, r, []byte(fmt.Sprint("ord_", runs.Load()))) {
				w.WriteHeader(http.StatusCreated)
			}
		})
	late := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithDeadline(r.Context(), time.Now().Add(-time.Second))
		defer cancel()
		srv.Config.Handler.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(late.Close)
	check("keyed, past its deadline", postPay(t, late, "/", "k-late"))
	check("unkeyed, past its deadline", postPay(t, late, "/", ""))
	require.Zero(t, runs.Load())

	r := postPay(t, srv, "/", "k-late")
	require.Equal(t, http.StatusCreated, r.status, "the key sent again runs")

	// The database closed under the server.
	require.NoError(t, db.Close())
	check("keyed, database closed", postPay(t, srv, "/", "k-closed"))
	check("unkeyed, database closed", postPay(t, srv, "/", ""))
	check("a stored key, database closed", postPay(t, srv, "/", "k-late"))
	require.EqualValues(t, 1, runs.Load())
	require.NotContains(t, logs.String(), "level=ERROR")

	e := setupExternal(t, nil)
	require.NoError(t, e.db.Close())
	check("external, database closed", postPay(t, e.srv, "/v1/orders/A/pay", "k-pay"))
	require.Empty(t, e.fake.Log(), "no provider was called")
}

// lostAnswers is a backend over another database whose commits apply but,
// while lose is set, report kv.ErrCommitUnknown, as etcd's do when their
// answer is lost and etcd stays out of reach.
type lostAnswers struct {
	inner *kv.DB
	lose  atomic.Bool
}

func (b *lostAnswers) Update(ctx context.Context, fn func(kv.Tx) error) error {
	err := b.inner.Update(ctx, fn)
	if err == nil && b.lose.Load() {
		// As etcdkv says it when its settling ran out of time: a deadline
		// is in the chain too, which must not read as "nothing stored".
		return fmt.Errorf("store: answer lost: %w (settling it: %w)", kv.ErrCommitUnknown, context.DeadlineExceeded)
	}
	return err
}

func (b *lostAnswers) View(ctx context.Context, fn func(kv.Tx) error) error {
	return b.inner.View(ctx, fn)
}

func (b *lostAnswers) Traits() kv.Traits {
	t := b.inner.Traits()
	t.Name = "lost-answers"
	return t
}

func (b *lostAnswers) Close() error { return nil }

// A commit whose outcome the store cannot tell (kv.ErrCommitUnknown: etcd's
// answer lost, etcd out of reach) is a 503 with Retry-After saying so, not a
// 500: it may have been stored. The retry is answered either way, here
// with the stored answer the lost commit applied; the handler ran once.
func TestCommitOutcomeUnknownIsServiceUnavailable(t *testing.T) {
	t.Parallel()
	b := &lostAnswers{inner: kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind)}
	db, err := kv.New(b, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	mw, logs := loggedMiddleware(t, db)
	var runs atomic.Int32
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		countRun(&runs)
		if writeOrder(w, r, []byte("ord_1")) {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "ord_1")
		}
	})))
	t.Cleanup(srv.Close)

	b.lose.Store(true)
	r := postPay(t, srv, "/", "k-lost")
	require.Equal(t, http.StatusServiceUnavailable, r.status, r.body)
	require.Equal(t, idemhttp.ProblemUnavailable, problemType(t, r))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Contains(t, r.body, "could not confirm whether this request was saved")
	require.Contains(t, logs.String(), `level=WARN msg="idempotent request's commit outcome unknown"`)
	require.NotContains(t, logs.String(), "level=ERROR")

	b.lose.Store(false)
	r = postPay(t, srv, "/", "k-lost")
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, "ord_1", r.body)
	require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed), "the lost commit had applied")
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, 1, countOrders(t, db))
}

// An observer that panics in a request's commit costs that request its
// connection (net/http recovers the panic) and nothing more: the answer
// committed, so the retry replays it, and the service goes on serving.
// Before, group commit stayed with the panicked leader and every later
// request waited for ever.
func TestObserverPanicInACommitLeavesTheServiceServing(t *testing.T) {
	t.Parallel()
	var panicNext atomic.Bool
	var runs atomic.Int32
	opts := &kv.Options{NoSync: true, Observer: &observe.Observer{Commit: func(observe.Commit) {
		if panicNext.CompareAndSwap(true, false) {
			panic("observer bug")
		}
	}}}
	db, srv := wrapped(t, opts, nil, idemhttp.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if writeOrder(w, r, fmt.Appendf(nil, "ord_%d", countRun(&runs))) {
			w.WriteHeader(http.StatusCreated)
		}
	})
	srv.Client().Timeout = 10 * time.Second

	panicNext.Store(true)
	r, err := tryPost(t, srv, "/v1/orders", "k-1", `{}`)
	if err == nil { // net/http's client resent it (it carries an Idempotency-Key) when the connection broke
		require.Equal(t, http.StatusCreated, r.status)
		require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed))
	}
	r, err = tryPost(t, srv, "/v1/orders", "k-1", `{}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.status)
	require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed), "the panicked request's answer was stored")

	r, err = tryPost(t, srv, "/v1/orders", "k-2", `{}`)
	require.NoError(t, err, "a later request is served")
	require.Equal(t, http.StatusCreated, r.status)
	require.Empty(t, r.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, int32(2), runs.Load(), "each key's handler ran once")
	require.Equal(t, 2, countOrders(t, db))
}

// A handler that starts a write of its own with its request's context (a
// managed call, an Update) instead of writing through Tx is refused with
// kv.ErrNestedTx at once, keyed or not: before, it waited for ever for
// the writer its own request held, and every write of the service with
// it. Nothing of the request is stored, and the service goes on.
func TestHandlerWriteOutsideItsTransactionIsRefused(t *testing.T) {
	t.Parallel()
	var nested atomic.Value
	nested.Store(true)
	var l *ledger.Ledger
	db, srv := wrapped(t, nil, nil, idemhttp.Config{KeyOptional: true}, func(w http.ResponseWriter, r *http.Request) {
		if nested.Load().(bool) {
			_, err := l.Do(r.Context(), ledger.Request{Scope: "acme|POST /audit", Key: "a-1", Fingerprint: ledger.Fingerprint{1}},
				func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		if writeOrder(w, r, []byte(r.Header.Get("Idempotency-Key")+"-order")) {
			w.WriteHeader(http.StatusCreated)
		}
	})
	var err error
	l, err = ledger.New(db, nil)
	require.NoError(t, err)
	srv.Client().Timeout = 30 * time.Second

	for _, key := range []string{"k-1", ""} {
		r, err := tryPost(t, srv, "/v1/orders", key, `{}`)
		require.NoError(t, err, "%q: answered, not hung", key)
		require.Equal(t, http.StatusInternalServerError, r.status, key)
		require.Contains(t, r.body, "write transaction started inside a write transaction", key)
	}
	require.Zero(t, countOrders(t, db))
	_, err = l.Get(ctx, "acme|POST /audit", "a-1")
	require.ErrorIs(t, err, ledger.ErrNotFound, "the nested call stored nothing")

	nested.Store(false)
	r, err := tryPost(t, srv, "/v1/orders", "k-1", `{}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.status, "the key runs again, and the service writes on")
	require.Equal(t, 1, countOrders(t, db))
}

// A request queued behind a write transaction that holds the writer (a
// handler waiting on something inside its transaction) is answered at its
// deadline, 503 with Retry-After, its handler never run: before, it
// waited for the writer past its deadline, and for ever behind a writer
// held for ever. The log names the handler that holds the writer (by its
// scope and key, or its method and path without a key), once.
func TestRequestQueuedBehindAHeldWriterKeepsItsDeadline(t *testing.T) {
	t.Parallel()
	for holderKey, named := range map[string]string{
		"holds": `holder_scope="acme|POST /v1/orders" holder_key=holds held=`,
		"":      `holder_scope="POST /v1/orders" holder_key="" held=`, // KeyOptional: a request without a key
	} {
		t.Run("holder="+holderKey, func(t *testing.T) {
			t.Parallel()
			db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind)
			kvtest.RequireSingleWriter(t, db) // several writers do not queue behind one another
			l, err := ledger.New(db, nil)
			require.NoError(t, err)
			logger, logs := testlog.New()
			mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Logger: logger, KeyOptional: holderKey == "",
				Tenant: func(*http.Request) (string, error) { return "acme", nil }})
			require.NoError(t, err)
			held, release := make(chan struct{}), make(chan struct{})
			var runs sync.Map
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				key := r.Header.Get("Idempotency-Key")
				runs.Store(key, true)
				if key == holderKey && kvtest.Counts() { // once: a rerun build's second run goes on
					close(held)
					<-release
				}
				if writeOrder(w, r, []byte("order-"+key)) {
					w.WriteHeader(http.StatusCreated)
				}
			}))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Idempotency-Key") != holderKey {
					ctx, cancel := context.WithTimeout(r.Context(), 100*time.Millisecond) // the service's request deadline
					defer cancel()
					r = r.WithContext(ctx)
				}
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			srv.Client().Timeout = 10 * time.Second
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			defer free() // before srv.Close, which waits for the handler that holds

			first := make(chan reply, 1)
			go func() {
				r, err := tryPost(t, srv, "/v1/orders", holderKey, `{}`)
				assert.NoError(t, err)
				first <- r
			}()
			<-held
			// Positive once the clock has moved: on Windows it moves in ticks.
			require.Eventually(t, func() bool { return db.Writer().Held > 0 }, 10*time.Second, time.Millisecond)
			r, err := tryPost(t, srv, "/v1/orders", "queued", `{}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, r.status, "answered while the writer is still held")
			require.Equal(t, "1", r.header.Get("Retry-After"))
			_, ran := runs.Load("queued")
			require.False(t, ran, "its handler never ran")
			holder := `level=WARN msg="a handler holds the database's writer: requests queued behind it reach their deadlines" ` + named
			require.Contains(t, logs.String(), holder)
			r, err = tryPost(t, srv, "/v1/orders", "queued-too", `{}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, r.status)
			require.Equal(t, 1, strings.Count(logs.String(), holder), "once for the run that holds it")

			free()
			require.Equal(t, http.StatusCreated, testwait.Receive(t, first, "the holder's answer").status)
			r, err = tryPost(t, srv, "/v1/orders", "queued", `{}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, r.status, "the same key, sent again, runs")
			require.Equal(t, 2, countOrders(t, db))
			require.Equal(t, 1, strings.Count(logs.String(), "holds the database's writer"), "nobody held it since")
		})
	}
}

// loggedMiddleware returns a middleware over a ledger on db, for tenant
// acme, and the buffer it logs to.
func loggedMiddleware(t testing.TB, db *kv.DB) (*idemhttp.Middleware, *testlog.Buffer) {
	t.Helper()
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	logger, logs := testlog.New()
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Logger: logger, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	require.NoError(t, err)
	return mw, logs
}
