package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

var ctx = context.Background()

const token = "s3cret-admin-token"

// fixture: one completed record and one parked intent whose provider error
// text carries a secret.
func fixture(t *testing.T) (*kv.DB, *sideeffect.Executor, string) {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "i.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	x, id := fixtureOn(t, db)
	return db, x, id
}

// fixtureOn writes fixture's records into db.
func fixtureOn(t *testing.T, db *kv.DB) (*sideeffect.Executor, string) {
	t.Helper()
	l, _ := ledger.New(db, nil)
	var err error
	_, err = l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: "k1", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: 201, Body: []byte("secret body")}, nil
	})
	require.NoError(t, err)
	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: fake}}, MaxAttempts: 1})
	require.NoError(t, err)
	in, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/1", Key: "1", Purpose: "charge", Payload: []byte("card 4242")})
	require.NoError(t, err)
	_, err = x.Execute(ctx, in.ID)
	require.NoError(t, err)
	fake.Script = nil
	return x, in.ID
}

// The admin handler answers the same queries as the file; without the token
// it redacts bodies, payloads and provider error text.
func TestHandlerMatchesFileAndRedacts(t *testing.T) {
	db, x, id := fixture(t)
	file := must(inspect.New(db))
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	for _, tok := range []string{"", token} {
		remote := &inspect.Client{BaseURL: srv.URL, Token: tok}
		want, err := file.Keys(ctx, inspect.KeysQuery{})
		require.NoError(t, err)
		got, err := remote.Keys(ctx, inspect.KeysQuery{})
		require.NoError(t, err)
		require.Equal(t, len(want), len(got))
		require.Equal(t, want[0].Key, got[0].Key)
		require.Equal(t, want[0].ResponseStatus, got[0].ResponseStatus)

		rec, err := remote.Get(ctx, "acme|POST /x", "k1", true)
		require.NoError(t, err)
		intents, err := remote.Intents(ctx, "needs_attention", 0)
		require.NoError(t, err)
		require.Len(t, intents, 1)
		if tok != "" {
			require.Equal(t, "secret body", rec.Body)
			require.Equal(t, "card 4242", intents[0].Payload)
			require.Contains(t, intents[0].LastError, "provider unavailable")
			problems, err := remote.Check(ctx)
			require.NoError(t, err)
			require.Empty(t, problems)
		} else {
			require.Empty(t, rec.Body)
			require.Equal(t, "redacted", rec.BodyEncoding)
			require.Empty(t, intents[0].Payload)
			require.Equal(t, "redacted", intents[0].LastError, "provider text only with the token (issue 13, item 10)")
			_, err := remote.Check(ctx)
			require.ErrorContains(t, err, "401", "a full check needs the token")
		}
		_, err = remote.Get(ctx, "acme|POST /x", "missing", false)
		require.True(t, errors.Is(err, inspect.ErrNotFound), "%v", err)
		st, err := remote.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, st.Counts["idempotency.completed"])
	}

	// Actions need the token; with it, a requeue through the executor.
	anon := &inspect.Client{BaseURL: srv.URL}
	_, err := anon.Requeue(ctx, id)
	require.ErrorContains(t, err, "401")
	admin := &inspect.Client{BaseURL: srv.URL, Token: token}
	got, err := admin.Requeue(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "unknown", got.State)
	_, err = x.RunOnce(ctx)
	require.NoError(t, err)
	done, err := admin.Resolve(ctx, id, sideeffect.StateFailed, nil, "checked")
	require.ErrorContains(t, err, "409", "already succeeded: %+v", done)
}

func get(t *testing.T, srv *httptest.Server, path, host, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 13, item 10: the Host header is checked (DNS rebinding), bad
// parameters answer 400 (not 500), /keys is bounded, and a non-loopback
// listen address needs a token.
func TestHandlerRefusesWhatItMust(t *testing.T) {
	db, _, _ := fixture(t)
	l, _ := ledger.New(db, nil)
	for i := range 1100 {
		_, err := l.Do(ctx, ledger.Request{Scope: "bulk|POST /x", Key: fmt.Sprint("k", i), Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 200}, nil
		})
		require.NoError(t, err)
	}
	open := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{})))
	defer open.Close()
	guarded := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, AllowedHosts: []string{"admin.internal"}})))
	defer guarded.Close()

	code, _ := get(t, open, "/stats", "", "")
	require.Equal(t, 200, code)
	code, body := get(t, open, "/keys", "attacker.example:8081", "")
	require.Equal(t, 403, code, "a rebinding page's Host is refused")
	require.Contains(t, body, "refused")
	code, _ = get(t, open, "/keys", "localhost:8081", "")
	require.Equal(t, 200, code)
	code, _ = get(t, guarded, "/keys", "admin.internal", "")
	require.Equal(t, 200, code)
	code, _ = get(t, guarded, "/keys", "attacker.example", token)
	require.Equal(t, 200, code, "a token holder passes")
	code, _ = get(t, open, "/check", "", "")
	require.Equal(t, 403, code, "no token configured: no full check")

	for _, bad := range []string{"/keys?limit=x", "/keys?limit=-1", "/keys?status=done", "/intents?state=weird", "/inbox?limit=1e9", "/get?scope=a"} {
		code, body := get(t, open, bad, "", "")
		require.Equal(t, 400, code, "%s: %s", bad, body)
		require.NotContains(t, body, "panic")
	}
	countKeys := func(path string) int {
		code, body := get(t, open, path, "", "")
		require.Equal(t, 200, code)
		return strings.Count(body, `"key":`)
	}
	require.Equal(t, inspect.DefaultKeysLimit, countKeys("/keys"))
	require.Equal(t, inspect.MaxKeysLimit, countKeys("/keys?limit=5000"))
	require.Equal(t, 7, countKeys("/keys?limit=7"))

	require.NoError(t, inspect.ValidateAddr("127.0.0.1:8081", ""))
	require.NoError(t, inspect.ValidateAddr("[::1]:8081", ""))
	require.NoError(t, inspect.ValidateAddr("localhost:8081", ""))
	for _, a := range []string{"0.0.0.0:8081", ":8081", "10.0.0.5:8081"} {
		require.ErrorContains(t, inspect.ValidateAddr(a, ""), "not loopback", a)
		require.NoError(t, inspect.ValidateAddr(a, token))
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The admin endpoint's outbox requeues (oncekv outbox requeue --addr):
// the token's only; one event, refused with 409 for an event not in
// quarantine; then every one.
func TestHandlerRequeuesQuarantinedEvents(t *testing.T) {
	db, x, _ := fixture(t)
	ob := outbox.New(db)
	for _, id := range []string{"ev-a", "ev-b", "ev-c"} {
		_, _, err := ob.Add(ctx, outbox.Event{ID: id, Topic: "orders"})
		require.NoError(t, err)
	}
	failing := outbox.PublishFunc(func(context.Context, outbox.Event) error { return errors.New("broker down") })
	st, err := must(outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: failing, MaxAttempts: 1})).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.Quarantined)

	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token, Executor: x})))
	defer srv.Close()
	anon := &inspect.Client{BaseURL: srv.URL}
	_, err = anon.RequeueEvent(ctx, "ev-a")
	require.ErrorContains(t, err, "401")
	_, err = anon.RequeueAllEvents(ctx)
	require.ErrorContains(t, err, "401")

	admin := &inspect.Client{BaseURL: srv.URL, Token: token}
	rq, err := admin.RequeueEvent(ctx, "ev-a")
	require.NoError(t, err)
	require.Equal(t, inspect.Requeued{Events: 1}, rq)
	_, err = admin.RequeueEvent(ctx, "ev-a")
	require.ErrorContains(t, err, "409", "pending now, not quarantined")
	_, err = admin.RequeueEvent(ctx, "no-such-event")
	require.ErrorContains(t, err, "409")
	rq, err = admin.RequeueAllEvents(ctx)
	require.NoError(t, err)
	require.Equal(t, inspect.Requeued{Events: 2}, rq)
	l, err := ob.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, l.Pending)
	require.Zero(t, l.Quarantined)
}
