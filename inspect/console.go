package inspect

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/sideeffect"
)

//go:embed console
var consoleFiles embed.FS

// ConsolePath is where Handler serves the web console.
const ConsolePath = "/console/"

// consoleCookie carries the admin session of a browser.
const consoleCookie = "oncekv_console"

var consolePages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"seconds": func(s float64) string { return (time.Duration(s * float64(time.Second))).Round(time.Second).String() },
		"held": func(s float64) string {
			return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
		},
		"ago": func(t time.Time) string {
			return time.Since(t).Round(time.Second).String() + " ago"
		},
	}
	pages := map[string]*template.Template{}
	for _, p := range []string{"overview", "keys", "record", "intents", "outbox", "inbox", "login"} {
		pages[p] = template.Must(template.New("").Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", "console/"+p+".html"))
	}
	return pages
}()

// console serves the pages: read-only views for loopback callers (redacted
// unless they hold the admin token), actions for the token's holders.
type console struct {
	db      *kv.DB
	in      *Inspector // redacted
	full    *Inspector // with bodies
	act     *Actions
	backups *backupHandler // the admin handler's: one backup at a time for both
	opts    HandlerOptions
	session string // the admin cookie's value, derived from the token
	csrf    string // the forms' token, derived from the token
}

func newConsole(db *kv.DB, in, full *Inspector, act *Actions, backups *backupHandler, opts HandlerOptions) *console {
	c := &console{db: db, in: in, full: full, act: act, backups: backups, opts: opts}
	if opts.Token != "" {
		c.session = mac(opts.Token, "oncekv console session")
		c.csrf = mac(opts.Token, "oncekv console csrf")
	}
	return c
}

func mac(key, msg string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(msg))
	return hex.EncodeToString(h.Sum(nil))
}

func (c *console) routes(mux *http.ServeMux) {
	static, _ := fs.Sub(consoleFiles, "console")
	mux.Handle("GET "+ConsolePath+"static/console.css", http.StripPrefix(ConsolePath+"static/", http.FileServer(http.FS(static))))
	page := func(pattern, name string, fill func(r *http.Request, v *pageData) error) {
		mux.HandleFunc("GET "+ConsolePath+pattern, func(w http.ResponseWriter, r *http.Request) {
			v, ok := c.begin(w, r, name)
			if !ok {
				return
			}
			if err := fill(r, v); err != nil {
				v.Error = err.Error()
				w.WriteHeader(errStatus(err, c.opts.Token != ""))
			}
			c.render(w, v)
		})
	}
	page("{$}", "overview", c.overview)
	page("keys", "keys", c.keys)
	page("record", "record", c.record)
	page("intents", "intents", c.intents)
	page("outbox", "outbox", c.outboxPage)
	page("inbox", "inbox", c.inbox)
	page("login", "login", func(*http.Request, *pageData) error { return nil })
	mux.HandleFunc("POST "+ConsolePath+"login", c.login)
	mux.HandleFunc("GET "+ConsolePath+"backup", func(w http.ResponseWriter, r *http.Request) {
		if !c.admin(r) {
			http.Error(w, "a backup is the admin token's: log in first", errStatus(errForbidden, c.opts.Token != ""))
			return
		}
		c.backups.serve(w, r)
	})
	mux.HandleFunc("POST "+ConsolePath+"intents/requeue", c.action(true, func(r *http.Request) (string, error) {
		_, err := c.act.Requeue(r.Context(), r.PostFormValue("id"))
		return "intents?flash=requeued", err
	}))
	mux.HandleFunc("POST "+ConsolePath+"intents/resolve", c.action(true, func(r *http.Request) (string, error) {
		st, err := sideeffect.ParseState(r.PostFormValue("state"))
		reason := strings.TrimSpace(r.PostFormValue("reason"))
		if err != nil || !st.Final() || reason == "" {
			return "", badParam("a verdict (succeeded or failed) and a reason are required")
		}
		_, err = c.act.Resolve(r.Context(), r.PostFormValue("id"), st, nil, reason)
		return "intents?flash=resolved", err
	}))
	mux.HandleFunc("POST "+ConsolePath+"outbox/requeue", c.action(true, func(r *http.Request) (string, error) {
		_, err := c.act.RequeueEvent(r.Context(), r.PostFormValue("id"))
		return "outbox?flash=event-requeued", err
	}))
	mux.HandleFunc("POST "+ConsolePath+"outbox/requeue-all", c.action(false, func(r *http.Request) (string, error) {
		_, err := c.act.RequeueAllEvents(r.Context())
		return "outbox?flash=events-requeued", err
	}))
	mux.HandleFunc("POST "+ConsolePath+"keys/drop", c.action(true, func(r *http.Request) (string, error) {
		if r.PostFormValue("confirm") != "1" {
			return "", badParam("confirm that the business state is checked: the key runs again once its record is dropped")
		}
		_, err := c.act.DropDamaged(r.Context(), ledger.RecordKind.Name(), r.PostFormValue("id"))
		return "keys?flash=dropped", err
	}))
	mux.HandleFunc("POST "+ConsolePath+"usage/recount", c.action(false, func(r *http.Request) (string, error) {
		mended, err := c.act.RecountUsage(r.Context())
		if len(mended) == 0 {
			return "?flash=usage-matched", err
		}
		return "?flash=usage-recounted", err
	}))
}

// pageData is what every page's template sees.
type pageData struct {
	Title, Page, Base, DB string
	Now                   time.Time
	Admin, Writable       bool
	HasToken              bool
	CSRF                  string
	Flash, Error          string

	Overview *overviewData
	Keys     *keysData
	Record   *Record
	Intents  *intentsData
	Outbox   *Outbox
	Inbox    *inboxData

	src *Inspector
}

var flashes = map[string]string{
	"requeued":        "Requeued: it is due now, its next attempt asks the provider first.",
	"resolved":        "Resolved: the verdict is applied as if the provider had answered.",
	"event-requeued":  "Requeued: the event is pending again, with a fresh attempt budget, at its place in the queue.",
	"events-requeued": "Requeued every quarantined event that could be read: they are pending again, each with a fresh attempt budget, at their places in the queue.",
	"usage-recounted": "Recounted: the tenants' usage that disagreed with their records is mended.",
	"usage-matched":   "Recounted: every tenant's usage already matched its records; nothing changed.",
	"dropped":         "Dropped: the damaged record is gone, and its key runs again at its next request.",
}

// begin checks who is asking and prepares the page; false when it already
// answered (refused).
func (c *console) begin(w http.ResponseWriter, r *http.Request, name string) (*pageData, bool) {
	admin := c.admin(r)
	if !admin && !allowed(r, c.opts) {
		http.Error(w, "inspect: refused: a loopback Host and caller, or the admin token, is required", http.StatusForbidden)
		return nil, false
	}
	v := &pageData{Title: strings.ToUpper(name[:1]) + name[1:], Page: name, Base: ConsolePath, DB: c.db.Path(), Now: time.Now().UTC(),
		Admin: admin, Writable: admin && !c.db.ReadOnly(), HasToken: c.opts.Token != "", src: c.in}
	if admin {
		v.src, v.CSRF = c.full, c.csrf
	}
	v.Flash = flashes[r.URL.Query().Get("flash")]
	return v, true
}

func (c *console) render(w http.ResponseWriter, v *pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if err := consolePages[v.Page].ExecuteTemplate(w, "layout", v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// admin reports whether r holds the admin token: as a bearer header (a
// script) or as the console's session cookie (a browser after logging in).
func (c *console) admin(r *http.Request) bool {
	if c.opts.Token == "" {
		return false
	}
	if hasToken(r, c.opts.Token) {
		return true
	}
	ck, err := r.Cookie(consoleCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.session)) == 1
}

// sameOrigin refuses a form posted from another site: a browser sends
// Origin (or at least Referer) with a POST, and it must name this host.
func sameOrigin(r *http.Request) bool {
	for _, h := range []string{r.Header.Get("Origin"), r.Header.Get("Referer")} {
		if h == "" {
			continue
		}
		u, err := url.Parse(h)
		return err == nil && u.Host == r.Host
	}
	return true // neither header: not a browser's cross-site form
}

func (c *console) login(w http.ResponseWriter, r *http.Request) {
	v, ok := c.begin(w, r, "login")
	if !ok {
		return
	}
	if c.opts.Token == "" || !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(c.opts.Token)) != 1 {
		v.Error = "That is not the admin token."
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, v)
		return
	}
	// Secure over TLS; the usual console is plain HTTP on loopback, where a
	// Secure cookie would not come back from every client.
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: c.session, Path: ConsolePath, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}) //nolint:gosec // Secure when served over TLS, see above
	http.Redirect(w, r, ConsolePath, http.StatusSeeOther)
}

// action runs a POST form: the admin token (cookie or bearer), the form's
// CSRF token and a same-origin request are all required; the console must
// be writable, and with needsID the form names what it acts on (id). It
// answers with a redirect (post/redirect/get).
func (c *console) action(needsID bool, do func(r *http.Request) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		admin := c.admin(r)
		csrfOK := c.csrf != "" && subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.csrf)) == 1
		switch {
		case !admin:
			http.Error(w, errForbidden.Error(), http.StatusUnauthorized)
			return
		case !csrfOK || !sameOrigin(r):
			http.Error(w, "inspect: refused: the form's CSRF token is missing or wrong, or it was posted from another site", http.StatusForbidden)
			return
		case c.db.ReadOnly():
			http.Error(w, "inspect: this console is read-only (oncekv console --write to act)", http.StatusForbidden)
			return
		case needsID && r.PostFormValue("id") == "":
			http.Error(w, "inspect: id is required", http.StatusBadRequest)
			return
		}
		next, err := do(r)
		if err != nil {
			http.Error(w, err.Error(), errStatus(err, true))
			return
		}
		http.Redirect(w, r, ConsolePath+next, http.StatusSeeOther)
	}
}

type countRow struct {
	Name string
	N    int
}

type lastSweep struct {
	At       time.Time
	Duration time.Duration
	Total    int
}

type overviewData struct {
	Attention int
	Counts    []countRow
	Tenants   []TenantUsage // the largest consoleTenants by records
	More      int           // tenants with records beyond them
	Outbox    Outbox
	Sweep     *lastSweep
	Backend   string
	Format    uint32
	// WriterHeld (seconds) and WriterQueued: Stats' writer figures.
	WriterHeld   float64
	WriterQueued int
	// BackendCounts: Stats' (etcd's own counts in this process).
	BackendCounts []BackendCount
}

func (c *console) overview(r *http.Request, v *pageData) error {
	st, err := v.src.Stats(r.Context())
	if err != nil {
		return err
	}
	ob, err := v.src.Outbox(r.Context())
	if err != nil {
		return err
	}
	o := &overviewData{Attention: st.Counts["intent.needs_attention"], Tenants: st.Tenants, Outbox: ob, Backend: st.Backend, Format: st.FormatVersion,
		WriterHeld: st.WriterHeldSeconds, WriterQueued: st.WriterQueued, BackendCounts: st.BackendCounts}
	// A service of many tenants: the page shows the largest, by records.
	sort.SliceStable(o.Tenants, func(i, j int) bool { return o.Tenants[i].Records > o.Tenants[j].Records })
	if len(o.Tenants) > consoleTenants {
		o.More = len(o.Tenants) - consoleTenants
		o.Tenants = o.Tenants[:consoleTenants]
	}
	for n, k := range st.Counts {
		o.Counts = append(o.Counts, countRow{n, k})
	}
	sort.Slice(o.Counts, func(i, j int) bool { return o.Counts[i].Name < o.Counts[j].Name })
	if last, ok, err := retention.Last(r.Context(), c.db); err == nil && ok {
		ls := &lastSweep{At: last.At, Duration: last.Duration.Round(time.Millisecond)}
		for _, n := range last.Deleted {
			ls.Total += n
		}
		o.Sweep = ls
	}
	v.Overview = o
	return nil
}

type keysData struct {
	Tenant, Scope, Key, Status string
	Rows                       []Key
	From, To                   int
	Prev, Next                 string
}

// keysPage is the console's page size.
const keysPage = 50

func (c *console) keys(r *http.Request, v *pageData) error {
	q := r.URL.Query()
	k := &keysData{Tenant: q.Get("tenant"), Scope: q.Get("scope"), Key: q.Get("key"), Status: q.Get("status"), Rows: []Key{}}
	v.Keys = k
	if k.Status != "" && k.Status != "in_progress" && k.Status != "completed" {
		return badParam("status must be in_progress or completed")
	}
	off, _ := strconv.Atoi(q.Get("offset"))
	off = max(off, 0)
	prefix := k.Scope
	if k.Tenant != "" {
		prefix = k.Tenant + "|"
		if strings.HasPrefix(k.Scope, prefix) {
			prefix = k.Scope
		}
	}
	rows, err := v.src.Keys(r.Context(), KeysQuery{ScopePrefix: prefix, KeyPrefix: k.Key, Status: k.Status, Limit: keysPage + 1, Offset: off})
	if err != nil {
		return err
	}
	more := len(rows) > keysPage
	k.Rows = rows[:min(len(rows), keysPage)]
	k.From, k.To = off+1, off+len(k.Rows)
	if len(k.Rows) == 0 {
		k.From = off
	}
	link := func(o int) string {
		p := url.Values{}
		for name, val := range map[string]string{"tenant": k.Tenant, "scope": k.Scope, "key": k.Key, "status": k.Status} {
			if val != "" {
				p.Set(name, val)
			}
		}
		if o > 0 {
			p.Set("offset", strconv.Itoa(o))
		}
		return ConsolePath + "keys?" + p.Encode()
	}
	if off > 0 {
		k.Prev = link(max(off-keysPage, 0))
	}
	if more {
		k.Next = link(off + keysPage)
	}
	return nil
}

func (c *console) record(r *http.Request, v *pageData) error {
	q := r.URL.Query()
	if q.Get("scope") == "" || q.Get("key") == "" {
		return badParam("scope and key are required")
	}
	rec, err := v.src.Get(r.Context(), q.Get("scope"), q.Get("key"), v.Admin)
	if err != nil {
		return err
	}
	v.Record, v.Title = &rec, rec.Key.Key
	return nil
}

type intentsData struct {
	State  string
	States []string
	Rows   []Intent
	Limit  int // the most rows listed
}

func (c *console) intents(r *http.Request, v *pageData) error {
	st := r.URL.Query().Get("state")
	v.Intents = &intentsData{State: st, States: []string{"", "needs_attention", "unknown", "pending", "succeeded", "failed"}, Rows: []Intent{}, Limit: consoleRows}
	if st != "" {
		if _, err := sideeffect.ParseState(st); err != nil {
			return badParam("state %q: want pending, unknown, succeeded, failed or needs_attention", clip(st))
		}
	}
	rows, err := v.src.Intents(r.Context(), st, consoleRows)
	if err != nil {
		return err
	}
	v.Intents.Rows = rows
	return nil
}

func (c *console) outboxPage(r *http.Request, v *pageData) error {
	ob, err := v.src.Outbox(r.Context())
	v.Outbox = &ob
	return err
}

// consoleRows bounds the rows of the console's intent and inbox pages;
// consoleTenants the tenants on its overview.
const (
	consoleRows    = 200
	consoleTenants = 50
)

type inboxData struct {
	Consumer string
	Rows     []InboxEntry
}

func (c *console) inbox(r *http.Request, v *pageData) error {
	cons := r.URL.Query().Get("consumer")
	rows, err := v.src.Inbox(r.Context(), cons, consoleRows)
	v.Inbox = &inboxData{Consumer: cons, Rows: rows}
	return err
}
