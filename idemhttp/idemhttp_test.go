package idemhttp_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

var ctx = context.Background()

type bundle struct {
	db    *kv.DB
	l     *ledger.Ledger
	mw    *idemhttp.Middleware
	srv   *httptest.Server
	runs  atomic.Int32
	fail  atomic.Int32 // status the handler answers when set
	panic atomic.Bool
}

// setup serves POST /v1/orders through the middleware on a real loopback
// server. The handler stores an order in the request's transaction and
// answers 201 with a body that counts executions, so a replay is visible.
func setup(t *testing.T, mutate func(*idemhttp.Config)) *bundle {
	t.Helper()
	b := &bundle{}
	b.db = kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind, sideeffect.RecordKind)
	var err error
	b.l, err = ledger.New(b.db, nil)
	require.NoError(t, err)
	cfg := idemhttp.Config{
		Ledger: b.l,
		Tenant: func(r *http.Request) (string, error) {
			switch r.Header.Get("Authorization") {
			case "Bearer sk_acme":
				return "acme", nil
			case "Bearer sk_globex":
				return "globex", nil
			}
			return "", errors.New("unknown API key")
		},
		Fingerprint: fingerprint.Options{Exclude: []string{"client_ts", "request_id"}},
		KeepHeaders: []string{"X-Order-Id", "Set-Cookie"},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	b.mw, err = idemhttp.New(&cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", b.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idemhttp.Tx(r.Context())
		require.True(t, ok)
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" { // a client that compresses its requests
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			body = zr
		}
		var in map[string]any
		if err := json.NewDecoder(body).Decode(&in); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		n := countRun(&b.runs)
		id := fmt.Sprintf("ord_%d", n)
		if err := orders.Put([]byte(id), []byte(fmt.Sprint(in["amount_cents"]))); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if b.panic.Load() {
			panic("handler bug")
		}
		if code := b.fail.Load(); code != 0 {
			w.WriteHeader(int(code))
			fmt.Fprint(w, "failed")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/orders/"+id)
		w.Header().Set("X-Order-Id", id)
		w.Header().Set("X-Not-Kept", "x")
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"amount_cents":%v}`, id, in["amount_cents"])
	})))
	mux.HandleFunc("GET /v1/orders/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "get") })
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (b *bundle) post(t *testing.T, apiKey, key, body string, extra ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/v1/orders", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i] == "Content-Type" {
			req.Header.Set(extra[i], extra[i+1]) // instead of the default, not beside it
			continue
		}
		req.Header.Add(extra[i], extra[i+1]) // beside any other (two keys)
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, string(data)}
}

func (b *bundle) orderCount(t *testing.T) int { return countOrders(t, b.db) }

// countOrders counts the keys of db's orders bucket (0 without one).
func countOrders(t *testing.T, db *kv.DB) int {
	t.Helper()
	n := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n = 0
		if bk := tx.Bucket([]byte("orders")); bk != nil {
			c := bk.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				n++
			}
		}
		return nil
	}))
	return n
}

func problemType(t *testing.T, r reply) string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), r.body)
	var p idemhttp.Problem
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	require.Equal(t, r.status, p.Status)
	return p.Type
}

const order = `{"external_ref":"ext-1","amount_cents":2500,"currency":"eur","client_ts":"2026-12-01T10:00:00Z","request_id":"r1"}`

func TestReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.post(t, "sk_acme", "k1", order)
	require.Equal(t, 201, first.status)
	require.Equal(t, `{"id":"ord_1","amount_cents":2500}`, first.body)
	require.Empty(t, first.header.Get("Idempotent-Replayed"))
	require.NotEmpty(t, first.header.Get("Set-Cookie"), "the first response carries every header")
	require.Equal(t, "x", first.header.Get("X-Not-Kept"))

	// The same request, re-serialised with a new client_ts and request_id.
	retry := b.post(t, "sk_acme", "k1", `{"request_id":"r2","currency":"eur","amount_cents":2500,"client_ts":"2026-12-01T10:00:09Z","external_ref":"ext-1"}`)
	require.Equal(t, 201, retry.status)
	require.Equal(t, first.body, retry.body)
	require.Equal(t, "true", retry.header.Get("Idempotent-Replayed"))
	require.Equal(t, "application/json", retry.header.Get("Content-Type"))
	require.Equal(t, "/v1/orders/ord_1", retry.header.Get("Location"))
	require.Equal(t, "ord_1", retry.header.Get("X-Order-Id"), "a header the app keeps")
	require.Empty(t, retry.header.Get("Set-Cookie"), "Set-Cookie is never stored")
	require.Empty(t, retry.header.Get("X-Not-Kept"))
	require.Equal(t, int32(1), b.runs.Load())
	require.Equal(t, 1, b.orderCount(t))

	// Any other change is a different request: 422, nothing runs.
	other := b.post(t, "sk_acme", "k1", strings.Replace(order, "2500", "2501", 1))
	require.Equal(t, 422, other.status)
	require.Equal(t, idemhttp.ProblemKeyReused, problemType(t, other))
	require.Equal(t, 1, b.orderCount(t))

	s := b.mw.Stats()
	require.Equal(t, uint64(1), s.Executed)
	require.Equal(t, uint64(1), s.Replayed)
	require.Equal(t, uint64(1), s.Mismatched)
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *idemhttp.Config) { c.MaxBodyBytes = 1024 })
	cases := []struct {
		name   string
		apiKey string
		key    string
		body   string
		extra  []string
		status int
		typ    string
	}{
		{"no api key", "", "k", order, nil, 401, idemhttp.ProblemUnauthenticated},
		{"bad api key", "sk_nope", "k", order, nil, 401, idemhttp.ProblemUnauthenticated},
		{"missing key", "sk_acme", "", order, nil, 400, idemhttp.ProblemKeyMissing},
		{"empty key", "sk_acme", "", order, []string{"Idempotency-Key", ""}, 400, idemhttp.ProblemKeyInvalid},
		{"256 bytes", "sk_acme", strings.Repeat("k", 256), order, nil, 400, idemhttp.ProblemKeyInvalid},
		{"non-ascii", "sk_acme", "", order, []string{"Idempotency-Key", "ключ"}, 400, idemhttp.ProblemKeyInvalid},
		{"space", "sk_acme", "a b", order, nil, 400, idemhttp.ProblemKeyInvalid},
		{"two keys", "sk_acme", "a", order, []string{"Idempotency-Key", "b"}, 400, idemhttp.ProblemKeyInvalid},
		{"invalid json", "sk_acme", "k2", `{"amount_cents":`, nil, 400, idemhttp.ProblemInvalidBody},
		{"case-folded duplicate member", "sk_acme", "k5", `{"amount_cents":100,"AMOUNT_CENTS":200}`, nil, 400, idemhttp.ProblemInvalidBody},
		// Go reads both names as "\ufffd": with the members swapped the
		// canonical form was the same and the decoded amount was not.
		{"lone surrogate member names", "sk_acme", "k6", `{"amount_cents":100,"\ud800":1,"\ud801":2}`, nil, 400, idemhttp.ProblemInvalidBody},
		{"too deep", "sk_acme", "k3", strings.Repeat("[", 100) + strings.Repeat("]", 100), nil, 400, idemhttp.ProblemInvalidBody},
		{"too large", "sk_acme", "k4", `{"pad":"` + strings.Repeat("x", 2000) + `"}`, nil, 413, idemhttp.ProblemBodyTooLarge},
	}
	for _, c := range cases {
		r := b.post(t, c.apiKey, c.key, c.body, c.extra...)
		require.Equal(t, c.status, r.status, c.name)
		require.Equal(t, c.typ, problemType(t, r), c.name)
	}
	require.Zero(t, b.runs.Load())
	require.Zero(t, b.orderCount(t))
	require.Equal(t, uint64(len(cases)), b.mw.Stats().Rejected)
	// Quoted keys (RFC 8941 strings) are accepted; 255 bytes is fine.
	require.Equal(t, 201, b.post(t, "sk_acme", `"quoted-key"`, order).status)
	require.Equal(t, 201, b.post(t, "sk_acme", strings.Repeat("k", 255), order).status)
	// GET passes through untouched.
	resp, err := b.srv.Client().Get(b.srv.URL + "/v1/orders/1")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

func TestServerErrorsAndPanicsStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.fail.Store(503)
	r := b.post(t, "sk_acme", "k", order)
	require.Equal(t, 503, r.status)
	require.Equal(t, "failed", r.body)
	require.Zero(t, b.orderCount(t), "the handler's writes rolled back")

	b.fail.Store(0)
	b.panic.Store(true)
	r = b.post(t, "sk_acme", "k", order)
	require.Equal(t, 500, r.status)
	require.Equal(t, idemhttp.ProblemInternal, problemType(t, r))
	require.Zero(t, b.orderCount(t))

	b.panic.Store(false)
	r = b.post(t, "sk_acme", "k", order)
	require.Equal(t, 201, r.status, "the retry runs again")
	require.Equal(t, 1, b.orderCount(t))
	require.Equal(t, uint64(2), b.mw.Stats().NotStored)

	// A 4xx is an answer and is stored.
	b.fail.Store(409)
	r = b.post(t, "sk_acme", "k-409", order)
	require.Equal(t, 409, r.status)
	b.fail.Store(0)
	r = b.post(t, "sk_acme", "k-409", order)
	require.Equal(t, 409, r.status)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
}

func TestTenantsNeverShareKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a := b.post(t, "sk_acme", "shared", order)
	g := b.post(t, "sk_globex", "shared", order)
	require.Equal(t, 201, a.status)
	require.Equal(t, 201, g.status)
	require.NotEqual(t, a.body, g.body)
	require.Equal(t, 2, b.orderCount(t))
	// A forged tenant header changes nothing: the tenant comes from auth.
	f := b.post(t, "sk_acme", "shared", order, "X-Tenant", "globex")
	require.Equal(t, a.body, f.body)
}

func TestInProgressConflictAndWait(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	fp, _ := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts", "request_id"}})
	sum, err := fp.Sum("POST", "/v1/orders", "application/json", []byte(order))
	require.NoError(t, err)
	_, err = b.l.Claim(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: "busy", Fingerprint: sum})
	require.NoError(t, err)
	r := b.post(t, "sk_acme", "busy", order)
	require.Equal(t, 409, r.status)
	require.Equal(t, idemhttp.ProblemInProgress, problemType(t, r))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Equal(t, uint64(1), b.mw.Stats().InProgress)

	// With Wait configured, the duplicate waits for the first attempt.
	w := setup(t, func(c *idemhttp.Config) { c.Wait = time.Minute })
	out, err := w.l.Claim(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: "busy", Fingerprint: sum})
	require.NoError(t, err)
	got := make(chan reply)
	go func() { got <- w.post(t, "sk_acme", "busy", order) }()
	time.Sleep(20 * time.Millisecond) // let the request reach the wait; the result does not depend on it
	_, err = w.l.Complete(ctx, out.Claim, ledger.Response{Status: 201, Body: []byte("finished elsewhere")}, nil)
	require.NoError(t, err)
	r = testwait.Receive(t, got, "the waiting duplicate's answer")
	require.Equal(t, 201, r.status)
	require.Equal(t, "finished elsewhere", r.body)
}

// 50 identical POSTs at once: one execution, every answer the same bytes.
func TestStorm(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	start := make(chan struct{})
	for i := range replies {
		wg.Go(func() {
			<-start
			replies[i] = b.post(t, "sk_acme", "storm", order)
		})
	}
	close(start)
	wg.Wait()
	for _, r := range replies {
		if r.status == 409 {
			continue
		}
		require.Equal(t, 201, r.status)
		require.Equal(t, replies[0].body, r.body)
	}
	require.Equal(t, 1, b.orderCount(t))
}

func TestKeyOptionalAndConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *idemhttp.Config) { c.KeyOptional = true })
	r := b.post(t, "sk_acme", "", order)
	require.Equal(t, 201, r.status)
	r = b.post(t, "sk_acme", "", order)
	require.Equal(t, 201, r.status)
	require.Equal(t, 2, b.orderCount(t), "without a key there is no protection")
	_, err := idemhttp.New(&idemhttp.Config{})
	require.Error(t, err)
}

// A request that finds its key claimed by an attempt whose lease ran out
// takes it over, runs, and counts as a takeover.
func TestTakeoverIsCounted(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, ledger.RecordKind, sideeffect.RecordKind)
	l, err := ledger.New(db, &ledger.Config{Lease: time.Minute})
	require.NoError(t, err)
	var events []idemhttp.EventKind
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil },
		OnEvent: func(e idemhttp.Event) { events = append(events, e.Kind) }})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		fmt.Fprint(w, "created")
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	fp, _ := fingerprint.New(&fingerprint.Options{})
	sum, _ := fp.Sum("POST", "/v1/orders", "application/json", []byte(`{"a":1}`))
	_, err = l.Claim(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: "abandoned", Fingerprint: sum})
	require.NoError(t, err)
	clock.Advance(2 * time.Minute) // the first attempt's lease is over

	req, _ := http.NewRequest("POST", srv.URL+"/v1/orders", strings.NewReader(`{"a":1}`))
	req.Header.Set("Idempotency-Key", "abandoned")
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, uint64(1), mw.Stats().Takeovers)
	require.Equal(t, uint64(1), mw.Stats().Executed)
	require.Equal(t, []idemhttp.EventKind{idemhttp.EventTakeover, idemhttp.EventExecuted}, events)
}

// Each request that hits the ledger is one log line at Info, with its
// outcome and key; a logger above Info gets none.
func TestRequestsAreLoggedAtInfo(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelWarn} {
		out, err := os.Create(filepath.Join(t.TempDir(), "log")) // a file takes the server goroutines' writes safely
		require.NoError(t, err)
		b := setup(t, func(c *idemhttp.Config) {
			c.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
		})
		require.Equal(t, 201, b.post(t, "sk_acme", "log-1", `{"amount_cents":1}`).status)
		require.Equal(t, 201, b.post(t, "sk_acme", "log-1", `{"amount_cents":1}`).status)
		require.NoError(t, out.Close())
		data, err := os.ReadFile(out.Name())
		require.NoError(t, err)
		lines := string(data)
		if level == slog.LevelInfo {
			require.Contains(t, lines, `msg="idempotent request" outcome=executed scope="acme|POST /v1/orders" key=log-1 status=201`)
			require.Contains(t, lines, `outcome=replayed`)
		} else {
			require.NotContains(t, lines, "idempotent request")
		}
	}
}

// A client that compresses its JSON (Content-Encoding: gzip) is served: the
// compressed body is not the JSON text, so it is fingerprinted as the bytes
// sent, not refused as invalid JSON. Its retry replays; another body under
// the same key is a mismatch.
func TestCompressedBodyIsFingerprintedAsBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	gz := func(s string) string {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write([]byte(s))
		require.NoError(t, zw.Close())
		return buf.String()
	}
	first := b.post(t, "sk_acme", "gz-1", gz(`{"amount_cents":100}`), "Content-Encoding", "gzip")
	require.Equal(t, 201, first.status, first.body)
	require.Contains(t, first.body, `"amount_cents":100`)
	retry := b.post(t, "sk_acme", "gz-1", gz(`{"amount_cents":100}`), "Content-Encoding", "gzip")
	require.Equal(t, 201, retry.status)
	require.Equal(t, first.body, retry.body)
	require.Equal(t, "true", retry.header.Get("Idempotent-Replayed"))
	other := b.post(t, "sk_acme", "gz-1", gz(`{"amount_cents":200}`), "Content-Encoding", "gzip")
	require.Equal(t, 422, other.status, other.body)
	// The same text sent uncompressed is another request, not a replay.
	plain := b.post(t, "sk_acme", "gz-1", `{"amount_cents":100}`)
	require.Equal(t, 422, plain.status, plain.body)
	require.Equal(t, int32(1), b.runs.Load())
	// "identity" is no encoding: the body is JSON, canonicalised.
	require.Equal(t, 201, b.post(t, "sk_acme", "gz-2", `{"amount_cents":5}`, "Content-Encoding", "identity").status)
	again := b.post(t, "sk_acme", "gz-2", ` { "amount_cents" : 5 } `, "Content-Encoding", "Identity")
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"), again.body)
}

// countRun counts a run of a handler in n and returns the count, leaving
// out the second of a rerun build's two runs of each transaction
// (kvtest.Counts): the tests count what one run of each gives.
func countRun(n *atomic.Int32) int32 {
	if !kvtest.Counts() {
		return n.Load()
	}
	return n.Add(1)
}
