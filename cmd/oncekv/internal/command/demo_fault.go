package command

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
)

// faultTransport injects client-side faults and counts what happens.
type faultTransport struct {
	base                  http.RoundTripper
	lose, dup, concurrent float64
	mu                    sync.Mutex
	rng                   *rand.Rand
	attempts, replays     atomic.Int64
	conflicts, lost       atomic.Int64
}

func (t *faultTransport) roll() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rng.Float64()
}

func (t *faultTransport) send(req *http.Request, body []byte) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	t.attempts.Add(1)
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// Read it all, so a discarded duplicate still completes on the server.
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return resp, nil
}

func discard(resp *http.Response, err error) {
	if err == nil {
		resp.Body.Close()
	}
}

func (t *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body.Close()
	}
	var resp *http.Response
	var err error
	switch r := t.roll(); {
	case r < t.concurrent:
		var wg sync.WaitGroup
		var other *http.Response
		var otherErr error
		wg.Go(func() { other, otherErr = t.send(req, body) })
		resp, err = t.send(req, body)
		wg.Wait()
		discard(other, otherErr)
	case r < t.concurrent+t.dup:
		discard(t.send(req, body))
		resp, err = t.send(req, body)
	default:
		resp, err = t.send(req, body)
	}
	if err != nil {
		return nil, err
	}
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		t.replays.Add(1)
	}
	if resp.StatusCode == http.StatusConflict {
		t.conflicts.Add(1)
	}
	if t.roll() < t.lose {
		resp.Body.Close()
		t.lost.Add(1)
		return nil, fmt.Errorf("demo transport: response lost: %w", io.ErrUnexpectedEOF)
	}
	return resp, nil
}
