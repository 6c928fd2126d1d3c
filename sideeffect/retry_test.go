package sideeffect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/sideeffect"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	t.Parallel()
	resp := func(code int, retryAfter string) *http.Response {
		h := http.Header{}
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return &http.Response{StatusCode: code, Status: fmt.Sprint(code), Header: h}
	}
	cases := []struct {
		name  string
		resp  *http.Response
		err   error
		retry bool
		after time.Duration
	}{
		{"200", resp(200, ""), nil, false, 0},
		{"201", resp(201, ""), nil, false, 0},
		{"400", resp(400, ""), nil, false, 0},
		{"401", resp(401, ""), nil, false, 0},
		{"404", resp(404, ""), nil, false, 0},
		{"408", resp(408, ""), nil, true, 0},
		{"409 in progress", resp(409, "2"), nil, true, 2 * time.Second},
		{"409 conflict", resp(409, ""), nil, false, 0},
		{"413", resp(413, ""), nil, false, 0},
		{"422", resp(422, ""), nil, false, 0},
		{"425", resp(425, ""), nil, true, 0},
		{"429", resp(429, "7"), nil, true, 7 * time.Second},
		{"429 bad retry-after", resp(429, "soon"), nil, true, 0},
		{"429 negative retry-after", resp(429, "-5"), nil, true, 0},
		{"503 retry-after of a day", resp(503, "86400"), nil, true, 24 * time.Hour},
		// Seconds past what a Duration holds: these wrapped round to -8.4e9 s
		// (ignored: retried at once) and to -0.7 s.
		{"503 retry-after beyond a Duration", resp(503, "10000000000"), nil, true, math.MaxInt64},
		{"503 retry-after beyond a Duration, by less than a second", resp(503, "18446744073"), nil, true, math.MaxInt64},
		{"503 retry-after beyond uint64", resp(503, "99999999999999999999999"), nil, true, math.MaxInt64},
		{"500", resp(500, ""), nil, false, 0},
		{"501", resp(501, ""), nil, false, 0},
		{"502", resp(502, ""), nil, true, 0},
		{"503", resp(503, "1"), nil, true, time.Second},
		{"504", resp(504, ""), nil, true, 0},
		{"timeout", nil, &net.OpError{Op: "read", Err: timeoutErr{}}, true, 0},
		{"deadline", nil, fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true, 0},
		{"reset", nil, &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true, 0},
		{"refused", nil, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true, 0},
		{"eof", nil, io.ErrUnexpectedEOF, true, 0},
		{"canceled", nil, context.Canceled, false, 0},
		{"other", nil, errors.New("x509: certificate signed by unknown authority"), false, 0},
	}
	for _, c := range cases {
		d := sideeffect.Classify(c.resp, c.err)
		require.Equal(t, c.retry, d.Retry, c.name)
		require.Equal(t, c.after, d.RetryAfter, c.name)
	}
}

func TestBackoffFullJitterBounds(t *testing.T) {
	t.Parallel()
	b := sideeffect.Backoff{Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	want := []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} // ms
	for i, w := range want {
		require.Equal(t, w*time.Millisecond, b.Ceiling(i+1))
	}
	require.Equal(t, 2*time.Second, b.Ceiling(1000), "no overflow on huge attempt numbers")
	for attempt := 1; attempt < 20; attempt++ {
		for range 200 {
			d := b.Delay(attempt)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, b.Ceiling(attempt))
		}
	}
	lo := sideeffect.Backoff{Base: time.Second, Cap: time.Minute, Rand: func() float64 { return 0 }}
	hi := sideeffect.Backoff{Base: time.Second, Cap: time.Minute, Rand: func() float64 { return 0.999999999 }}
	require.Zero(t, lo.Delay(3))
	require.InDelta(t, float64(4*time.Second), float64(hi.Delay(3)), float64(time.Millisecond))
}

// server answers the scripted statuses in order, then 200, and records what
// each attempt carried.
type server struct {
	mu       sync.Mutex
	statuses []int
	bodies   []string
	keys     []string
	ts       *httptest.Server
}

func newServer(t *testing.T, statuses ...int) *server {
	s := &server{statuses: statuses}
	s.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(body))
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		code := 200
		if len(s.statuses) > 0 {
			code, s.statuses = s.statuses[0], s.statuses[1:]
		}
		s.mu.Unlock()
		if code == 429 {
			w.Header().Set("Retry-After", "3")
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d", code)
	}))
	t.Cleanup(s.ts.Close)
	return s
}

func (s *server) requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

func post(t *testing.T, url, key string) *http.Request {
	r, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount_cents":2500}`))
	require.NoError(t, err)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

func TestRetryPolicyRetriesWithTheSameKeyAndBody(t *testing.T) {
	t.Parallel()
	s := newServer(t, 503, 429, 502)
	var waits []time.Duration
	p := sideeffect.RetryPolicy{MaxAttempts: 5, Backoff: sideeffect.Backoff{Base: 10 * time.Millisecond, Cap: 20 * time.Millisecond},
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	resp, err := p.Do(ctx, s.ts.Client(), post(t, s.ts.URL, "key-1"))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 4, s.requests())
	require.Equal(t, []string{"key-1", "key-1", "key-1", "key-1"}, s.keys)
	for _, b := range s.bodies {
		require.Equal(t, `{"amount_cents":2500}`, b)
	}
	require.Len(t, waits, 3)
	require.GreaterOrEqual(t, waits[1], 3*time.Second, "Retry-After is honoured")
}

func TestRetryPolicyNeverRetriesUnkeyedPost(t *testing.T) {
	t.Parallel()
	s := newServer(t, 503, 503)
	p := sideeffect.RetryPolicy{Sleep: func(context.Context, time.Duration) error { return nil }}
	resp, err := p.Do(ctx, s.ts.Client(), post(t, s.ts.URL, ""))
	require.ErrorIs(t, err, sideeffect.ErrNotRetryable)
	var nr *sideeffect.NotRetryableError
	require.ErrorAs(t, err, &nr)
	require.Equal(t, "POST", nr.Method)
	require.Contains(t, err.Error(), "without an Idempotency-Key")
	require.NotNil(t, resp)
	resp.Body.Close()
	require.Equal(t, 1, s.requests(), "not retried")

	// A GET is idempotent by definition and is retried without a key.
	get, _ := http.NewRequest(http.MethodGet, s.ts.URL, nil)
	resp, err = p.Do(ctx, s.ts.Client(), get)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}

func TestRetryPolicyStopsAtAttemptsAndDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(t, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503)
	p := sideeffect.RetryPolicy{MaxAttempts: 3, Sleep: func(context.Context, time.Duration) error { return nil }}
	resp, err := p.Do(ctx, s.ts.Client(), post(t, s.ts.URL, "k"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
	require.Equal(t, 3, s.requests())

	// A wait that would end past the deadline is not started.
	s2 := newServer(t, 503, 503, 503)
	p = sideeffect.RetryPolicy{MaxAttempts: 10, Deadline: time.Second, Backoff: sideeffect.Backoff{Base: time.Hour, Cap: time.Hour, Rand: func() float64 { return 0.5 }}}
	resp, err = p.Do(ctx, s2.ts.Client(), post(t, s2.ts.URL, "k"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 1, s2.requests())

	// A server that never answers is cut off by the deadline.
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hang.Close()
	defer close(stop)
	p = sideeffect.RetryPolicy{MaxAttempts: 10, Deadline: 200 * time.Millisecond, Backoff: sideeffect.Backoff{Base: time.Millisecond, Cap: time.Millisecond}}
	_, err = p.Do(ctx, hang.Client(), post(t, hang.URL, "k"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A key persisted before the first attempt survives a restart of the client.
func TestKeyStoreSurvivesReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "client.db")
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	ks := sideeffect.NewKeyStore(db)
	k1, err := ks.Key(ctx, "pay order 1042")
	require.NoError(t, err)
	k1b, _ := ks.Key(ctx, "pay order 1042")
	require.Equal(t, k1, k1b)
	other, _ := ks.Key(ctx, "pay order 1043")
	require.NotEqual(t, k1, other)
	require.NoError(t, db.Close())

	db, err = kv.Open(path, nil)
	require.NoError(t, err)
	defer db.Close()
	ks = sideeffect.NewKeyStore(db)
	k2, err := ks.Key(ctx, "pay order 1042")
	require.NoError(t, err)
	require.Equal(t, k1, k2, "the restarted client resumes with the same key")
	require.NoError(t, ks.Forget(ctx, "pay order 1042"))
	k3, _ := ks.Key(ctx, "pay order 1042")
	require.NotEqual(t, k1, k3)
	_, err = ks.Key(ctx, "")
	require.Error(t, err)
}

// closeTracking wraps a transport and records, for each response it
// returns, whether its body was closed.
type closeTracking struct {
	http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	mu     sync.Mutex
	closed bool
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return b.ReadCloser.Close()
}

func (c *closeTracking) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.RoundTripper.RoundTrip(r)
	if resp != nil {
		tb := &trackedBody{ReadCloser: resp.Body}
		resp.Body = tb
		c.mu.Lock()
		c.bodies = append(c.bodies, tb)
		c.mu.Unlock()
	}
	return resp, err
}

func (c *closeTracking) closed() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []bool
	for _, b := range c.bodies {
		b.mu.Lock()
		out = append(out, b.closed)
		b.mu.Unlock()
	}
	return out
}

// A request whose body cannot be re-read (no GetBody: a stream) sends the
// same bytes on every attempt; a connection dropped mid-request is
// retried; every response but the returned one is closed.
func TestRetryPolicyResendsAStreamedBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		n := len(bodies)
		mu.Unlock()
		switch n {
		case 1: // the connection drops before an answer
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "busy")
		default:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "created")
		}
	}))
	defer srv.Close()
	tr := &closeTracking{RoundTripper: srv.Client().Transport}
	req, err := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader(`{"amount_cents":2500}`)))
	require.NoError(t, err)
	require.Nil(t, req.GetBody, "a body the client cannot rewind")
	req.Header.Set("Idempotency-Key", "k1")
	p := sideeffect.RetryPolicy{MaxAttempts: 5, Sleep: func(context.Context, time.Duration) error { return nil }}
	resp, err := p.Do(ctx, &http.Client{Transport: tr}, req)
	require.NoError(t, err)
	got, _ := io.ReadAll(resp.Body)
	require.Equal(t, "created", string(got))
	require.Equal(t, []string{`{"amount_cents":2500}`, `{"amount_cents":2500}`, `{"amount_cents":2500}`}, bodies)
	require.Equal(t, []bool{true, false}, tr.closed(), "the 503 closed, the answer left to the caller")
	require.NoError(t, resp.Body.Close())
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeHook is a response body that runs a function when it is closed.
type closeHook struct {
	io.Reader
	onClose func()
}

func (c closeHook) Close() error { c.onClose(); return nil }

// With no Sleep set, the policy waits with a timer that honours its
// context: a short wait ends in the next attempt, and a caller that
// cancels during a half-hour wait gets the cancellation back at once (the
// test would run into its own timeout otherwise), with no second attempt.
func TestRetryPolicyDefaultSleepHonoursTheContext(t *testing.T) {
	t.Parallel()
	s := newServer(t, 503)
	p := sideeffect.RetryPolicy{MaxAttempts: 3, Backoff: sideeffect.Backoff{Base: time.Millisecond, Cap: time.Millisecond}}
	resp, err := p.Do(ctx, s.ts.Client(), post(t, s.ts.URL, "k"))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, 2, s.requests(), "the short wait ended in a second attempt")

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	attempts := 0
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		attempts++
		// The policy closes the body of a response it retries before it
		// waits: the caller cancels then.
		return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{}, Request: r,
			Body: closeHook{strings.NewReader("busy"), cancel}}, nil
	})}
	p = sideeffect.RetryPolicy{MaxAttempts: 3, Deadline: 2 * time.Hour,
		Backoff: sideeffect.Backoff{Base: time.Hour, Cap: time.Hour, Rand: func() float64 { return 0.5 }}}
	resp, err = p.Do(cctx, client, post(t, "http://provider.invalid/charges", "k"))
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, resp)
	require.Equal(t, 1, attempts)
}
