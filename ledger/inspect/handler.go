package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/oncekv/oncekv/kv"
)

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// ShowBodies includes stored response bodies and intent payloads and
	// results. Off by default: they may hold personal data.
	ShowBodies bool
}

// Handler serves the inspection queries of db as JSON, read-only:
//
//	GET /keys?scope=PREFIX&status=in_progress|completed&expired=1&limit=N
//	GET /get?scope=S&key=K&body=1
//	GET /intents?state=S
//	GET /outbox
//	GET /inbox?consumer=C&limit=N
//	GET /stats
//	GET /check
//
// Mount it on a loopback address or a unix socket.
func Handler(db *kv.DB, opts HandlerOptions) http.Handler {
	in := New(db)
	in.ShowBodies = opts.ShowBodies
	mux := http.NewServeMux()
	serve := func(path string, fn func(r *http.Request) (any, error)) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
			v, err := fn(r)
			w.Header().Set("Content-Type", "application/json")
			if err != nil {
				status := http.StatusInternalServerError
				if errors.Is(err, ErrNotFound) {
					status = http.StatusNotFound
				}
				w.WriteHeader(status)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
				return
			}
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	q := func(r *http.Request, k string) string { return r.URL.Query().Get(k) }
	limit := func(r *http.Request) int { n, _ := strconv.Atoi(q(r, "limit")); return n }
	serve("/keys", func(r *http.Request) (any, error) {
		return in.Keys(r.Context(), KeysQuery{ScopePrefix: q(r, "scope"), Status: q(r, "status"), Expired: q(r, "expired") == "1", Limit: limit(r)})
	})
	serve("/get", func(r *http.Request) (any, error) {
		return in.Get(r.Context(), q(r, "scope"), q(r, "key"), q(r, "body") == "1")
	})
	serve("/intents", func(r *http.Request) (any, error) { return in.Intents(r.Context(), q(r, "state")) })
	serve("/outbox", func(r *http.Request) (any, error) { return in.Outbox(r.Context()) })
	serve("/inbox", func(r *http.Request) (any, error) { return in.Inbox(r.Context(), q(r, "consumer"), limit(r)) })
	serve("/stats", func(r *http.Request) (any, error) { return in.Stats(r.Context()) })
	serve("/check", func(r *http.Request) (any, error) { return in.Check(r.Context()) })
	return mux
}

// Client queries a Handler over HTTP.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

var _ Source = (*Client)(nil)

func (c *Client) get(ctx context.Context, path string, params url.Values, v any) error {
	u := c.BaseURL + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode == http.StatusNotFound && e.Error != "" {
			return fmt.Errorf("%w (from %s)", ErrNotFound, c.BaseURL)
		}
		return fmt.Errorf("inspect: %s answered %s: %s", u, resp.Status, e.Error)
	}
	return json.Unmarshal(body, v)
}

func set(v url.Values, k, val string) {
	if val != "" {
		v.Set(k, val)
	}
}

// Keys implements Source.
func (c *Client) Keys(ctx context.Context, q KeysQuery) ([]Key, error) {
	p := url.Values{}
	set(p, "scope", q.ScopePrefix)
	set(p, "status", q.Status)
	if q.Expired {
		p.Set("expired", "1")
	}
	if q.Limit > 0 {
		p.Set("limit", strconv.Itoa(q.Limit))
	}
	var out []Key
	return out, c.get(ctx, "/keys", p, &out)
}

// Get implements Source.
func (c *Client) Get(ctx context.Context, scope, key string, body bool) (Record, error) {
	p := url.Values{"scope": {scope}, "key": {key}}
	if body {
		p.Set("body", "1")
	}
	var out Record
	return out, c.get(ctx, "/get", p, &out)
}

// Intents implements Source.
func (c *Client) Intents(ctx context.Context, state string) ([]Intent, error) {
	p := url.Values{}
	set(p, "state", state)
	var out []Intent
	return out, c.get(ctx, "/intents", p, &out)
}

// Outbox implements Source.
func (c *Client) Outbox(ctx context.Context) (Outbox, error) {
	var out Outbox
	return out, c.get(ctx, "/outbox", nil, &out)
}

// Inbox implements Source.
func (c *Client) Inbox(ctx context.Context, consumer string, limit int) ([]InboxEntry, error) {
	p := url.Values{}
	set(p, "consumer", consumer)
	if limit > 0 {
		p.Set("limit", strconv.Itoa(limit))
	}
	var out []InboxEntry
	return out, c.get(ctx, "/inbox", p, &out)
}

// Stats implements Source.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	return out, c.get(ctx, "/stats", nil, &out)
}

// Check implements Source.
func (c *Client) Check(ctx context.Context) ([]Problem, error) {
	var out []Problem
	return out, c.get(ctx, "/check", nil, &out)
}
