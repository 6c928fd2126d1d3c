package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
)

func page(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, origin string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The console's pages render from the database, redacted without the
// token; its actions need the token (logged in), the form's CSRF token and
// the same origin; GET changes nothing.
func TestConsolePagesAndActions(t *testing.T) {
	db, x, id := fixture(t)
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	base := srv.URL + inspect.ConsolePath
	anon := &http.Client{}

	code, body := page(t, anon, base)
	require.Equal(t, 200, code)
	require.Contains(t, body, `data-count="intent.needs_attention">1<`)
	require.Contains(t, body, `id="attention">1<`)
	require.Contains(t, body, "read-only, redacted")
	code, body = page(t, anon, base+"record?scope="+url.QueryEscape("acme|POST /x")+"&key=k1")
	require.Equal(t, 200, code)
	require.NotContains(t, body, "secret body")
	require.Contains(t, body, "redacted")
	code, body = page(t, anon, base+"intents?state=needs_attention")
	require.Equal(t, 200, code)
	require.Contains(t, body, "order/1")
	require.NotContains(t, body, `name="csrf"`, "no forms without the token")
	code, _ = page(t, anon, base+"keys?status=bogus")
	require.Equal(t, 400, code)
	code, body = page(t, anon, base+"keys?tenant=acme")
	require.Equal(t, 200, code)
	require.Contains(t, body, ">k1<")

	// Refused without the token, whatever the form says.
	code, _ = post(t, anon, base+"intents/requeue", url.Values{"id": {id}}, "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(t, anon, base+"login", url.Values{"token": {"wrong"}}, srv.URL)
	require.Equal(t, http.StatusUnauthorized, code)

	jar, _ := cookiejar.New(nil)
	admin := &http.Client{Jar: jar}
	code, body = post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
	require.Equal(t, 200, code, "redirected to the overview")
	require.Contains(t, body, "admin · actions on")
	_, body = page(t, admin, base+"record?scope="+url.QueryEscape("acme|POST /x")+"&key=k1")
	require.Contains(t, body, "secret body")
	_, body = page(t, admin, base+"intents?state=needs_attention")
	csrf := between(body, `name="csrf" value="`, `"`)
	require.NotEmpty(t, csrf)

	// The session alone is not enough: the CSRF token, and this origin.
	code, _ = post(t, admin, base+"intents/requeue", url.Values{"id": {id}}, srv.URL)
	require.Equal(t, http.StatusForbidden, code)
	code, _ = post(t, admin, base+"intents/requeue", url.Values{"id": {id}, "csrf": {csrf}}, "https://evil.example")
	require.Equal(t, http.StatusForbidden, code)
	in, err := x.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateNeedsAttention, in.State, "nothing happened")

	code, body = post(t, admin, base+"intents/requeue", url.Values{"id": {id}, "csrf": {csrf}}, srv.URL)
	require.Equal(t, 200, code)
	require.Contains(t, body, "Requeued")
	in, err = x.Get(ctx, id)
	require.NoError(t, err)
	require.NotEqual(t, sideeffect.StateNeedsAttention, in.State)

	// Resolve needs a reason.
	code, _ = post(t, admin, base+"intents/resolve", url.Values{"id": {id}, "csrf": {csrf}, "state": {"succeeded"}}, srv.URL)
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = post(t, admin, base+"intents/resolve", url.Values{"id": {id}, "csrf": {csrf}, "state": {"succeeded"}, "reason": {"seen in the provider's dashboard"}}, srv.URL)
	require.Equal(t, 200, code)
	in, err = x.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, in.State)

	// GET never acts.
	code, _ = page(t, admin, base+"intents/requeue?id="+id)
	require.Equal(t, http.StatusMethodNotAllowed, code)
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}

// The console's keys page lists a tenant's records fifty at a time: the
// first page links to the next only, the last to the previous only (both
// keeping the filter), a page past the end is empty, and another tenant's
// records never show.
func TestConsoleKeysPages(t *testing.T) {
	t.Parallel()
	db, l := openLedger(t, nil)
	for i := range 65 {
		tenant := "acme"
		if i >= 60 {
			tenant = "globex"
		}
		_, err := l.Do(ctx, ledger.Request{Scope: tenant + "|POST /x", Key: fmt.Sprintf("k-%02d", i), Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
		require.NoError(t, err)
	}
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token})))
	t.Cleanup(srv.Close)
	c := &http.Client{}
	href := regexp.MustCompile(`href="([^"]*)" rel="(prev|next)"`)
	links := func(body string) map[string]string {
		out := map[string]string{}
		for _, m := range href.FindAllStringSubmatch(body, -1) {
			out[m[2]] = html.UnescapeString(m[1])
		}
		return out
	}

	code, body := page(t, c, srv.URL+inspect.ConsolePath+"keys?tenant=acme")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "keys 1–50")
	require.NotContains(t, body, "globex|")
	require.Equal(t, map[string]string{"next": inspect.ConsolePath + "keys?offset=50&tenant=acme"}, links(body))

	code, body = page(t, c, srv.URL+links(body)["next"])
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "keys 51–60")
	require.Equal(t, map[string]string{"prev": inspect.ConsolePath + "keys?tenant=acme"}, links(body))

	_, body = page(t, c, srv.URL+inspect.ConsolePath+"keys?tenant=acme&offset=10")
	require.Contains(t, body, "keys 11–60")
	require.Equal(t, map[string]string{"prev": inspect.ConsolePath + "keys?tenant=acme"}, links(body), "a full last page has no next")

	_, body = page(t, c, srv.URL+inspect.ConsolePath+"keys?tenant=acme&offset=60")
	require.Contains(t, body, "keys 60–60")
	require.Equal(t, map[string]string{"prev": inspect.ConsolePath + "keys?offset=10&tenant=acme"}, links(body))

	_, body = page(t, c, srv.URL+inspect.ConsolePath+"keys?tenant=globex")
	require.Contains(t, body, "keys 1–5")
	require.NotContains(t, body, "acme|")
	require.Empty(t, links(body))
}

// The inbox page lists processed message IDs, for the consumer asked for;
// the outbox page shows what is pending and what is quarantined, and a
// logged-in operator requeues a quarantined event from it (CSRF token and
// same origin required, as for intents). The admin endpoint's inbox
// listing is the file's.
func TestConsoleInboxAndOutbox(t *testing.T) {
	db, x, _ := fixture(t)
	in := must(inbox.New(db, nil))
	for _, m := range [][2]string{{"billing", "msg-1"}, {"shipping", "msg-2"}} {
		_, err := in.Handle(ctx, m[0], m[1], func(kv.Tx) error { return nil })
		require.NoError(t, err)
	}
	ob := outbox.New(db)
	add := func(id string) {
		_, _, err := ob.Add(ctx, outbox.Event{ID: id, Topic: "orders", Payload: []byte("{}")})
		require.NoError(t, err)
	}
	add("ev-q")
	failing := outbox.PublishFunc(func(context.Context, outbox.Event) error { return errors.New("broker down") })
	r := must(outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: failing, MaxAttempts: 1}))
	st, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Quarantined)
	add("ev-p") // pending

	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	base := srv.URL + inspect.ConsolePath
	anon := &http.Client{}

	code, body := page(t, anon, base+"inbox?consumer=billing")
	require.Equal(t, 200, code)
	require.Contains(t, body, ">msg-1<")
	require.NotContains(t, body, "msg-2", "another consumer's")
	_, body = page(t, anon, base+"inbox")
	require.Contains(t, body, ">msg-1<")
	require.Contains(t, body, ">msg-2<")
	file := must(inspect.New(db))
	want, err := file.Inbox(ctx, "billing", 10)
	require.NoError(t, err)
	require.Len(t, want, 1)
	got, err := (&inspect.Client{BaseURL: srv.URL}).Inbox(ctx, "billing", 10)
	require.NoError(t, err)
	require.Equal(t, want[0].MessageID, got[0].MessageID)
	require.Len(t, got, 1)

	code, body = page(t, anon, base+"outbox")
	require.Equal(t, 200, code)
	require.Contains(t, body, `id="quarantined">1<`)
	require.Contains(t, body, `data-id="ev-q"`)
	require.Contains(t, body, ">ev-p<", "pending")
	require.NotContains(t, body, `name="csrf"`, "no forms without the token")

	jar, _ := cookiejar.New(nil)
	admin := &http.Client{Jar: jar}
	code, _ = post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
	require.Equal(t, 200, code)
	_, body = page(t, admin, base+"outbox")
	csrf := between(body, `name="csrf" value="`, `"`)
	require.NotEmpty(t, csrf)
	code, _ = post(t, admin, base+"outbox/requeue", url.Values{"id": {"ev-q"}}, srv.URL)
	require.Equal(t, http.StatusForbidden, code, "the session alone is not enough")
	code, body = post(t, admin, base+"outbox/requeue", url.Values{"id": {"ev-q"}, "csrf": {csrf}}, srv.URL)
	require.Equal(t, 200, code)
	require.Contains(t, body, "the event is pending again")
	require.NotContains(t, body, "provider", "an event has no provider")
	sum, err := file.Outbox(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, sum.Quarantined)
	require.Equal(t, 2, sum.Pending)
}

// After an outage that quarantined more events than the page lists: the
// page lists the first MaxListedQuarantined and says so, and "Requeue
// all" (the token's, with the CSRF token) moves every one back to the
// queue.
func TestConsoleRequeuesEveryQuarantinedEvent(t *testing.T) {
	db, x, _ := fixture(t)
	ob := outbox.New(db)
	n := inspect.MaxListedQuarantined + 50
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range n {
			if _, _, err := ob.AddTx(tx, outbox.Event{ID: fmt.Sprintf("ev-%04d", i), Topic: "orders", Payload: []byte("{}")}); err != nil {
				return err
			}
		}
		return nil
	}))
	failing := outbox.PublishFunc(func(context.Context, outbox.Event) error { return errors.New("broker down") })
	st, err := must(outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: failing, MaxAttempts: 1})).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Quarantined)

	file := must(inspect.New(db))
	sum, err := file.Outbox(ctx)
	require.NoError(t, err)
	require.Equal(t, n, sum.Quarantined)
	require.Len(t, sum.QuarantinedEvents, inspect.MaxListedQuarantined)
	require.Equal(t, "ev-0000", sum.QuarantinedEvents[0].ID, "the first, in sequence order")

	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	base := srv.URL + inspect.ConsolePath
	code, body := page(t, &http.Client{}, base+"outbox")
	require.Equal(t, 200, code)
	require.Contains(t, body, fmt.Sprintf("The first %d of %d", inspect.MaxListedQuarantined, n))
	require.Equal(t, inspect.MaxListedQuarantined, strings.Count(body, `<tr data-id="ev-`))
	require.NotContains(t, body, `id="requeue-all"`, "no action without the token")

	jar, _ := cookiejar.New(nil)
	admin := &http.Client{Jar: jar}
	code, _ = post(t, admin, base+"login", url.Values{"token": {token}}, srv.URL)
	require.Equal(t, 200, code)
	_, body = page(t, admin, base+"outbox")
	require.Contains(t, body, fmt.Sprintf("Requeue all %d", n))
	csrf := between(body, `name="csrf" value="`, `"`)
	code, _ = post(t, admin, base+"outbox/requeue-all", nil, srv.URL)
	require.Equal(t, http.StatusForbidden, code, "the session alone is not enough")
	sum, err = file.Outbox(ctx)
	require.NoError(t, err)
	require.Equal(t, n, sum.Quarantined, "nothing moved by a refused request")
	code, body = post(t, admin, base+"outbox/requeue-all", url.Values{"csrf": {csrf}}, srv.URL)
	require.Equal(t, 200, code)
	require.Contains(t, body, "Requeued every quarantined event")
	sum, err = file.Outbox(ctx)
	require.NoError(t, err)
	require.Zero(t, sum.Quarantined)
	require.Equal(t, n, sum.Pending)
}

// A service keeps every intent it made for its retention: the listings
// are bounded. The file's Intents takes a limit (0: all); the endpoint
// lists 100 unless asked, 1000 at most; the console's page 200, and says
// so.
func TestIntentListingsAreBounded(t *testing.T) {
	db, x, _ := fixture(t)
	const n = 250
	for i := range n {
		_, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: fmt.Sprintf("order/%d", i), Key: fmt.Sprintf("b%d", i), Purpose: "charge"})
		require.NoError(t, err)
	}
	file := must(inspect.New(db))
	all, err := file.Intents(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, all, n+1, "the fixture's parked intent too")
	some, err := file.Intents(ctx, "pending", 7)
	require.NoError(t, err)
	require.Len(t, some, 7)

	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	remote := &inspect.Client{BaseURL: srv.URL}
	got, err := remote.Intents(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, got, inspect.DefaultKeysLimit)
	got, err = remote.Intents(ctx, "pending", 5000)
	require.NoError(t, err)
	require.Len(t, got, n, "under the largest limit")
	got, err = remote.Intents(ctx, "needs_attention", 0)
	require.NoError(t, err)
	require.Len(t, got, 1)

	code, body := page(t, &http.Client{}, srv.URL+inspect.ConsolePath+"intents")
	require.Equal(t, 200, code)
	require.Equal(t, 200, strings.Count(body, `<tr data-id="`))
	require.Contains(t, body, `id="listed">The first 200`)
	_, body = page(t, &http.Client{}, srv.URL+inspect.ConsolePath+"intents?state=needs_attention")
	require.NotContains(t, body, `id="listed"`)
}

// The overview shows the tenants with the most records, fifty of them,
// and how many more there are: a service of thousands of tenants made it
// a page of thousands of rows.
func TestOverviewShowsTheLargestTenants(t *testing.T) {
	db, x, _ := fixture(t)
	l := must(ledger.New(db, nil))
	const tenants = 60
	for i := range tenants {
		for k := range 1 + i%3 {
			_, err := l.Do(ctx, ledger.Request{Scope: fmt.Sprintf("t%02d|POST /x", i), Key: fmt.Sprint("k", k), Fingerprint: ledger.Fingerprint{1}},
				func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
			require.NoError(t, err)
		}
	}
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	code, body := page(t, &http.Client{}, srv.URL+inspect.ConsolePath)
	require.Equal(t, 200, code)
	table := between(body, `<table id="tenants">`, `</table>`)
	require.Equal(t, 50, strings.Count(table, "<tr><td><a "))
	require.Contains(t, body, "; 11 more (", "60 tenants and the fixture's acme, 50 shown")
	for i := 2; i < tenants; i += 3 { // the twenty tenants with three records each
		require.Contains(t, table, fmt.Sprintf(">t%02d<", i))
	}
	st, err := must(inspect.New(db)).Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st.Tenants, tenants+1, "Stats keeps every tenant")
}
