package inspect

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
)

// HandlerOptions configure Handler. The zero value serves the read-only
// queries to loopback callers, with everything sensitive redacted.
type HandlerOptions struct {
	// Token, when set, is the admin bearer token (Authorization: Bearer
	// TOKEN). A request carrying it may see stored bodies, payloads, results
	// and provider error text, run the full consistency check (/check), act
	// on intents (requeue, resolve), recount usage and drop damaged records.
	// Without it those are redacted or refused. With no Token, the handler answers loopback
	// callers only.
	Token string
	// Executor, if set, carries out intent actions live: a requeue wakes its
	// reconciler, a resolve is applied at once with its handlers. Without
	// it, actions are recorded in the file and the service's reconciler
	// applies them on its next pass.
	Executor *sideeffect.Executor
	// AllowedHosts are Host header values accepted besides the loopback
	// names (localhost, 127.0.0.1, [::1], with any port). Requests with any
	// other Host and no token are refused, so a web page cannot reach the
	// handler by DNS rebinding.
	AllowedHosts []string
	// BackupDir is where GET /backup writes its copy before sending it
	// (see Handler); "" means the database file's directory, which has
	// room for the file's growth already. The copy is removed once sent.
	BackupDir string
}

// Limits of the /keys listing.
const (
	// DefaultKeysLimit is the page size of /keys when no limit is given.
	DefaultKeysLimit = 100
	// MaxKeysLimit is the largest limit /keys accepts.
	MaxKeysLimit = 1000
)

// errBadParam marks a request parameter that does not parse (answered 400).
type errBadParam struct{ error }

func badParam(format string, args ...any) error { return errBadParam{fmt.Errorf(format, args...)} }

// errForbidden marks a request that needs the admin token (answered 401/403).
var errForbidden = errors.New("inspect: this needs the admin token (Authorization: Bearer TOKEN)")

// Handler serves the inspection queries of db as JSON:
//
//	GET  /keys?scope=PREFIX&key=PREFIX&status=in_progress|completed&expired=1&limit=N&offset=M   (N ≤ 1000, default 100)
//	GET  /get?scope=S&key=K&body=1          body only with the token
//	GET  /intents?state=S&limit=N           provider text only with the token (N ≤ 1000, default 100)
//	GET  /outbox
//	GET  /inbox?consumer=C&limit=N          (N ≤ 1000, default 100)
//	GET  /stats
//	GET  /check                             token only: a full scan
//	POST /intents/requeue?id=ID             token only
//	POST /intents/resolve?id=ID&state=succeeded|failed&result=R&reason=TEXT   token only
//	POST /usage/recount                     token only: mends tenants' usage counters
//	POST /drop?kind=idempotency|inbox|outbox&entry=E   token only: removes a damaged record the check names
//	POST /outbox/requeue?id=ID              token only: a quarantined event back to the queue
//	POST /outbox/requeue-all                token only: every quarantined event back to the queue
//	GET  /backup                            token only: a copy of the database file (kv.DB.Backup)
//
// GET /backup answers a bbolt file as of one read transaction, with its
// Content-Length: the copy is written to a temporary file in
// HandlerOptions.BackupDir first and sent from there, so the read
// transaction lasts as long as a local copy, not as long as the client
// takes to read it (bbolt reuses no page freed while it is open). One
// backup at a time (another answers 409); no Range requests (each
// request is a new copy); HEAD answers the headers and the file's size
// as of now without making a copy; an etcd database answers 501.
//
// Bad parameters answer 400. Under ConsolePath (/console/) it serves the
// web console: HTML pages for the people on call (overview, keys, one
// record, intents, outbox, inbox), readable without JavaScript and on a
// phone; the admin token, given once on its login page, unlocks bodies,
// a backup to download (/console/backup) and the actions (requeue and
// resolve intents, requeue one quarantined event or all of them), which
// are POST forms checked for a CSRF token and the same origin. Serve it
// on a loopback address (see ValidateAddr) or with a Token. It fails as
// New does.
func Handler(db *kv.DB, opts HandlerOptions) (http.Handler, error) {
	in, err := New(db)
	if err != nil {
		return nil, err
	}
	in.ShowBodies = false
	full := &Inspector{db: db, l: in.l, ShowBodies: true}
	mux := http.NewServeMux()
	serve := func(pattern string, fn func(r *http.Request, src *Inspector, admin bool) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			admin := opts.Token != "" && hasToken(r, opts.Token)
			if !admin && !allowed(r, opts) {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "inspect: refused: a loopback Host and caller, or the admin token, is required"})
				return
			}
			src := in
			if admin {
				src = full
			}
			v, err := fn(r, src, admin)
			if err != nil {
				writeJSON(w, errStatus(err, opts.Token != ""), map[string]string{"error": err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, v)
		})
	}
	q := func(r *http.Request, k string) string { return r.URL.Query().Get(k) }
	serve("GET /keys", func(r *http.Request, src *Inspector, _ bool) (any, error) {
		n, err := limitParam(r, DefaultKeysLimit, MaxKeysLimit)
		if err != nil {
			return nil, err
		}
		st := q(r, "status")
		if st != "" && st != "in_progress" && st != "completed" {
			return nil, badParam("status must be in_progress or completed, not %q", clip(st))
		}
		off := 0
		if v := q(r, "offset"); v != "" {
			if off, err = strconv.Atoi(v); err != nil || off < 0 {
				return nil, badParam("offset %q: want a whole number", clip(v))
			}
		}
		return src.Keys(r.Context(), KeysQuery{ScopePrefix: q(r, "scope"), KeyPrefix: q(r, "key"), Status: st, Expired: q(r, "expired") == "1", Limit: n, Offset: off})
	})
	serve("GET /get", func(r *http.Request, src *Inspector, _ bool) (any, error) {
		if q(r, "scope") == "" || q(r, "key") == "" {
			return nil, badParam("scope and key are required")
		}
		return src.Get(r.Context(), q(r, "scope"), q(r, "key"), q(r, "body") == "1")
	})
	serve("GET /intents", func(r *http.Request, src *Inspector, _ bool) (any, error) {
		if st := q(r, "state"); st != "" {
			if _, err := sideeffect.ParseState(st); err != nil {
				return nil, badParam("state %q: want pending, unknown, succeeded, failed or needs_attention", clip(st))
			}
		}
		n, err := limitParam(r, DefaultKeysLimit, MaxKeysLimit)
		if err != nil {
			return nil, err
		}
		return src.Intents(r.Context(), q(r, "state"), n)
	})
	serve("GET /outbox", func(r *http.Request, src *Inspector, _ bool) (any, error) { return src.Outbox(r.Context()) })
	serve("GET /inbox", func(r *http.Request, src *Inspector, _ bool) (any, error) {
		n, err := limitParam(r, DefaultKeysLimit, MaxKeysLimit)
		if err != nil {
			return nil, err
		}
		return src.Inbox(r.Context(), q(r, "consumer"), n)
	})
	serve("GET /stats", func(r *http.Request, src *Inspector, _ bool) (any, error) { return src.Stats(r.Context()) })
	serve("GET /check", func(r *http.Request, src *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		return src.Check(r.Context())
	})
	act := &Actions{DB: db, Executor: opts.Executor}
	backups := &backupHandler{db: db, opts: opts}
	newConsole(db, in, full, act, backups, opts).routes(mux)
	serve("POST /intents/requeue", func(r *http.Request, _ *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		if q(r, "id") == "" {
			return nil, badParam("id is required")
		}
		return act.Requeue(r.Context(), q(r, "id"))
	})
	serve("POST /intents/resolve", func(r *http.Request, _ *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		st, err := sideeffect.ParseState(q(r, "state"))
		if q(r, "id") == "" || err != nil || !st.Final() {
			return nil, badParam("id and state=succeeded|failed are required")
		}
		return act.Resolve(r.Context(), q(r, "id"), st, []byte(q(r, "result")), q(r, "reason"))
	})
	serve("POST /drop", func(r *http.Request, _ *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		return act.DropDamaged(r.Context(), q(r, "kind"), q(r, "entry"))
	})
	serve("POST /outbox/requeue", func(r *http.Request, _ *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		if q(r, "id") == "" {
			return nil, badParam("id is required")
		}
		return act.RequeueEvent(r.Context(), q(r, "id"))
	})
	serve("POST /outbox/requeue-all", func(r *http.Request, _ *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		return act.RequeueAllEvents(r.Context())
	})
	mux.Handle("GET /backup", backups)
	serve("POST /usage/recount", func(r *http.Request, _ *Inspector, admin bool) (any, error) {
		if !admin {
			return nil, errForbidden
		}
		return act.RecountUsage(r.Context())
	})
	return mux, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func errStatus(err error, tokenConfigured bool) int {
	var bp errBadParam
	switch {
	case errors.As(err, &bp), errors.Is(err, sideeffect.ErrInvalidResolution):
		return http.StatusBadRequest
	case errors.Is(err, errForbidden) && tokenConfigured:
		return http.StatusUnauthorized
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrNotFound), errors.Is(err, sideeffect.ErrNotFound), errors.Is(err, kv.ErrNoEntry):
		return http.StatusNotFound
	case errors.Is(err, sideeffect.ErrAlreadyFinal), errors.Is(err, kv.ErrNotDamaged), errors.Is(err, outbox.ErrNotQuarantined):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func limitParam(r *http.Request, def, most int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, badParam("limit %q: want a whole number from 0 to %d", clip(s), most)
	}
	if n == 0 || n > most {
		return most, nil
	}
	return n, nil
}

// clip bounds a parameter echoed in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func hasToken(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// allowed reports whether a request without the token may be served: its
// Host names this machine's loopback (or an allowed host) and, when no token
// is configured at all, the caller is on loopback too.
func allowed(r *http.Request, opts HandlerOptions) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	okHost := isLoopbackName(host) || slices.Contains(opts.AllowedHosts, r.Host) || slices.Contains(opts.AllowedHosts, host)
	if !okHost {
		return false
	}
	if opts.Token != "" {
		return true
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(ip)
	return err == nil && addr.IsLoopback() // unix sockets and tests set no address: refused
}

func isLoopbackName(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// ValidateAddr checks where an admin handler is about to listen: a
// non-loopback address (0.0.0.0, a LAN address, a bare ":8081") is refused
// unless a token is configured, because the handler would then answer the
// whole network.
func ValidateAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("inspect: admin address %q: %w", addr, err)
	}
	if isLoopbackName(host) || token != "" {
		return nil
	}
	return fmt.Errorf("inspect: admin address %q is not loopback: refusing to serve the admin endpoint beyond this machine without a token (use 127.0.0.1:PORT, or set an admin token)", addr)
}

// Client queries a Handler over HTTP.
type Client struct {
	BaseURL string
	HTTP    *http.Client
	// Token is the admin token, sent as a bearer token when set.
	Token string
}

var _ Source = (*Client)(nil)

// fetch calls the admin API's method on path with params and decodes its
// answer into a T, which it returns filled (the decode is done before
// the result is read, whatever the order of a return's operands).
func fetch[T any](ctx context.Context, c *Client, method, path string, params url.Values) (T, error) {
	var out T
	err := c.call(ctx, method, path, params, &out)
	return out, err
}

func (c *Client) call(ctx context.Context, method, path string, params url.Values, v any) error {
	resp, err := c.do(ctx, method, path, params)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// do sends the request and returns the response if it is 200 OK, else
// the handler's error.
func (c *Client) do(ctx context.Context, method, path string, params url.Values) (*http.Response, error) {
	u := c.BaseURL + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e struct{ Error string }
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode == http.StatusNotFound && e.Error != "" {
		return nil, fmt.Errorf("%w (from %s: %s)", ErrNotFound, c.BaseURL, e.Error)
	}
	if e.Error == "" { // not the handler's JSON: a route it lacks (an older oncekv), a proxy's page
		e.Error = clip(strings.TrimSpace(string(body)))
	}
	return nil, fmt.Errorf("inspect: %s answered %s: %s", u, resp.Status, e.Error)
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
	set(p, "key", q.KeyPrefix)
	set(p, "status", q.Status)
	if q.Offset > 0 {
		p.Set("offset", strconv.Itoa(q.Offset))
	}
	if q.Expired {
		p.Set("expired", "1")
	}
	if q.Limit > 0 {
		p.Set("limit", strconv.Itoa(q.Limit))
	}
	return fetch[[]Key](ctx, c, http.MethodGet, "/keys", p)
}

// Get implements Source.
func (c *Client) Get(ctx context.Context, scope, key string, body bool) (Record, error) {
	p := url.Values{"scope": {scope}, "key": {key}}
	if body {
		p.Set("body", "1")
	}
	return fetch[Record](ctx, c, http.MethodGet, "/get", p)
}

// Intents implements Source.
func (c *Client) Intents(ctx context.Context, state string, limit int) ([]Intent, error) {
	p := url.Values{}
	set(p, "state", state)
	if limit > 0 {
		p.Set("limit", strconv.Itoa(limit))
	}
	return fetch[[]Intent](ctx, c, http.MethodGet, "/intents", p)
}

// Outbox implements Source.
func (c *Client) Outbox(ctx context.Context) (Outbox, error) {
	return fetch[Outbox](ctx, c, http.MethodGet, "/outbox", nil)
}

// Inbox implements Source.
func (c *Client) Inbox(ctx context.Context, consumer string, limit int) ([]InboxEntry, error) {
	p := url.Values{}
	set(p, "consumer", consumer)
	if limit > 0 {
		p.Set("limit", strconv.Itoa(limit))
	}
	return fetch[[]InboxEntry](ctx, c, http.MethodGet, "/inbox", p)
}

// Stats implements Source.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	return fetch[Stats](ctx, c, http.MethodGet, "/stats", nil)
}

// Check implements Source.
func (c *Client) Check(ctx context.Context) ([]Problem, error) {
	return fetch[[]Problem](ctx, c, http.MethodGet, "/check", nil)
}

// Backup writes the handler's GET /backup, a copy of the service's
// database file (kv.DB.Backup), to w and returns its length. It needs the
// token, and a c.HTTP whose Timeout leaves time for the whole file (the
// CLI's backup uses none, and ctx). A copy cut short (the connection
// lost, the service stopped) is an error, never a shorter file.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.do(ctx, http.MethodGet, "/backup", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.ContentLength < 0 {
		return 0, fmt.Errorf("inspect: %s/backup answered without a Content-Length: not an oncekv admin endpoint's backup", c.BaseURL)
	}
	n, err := io.Copy(w, resp.Body)
	if err == nil && n != resp.ContentLength {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, fmt.Errorf("inspect: backup from %s: %d of %d bytes: %w", c.BaseURL, n, resp.ContentLength, err)
	}
	return n, nil
}

// Requeue implements Operator.
func (c *Client) Requeue(ctx context.Context, id string) (Intent, error) {
	return fetch[Intent](ctx, c, http.MethodPost, "/intents/requeue", url.Values{"id": {id}})
}

// RequeueEvent implements Operator.
func (c *Client) RequeueEvent(ctx context.Context, id string) (Requeued, error) {
	return fetch[Requeued](ctx, c, http.MethodPost, "/outbox/requeue", url.Values{"id": {id}})
}

// RequeueAllEvents implements Operator.
func (c *Client) RequeueAllEvents(ctx context.Context) (Requeued, error) {
	return fetch[Requeued](ctx, c, http.MethodPost, "/outbox/requeue-all", nil)
}

// Resolve implements Operator.
func (c *Client) Resolve(ctx context.Context, id string, state sideeffect.State, result []byte, reason string) (Intent, error) {
	p := url.Values{"id": {id}, "state": {state.String()}}
	set(p, "result", string(result))
	set(p, "reason", reason)
	return fetch[Intent](ctx, c, http.MethodPost, "/intents/resolve", p)
}

// RecountUsage implements Operator.
func (c *Client) RecountUsage(ctx context.Context) ([]UsageRecount, error) {
	return fetch[[]UsageRecount](ctx, c, http.MethodPost, "/usage/recount", nil)
}

// DropDamaged implements Operator.
func (c *Client) DropDamaged(ctx context.Context, kind, entry string) (Dropped, error) {
	return fetch[Dropped](ctx, c, http.MethodPost, "/drop", url.Values{"kind": {kind}, "entry": {entry}})
}
