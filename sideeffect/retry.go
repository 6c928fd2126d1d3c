package sideeffect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// Defaults of RetryPolicy.
const (
	DefaultRetryAttempts = 5
	DefaultRetryDeadline = 30 * time.Second
)

// ErrNotRetryable is returned (as a *NotRetryableError) when a request
// failed in a way that a retry might fix, but retrying could repeat its
// effect: a non-idempotent method without an Idempotency-Key.
var ErrNotRetryable = errors.New("sideeffect: request failed and is not safe to retry")

// NotRetryableError carries the failure that was not retried.
type NotRetryableError struct {
	Method, URL string
	Cause       error // the error, or a description of the response
}

func (e *NotRetryableError) Error() string {
	return fmt.Sprintf("sideeffect: %s %s failed (%v) and was not retried: a %s without an Idempotency-Key could apply twice",
		e.Method, e.URL, e.Cause, e.Method)
}

// Unwrap returns ErrNotRetryable and the cause.
func (e *NotRetryableError) Unwrap() []error { return []error{ErrNotRetryable, e.Cause} }

// RetryPolicy bounds how a client retries: a number of attempts, an overall
// deadline, exponential backoff with full jitter, and only failures that may
// be transient. The zero value uses the defaults.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt. 0 means DefaultRetryAttempts.
	MaxAttempts int
	// Deadline bounds all attempts and waits together. 0 means DefaultRetryDeadline.
	Deadline time.Duration
	// Backoff spaces attempts; a server's Retry-After wins when it is longer.
	Backoff Backoff
	// Sleep waits between attempts. nil means a timer that honours ctx.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Decision is how a failure is classified.
type Decision struct {
	Retry      bool
	RetryAfter time.Duration // from the response's Retry-After header, if any
	Reason     string
}

// Classify decides whether an attempt's outcome may be transient. Retried:
// network timeouts, refused or reset connections, unexpected EOF, and the
// statuses 408, 425, 429, 502, 503, 504, and 409 when it carries Retry-After
// (an idempotency key still in progress). Everything else (success, other
// 4xx, 500, 501) is final.
func Classify(resp *http.Response, err error) Decision {
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, context.Canceled):
			return Decision{Reason: "canceled"}
		case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
			return Decision{Retry: true, Reason: "timeout"}
		case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
			errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
			return Decision{Retry: true, Reason: "connection: " + err.Error()}
		}
		var op *net.OpError
		if errors.As(err, &op) {
			return Decision{Retry: true, Reason: "network: " + err.Error()}
		}
		return Decision{Reason: err.Error()}
	}
	ra := retryAfter(resp.Header.Get("Retry-After"))
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Decision{Retry: true, RetryAfter: ra, Reason: resp.Status}
	case http.StatusConflict:
		if resp.Header.Get("Retry-After") != "" {
			return Decision{Retry: true, RetryAfter: ra, Reason: "in progress"}
		}
	}
	return Decision{Reason: resp.Status}
}

// retryAfter parses delta-seconds or an HTTP date; 0 if absent or invalid.
// A number of seconds too large for a time.Duration saturates, as a date
// far ahead does, instead of wrapping round to a short (or negative) wait.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || s > uint64(math.MaxInt64/time.Second) {
			return math.MaxInt64
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

func (p RetryPolicy) attempts() int {
	if p.MaxAttempts <= 0 {
		return DefaultRetryAttempts
	}
	return p.MaxAttempts
}

func (p RetryPolicy) deadline() time.Duration {
	if p.Deadline <= 0 {
		return DefaultRetryDeadline
	}
	return p.Deadline
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// idempotentMethod reports methods that HTTP defines as idempotent.
func idempotentMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// Do sends req with c, retrying per the policy. A POST or PATCH is retried
// only if it carries an Idempotency-Key header; otherwise a retryable
// failure is returned as *NotRetryableError. The body is buffered so every
// attempt sends the same bytes. The last response (or error) is returned;
// a response's body is closed for every attempt but the returned one.
func (p RetryPolicy) Do(ctx context.Context, c *http.Client, req *http.Request) (*http.Response, error) {
	if c == nil {
		c = http.DefaultClient
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	safe := idempotentMethod(req.Method) || req.Header.Get("Idempotency-Key") != ""
	ctx, cancel := context.WithTimeout(ctx, p.deadline())
	defer cancel()
	sleep := p.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}

	for attempt := 1; ; attempt++ {
		r := req.Clone(ctx)
		if body != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		resp, err := c.Do(r) //nolint:gosec // a client retry policy sends the request its caller built
		d := Classify(resp, err)
		if !d.Retry {
			return resp, err
		}
		if !safe {
			cause := err
			if cause == nil {
				cause = errors.New(resp.Status)
			}
			return resp, &NotRetryableError{Method: req.Method, URL: req.URL.String(), Cause: cause}
		}
		if attempt >= p.attempts() {
			return resp, err
		}
		wait := max(p.Backoff.Delay(attempt), d.RetryAfter)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return resp, err // the next attempt could not start before the deadline
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
		}
		if serr := sleep(ctx, wait); serr != nil {
			return nil, serr
		}
	}
}
