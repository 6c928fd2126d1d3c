package idemhttptest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Target is the endpoint under test.
type Target struct {
	// Handler serves the endpoint, with the idempotency middleware.
	Handler http.Handler
	// Request returns a fresh copy of the one logical request: the same
	// Idempotency-Key and body every time. The URL's host is replaced by the
	// test server's.
	Request func() *http.Request
	// Executions reports how many times the work behind the endpoint really
	// took effect, read from the service's own state (rows written, charges
	// made). The helpers require exactly one.
	Executions func() int
}

// Answer is one response as the client saw it.
type Answer struct {
	Status   int
	Body     []byte
	Replayed bool
}

func send(c *http.Client, base string, r *http.Request) (Answer, error) {
	u := *r.URL
	u.Scheme, u.Host = "http", base[len("http://"):]
	r.URL = &u
	r.RequestURI = ""
	resp, err := c.Do(r)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return Answer{Status: resp.StatusCode, Body: body, Replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, err
}

func retryable(a Answer) bool { return a.Status == http.StatusConflict || a.Status >= 500 }

// settle re-sends the request until it gets a final answer (not 409 or 5xx).
func settle(t testing.TB, c *http.Client, base string, tg Target) Answer {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		a, err := send(c, base, tg.Request())
		if err == nil && !retryable(a) {
			return a
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("idemhttptest: no final answer within 30s")
	return Answer{}
}

// Storm sends n copies of the request at once. Every final answer must be
// byte-identical (the first execution's response, replayed to the others),
// the rest 409 while the first was in progress; the work must have run once.
func Storm(t testing.TB, tg Target, n int) []Answer {
	t.Helper()
	srv := httptest.NewServer(tg.Handler)
	defer srv.Close()
	answers := make([]Answer, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = send(srv.Client(), srv.URL, tg.Request())
		})
	}
	close(start)
	wg.Wait()
	var first *Answer
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatalf("idemhttptest: storm request %d: %v", i, errs[i])
		}
		if a.Status == http.StatusConflict {
			continue
		}
		if a.Status >= 500 {
			t.Fatalf("idemhttptest: storm request %d answered %d: %s", i, a.Status, a.Body)
		}
		if first == nil {
			first = &answers[i]
			continue
		}
		if a.Status != first.Status || !bytes.Equal(a.Body, first.Body) {
			t.Fatalf("idemhttptest: storm answers differ: %d %q and %d %q", first.Status, first.Body, a.Status, a.Body)
		}
	}
	if first == nil {
		settle(t, srv.Client(), srv.URL, tg) // every copy met the first in progress: finish it
	}
	if got := tg.Executions(); got != 1 {
		t.Fatalf("idemhttptest: after a storm of %d duplicates the work ran %d times, want 1", n, got)
	}
	return answers
}

// droppingTransport performs the request and loses the response.
type droppingTransport struct{ base http.RoundTripper }

var errLost = errors.New("idemhttptest: response lost")

func (d droppingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(r)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return nil, errLost
}

// LostResponses sends the request `lost` times, each time letting it reach
// the service and throwing the response away (a timeout, a dropped
// connection), then retries normally. The retry must be a replay of the one
// execution, and the work must have run once.
func LostResponses(t testing.TB, tg Target, lost int) Answer {
	t.Helper()
	srv := httptest.NewServer(tg.Handler)
	defer srv.Close()
	dropper := &http.Client{Transport: droppingTransport{base: srv.Client().Transport}}
	for range lost {
		if _, err := send(dropper, srv.URL, tg.Request()); !errors.Is(err, errLost) {
			t.Fatalf("idemhttptest: the dropping transport returned %v", err)
		}
	}
	a := settle(t, srv.Client(), srv.URL, tg)
	if !a.Replayed {
		t.Fatalf("idemhttptest: after %d lost responses the retry was not a replay: %d %q", lost, a.Status, a.Body)
	}
	if got := tg.Executions(); got != 1 {
		t.Fatalf("idemhttptest: after %d lost responses the work ran %d times, want 1", lost, got)
	}
	return a
}

// CloseRestart opens the service on path with open, sends the request and
// closes the service's database while the request may be in flight, opens
// the service again on the same file, and retries until a final answer.
// Across both incarnations the work must have run exactly once. open
// returns the target and a function that closes the service (its database).
//
// It is not a crash: the process lives on and the close is orderly. For a
// real one — a child process killed with SIGKILL at a chosen point — use
// KillRestart.
func CloseRestart(t testing.TB, path string, open func(path string) (Target, func() error)) Answer {
	t.Helper()
	tg, crash := open(path)
	srv := httptest.NewServer(tg.Handler)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = send(srv.Client(), srv.URL, tg.Request()) // its answer, if any, is lost with the process
	}()
	time.Sleep(time.Millisecond) // let it reach the service; the outcome holds either way
	if err := crash(); err != nil {
		t.Fatalf("idemhttptest: crash: %v", err)
	}
	<-done
	srv.Close()

	tg2, closeAgain := open(path)
	defer func() { _ = closeAgain() }()
	srv2 := httptest.NewServer(tg2.Handler)
	defer srv2.Close()
	a := settle(t, srv2.Client(), srv2.URL, tg2)
	if got := tg2.Executions(); got != 1 {
		t.Fatalf("idemhttptest: across a crash and a restart the work ran %d times, want 1 (answer %d %q)", got, a.Status, a.Body)
	}
	return a
}

// String formats an answer for messages.
func (a Answer) String() string {
	return fmt.Sprintf("%d replayed=%t %q", a.Status, a.Replayed, a.Body)
}
