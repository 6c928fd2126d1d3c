package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// WebhookPublisher publishes each event as an HTTP POST of JSON to URL,
// with the event ID as Idempotency-Key so the receiver can dedupe. A 2xx
// answer acknowledges the event; anything else, or no answer, fails it.
// Redirects are never followed, whatever the Client: Go's client would turn
// a POST answered 301/302/303 into a bodiless GET, whose 2xx would mark an
// event published that nobody received. A 3xx is a failed publish.
//
// The body is
//
//	{"id": "...", "topic": "...", "key": "...", "seq": 42,
//	 "headers": {...}, "payload": <the payload if it is JSON, else a string>}
type WebhookPublisher struct {
	URL     string
	Client  *http.Client      // nil means a client with a 10s timeout
	Headers map[string]string // added to every request (authentication)
}

var _ Publisher = (*WebhookPublisher)(nil)

type webhookBody struct {
	ID      string            `json:"id"`
	Topic   string            `json:"topic"`
	Key     string            `json:"key,omitempty"`
	Seq     uint64            `json:"seq"`
	Headers map[string]string `json:"headers,omitempty"`
	Payload json.RawMessage   `json:"payload"`
}

var webhookClient = &http.Client{Timeout: 10 * time.Second, CheckRedirect: noRedirects}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Publish posts the events one by one, in order.
func (p *WebhookPublisher) Publish(ctx context.Context, events []Event) (int, error) {
	c := webhookClient
	if p.Client != nil {
		cc := *p.Client // a copy: the caller's client keeps its own policy elsewhere
		cc.CheckRedirect = noRedirects
		c = &cc
	}
	for i, ev := range events {
		payload := json.RawMessage(ev.Payload)
		if !json.Valid(ev.Payload) {
			payload, _ = json.Marshal(string(ev.Payload))
		}
		body, err := json.Marshal(webhookBody{ID: ev.ID, Topic: ev.Topic, Key: ev.Key, Seq: ev.Seq, Headers: ev.Headers, Payload: payload})
		if err != nil {
			return i, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
		if err != nil {
			return i, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", ev.ID)
		for k, v := range p.Headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return i, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
			return i, fmt.Errorf("webhook %s answered %s (a redirect, to %q) for event %s: not followed, the event is not delivered", p.URL, resp.Status, resp.Header.Get("Location"), ev.ID)
		}
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return i, fmt.Errorf("webhook %s answered %s for event %s", p.URL, resp.Status, ev.ID)
		}
	}
	return len(events), nil
}
