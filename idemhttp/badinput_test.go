package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

// raw sends a request as bytes over TCP, for inputs Go's client refuses to
// send (NUL bytes, raw non-ASCII, thousands of headers), and returns the
// status code and body.
func raw(t *testing.T, base, req string) (int, string) {
	t.Helper()
	u, _ := url.Parse(base)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The server may answer (413, 431) and close before the request is all
	// written; the answer is what matters.
	_, _ = io.WriteString(conn, req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func rawPost(key, auth, body string, extra ...string) string {
	var b strings.Builder
	b.WriteString("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n")
	if auth != "" {
		b.WriteString("Authorization: Bearer " + auth + "\r\n")
	}
	if key != "\x01none" {
		b.WriteString("Idempotency-Key: " + key + "\r\n")
	}
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.String()
}

// rawChunked is rawPost with a chunked body, given as it goes on the wire.
func rawChunked(key, wire string) string {
	return "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n" +
		"Authorization: Bearer sk_acme\r\nIdempotency-Key: " + key + "\r\nTransfer-Encoding: chunked\r\n\r\n" + wire
}

// chunked encodes body as chunks of at most n bytes and the last chunk.
func chunked(body string, n int) string {
	var b strings.Builder
	for len(body) > 0 {
		c := body[:min(n, len(body))]
		fmt.Fprintf(&b, "%x\r\n%s\r\n", len(c), c)
		body = body[len(c):]
	}
	b.WriteString("0\r\n\r\n")
	return b.String()
}

// TestBadInputs sends every kind of malformed request the middleware must
// survive: each gets a clear answer (a problem with a stable type, or
// net/http's own refusal), nothing partial is written, and the database
// passes its checks afterwards.
func TestBadInputs(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *idemhttp.Config) { c.MaxBodyBytes = 4096 })
	at := func(n int) string { // a JSON body of exactly n bytes
		pad := n - len(`{"amount_cents":1,"pad":""}`)
		return `{"amount_cents":1,"pad":"` + strings.Repeat("x", pad) + `"}`
	}
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	cases := []struct {
		name   string
		req    string
		status int
		typ    string // problem type, "" when net/http answers or the request succeeds
	}{
		{"no key", rawPost("\x01none", "sk_acme", order), 400, idemhttp.ProblemKeyMissing},
		{"empty key", rawPost("", "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"1-byte key", rawPost("k", "sk_acme", order), 201, ""},
		{"255-byte key", rawPost(strings.Repeat("a", 255), "sk_acme", order), 201, ""},
		{"256-byte key", rawPost(strings.Repeat("b", 256), "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"32768-byte key", rawPost(strings.Repeat("c", 32768), "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"70000-byte key", rawPost(strings.Repeat("d", 70000), "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"key with a space", rawPost("a b", "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"key with a tab", rawPost("a\tb", "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"key with DEL (net/http refuses it)", rawPost("a\x7fb", "sk_acme", order), 400, ""},
		{"key with UTF-8", rawPost("ключ", "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"key with Latin-1", rawPost("caf\xe9", "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"key with NUL", rawPost("a\x00b", "sk_acme", order), 400, ""},
		{"quoted key", rawPost(`"quoted-ok"`, "sk_acme", order), 201, ""},
		{"quoted with escapes", rawPost(`"a\"b"`, "sk_acme", order), 201, ""},
		{"unterminated quote", rawPost(`"abc`, "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"text after quote", rawPost(`"abc"x`, "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"bad escape", rawPost(`"a\nb"`, "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"escape at the end", rawPost(`"a\`, "sk_acme", order), 400, idemhttp.ProblemKeyInvalid},
		{"two keys", rawPost("a", "sk_acme", order, "Idempotency-Key: b"), 400, idemhttp.ProblemKeyInvalid},
		{"no auth", rawPost("k-auth", "", order), 401, idemhttp.ProblemUnauthenticated},
		{"unknown API key", rawPost("k-auth", "sk_forged", order), 401, idemhttp.ProblemUnauthenticated},
		{"forged tenant header", rawPost("k-forge", "sk_acme", order, "X-Tenant: globex", "X-Forwarded-User: globex"), 201, ""},
		{"truncated JSON", rawPost("j1", "sk_acme", `{"amount_cents":`), 400, idemhttp.ProblemInvalidBody},
		{"trailing comma", rawPost("j2", "sk_acme", `{"a":1,}`), 400, idemhttp.ProblemInvalidBody},
		{"two values", rawPost("j3", "sk_acme", `{} {}`), 400, idemhttp.ProblemInvalidBody},
		{"invalid UTF-8 in JSON", rawPost("j4", "sk_acme", "{\"a\":\"\xff\"}"), 400, idemhttp.ProblemInvalidBody},
		{"control char in JSON string", rawPost("j5", "sk_acme", "{\"a\":\"\x01\"}"), 400, idemhttp.ProblemInvalidBody},
		{"bad number", rawPost("j6", "sk_acme", `{"a":01}`), 400, idemhttp.ProblemInvalidBody},
		{"bad literal", rawPost("j7", "sk_acme", `{"a":tru}`), 400, idemhttp.ProblemInvalidBody},
		{"nested 64 deep", rawPost("j8", "sk_acme", deep(63)), 201, ""},
		{"nested 65 deep", rawPost("j9", "sk_acme", deep(65)), 400, idemhttp.ProblemInvalidBody},
		{"nested 100000 deep", rawPost("j10", "sk_acme", strings.Repeat("[", 100000)), 413, idemhttp.ProblemBodyTooLarge},
		{"body at the limit", rawPost("size-1", "sk_acme", at(4096)), 201, ""},
		{"body one over the limit", rawPost("size-2", "sk_acme", at(4097)), 413, idemhttp.ProblemBodyTooLarge},
		{"body of 10 MiB", rawPost("size-3", "sk_acme", strings.Repeat("x", 10<<20)), 413, idemhttp.ProblemBodyTooLarge},
		{"empty JSON body", rawPost("empty", "sk_acme", ""), 400, ""}, // the handler's own 400: stored
		{"3000 headers of 400 bytes", rawPost("hdrs", "sk_acme", order, manyHeaders(3000, 400)...), 431, ""},
		{"200 small headers", rawPost("hdrs-ok", "sk_acme", order, manyHeaders(200, 20)...), 201, ""},
		{"chunked body", rawChunked("ch-1", chunked(order, 7)), 201, ""},
		{"chunked body over the limit", rawChunked("ch-2", chunked(at(4097), 1000)), 413, idemhttp.ProblemBodyTooLarge},
		{"chunk size not hex", rawChunked("ch-3", "zz\r\n{}\r\n0\r\n\r\n"), 400, idemhttp.ProblemInvalidBody},
		{"chunk longer than its size", rawChunked("ch-4", "2\r\n{}}\r\n0\r\n\r\n"), 400, idemhttp.ProblemInvalidBody},
		{"reused key, other body", rawPost("k", "sk_acme", strings.Replace(order, "2500", "1", 1)), 422, idemhttp.ProblemKeyReused},
		{"GET with a key", "GET /v1/orders/1 HTTP/1.1\r\nHost: x\r\nIdempotency-Key: \x01\r\nConnection: close\r\n\r\n", 400, ""},
		{"GET without a key", "GET /v1/orders/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, ""},
	}
	for _, c := range cases {
		status, body := raw(t, b.srv.URL, c.req)
		require.Equal(t, c.status, status, "%s: %s", c.name, body)
		if c.typ != "" {
			require.Contains(t, body, `"type":"`+c.typ+`"`, c.name)
		}
	}
	require.GreaterOrEqual(t, len(cases), 40)
	// Only the accepted requests wrote orders; the database is consistent.
	require.Equal(t, int(b.runs.Load()), b.orderCount(t))
	kvtest.MustCheck(t, b.db, ledger.RecordKind, sideeffect.RecordKind)
}

func manyHeaders(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("X-Pad-%d: %s", i, strings.Repeat("a", size))
	}
	return out
}

// Wrapped without a ServeMux pattern (another router, or a whole mux), the
// middleware scopes a key by the URL path, which the client writes. A path
// that cannot be part of a scope (a NUL byte, a kilobyte of path) is the
// client's bad request, answered 400 before the handler runs, with nothing
// stored and nothing logged as the service's error. A tenant that cannot be
// part of one is the service's own fault: 500, logged.
func TestPathThatCannotScopeAKeyIsABadRequest(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	logger, logs := testlog.New()
	var runs atomic.Int32
	mw, err := idemhttp.New(&idemhttp.Config{
		Ledger: l,
		// A service's bug, for the last case: a tenant the scope cannot hold.
		Tenant: func(r *http.Request) (string, error) { return "acme" + r.Header.Get("X-Tenant-Suffix"), nil },
		Logger: logger,
	})
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		countRun(&runs)
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	post := func(base, path string, header ...string) (int, string) {
		req := "POST " + path + " HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\nContent-Length: 0\r\nConnection: close\r\n"
		for _, h := range header {
			req += h + "\r\n"
		}
		return raw(t, base, req+"\r\n")
	}
	long := "/" + strings.Repeat("a", ledger.MaxScopeLen)
	for _, c := range []struct{ path, detail string }{
		{"/v1/orders%00x", `"detail":"the path contains a NUL byte (%00)"`},
		{"/v1/%00", `"detail":"the path contains a NUL byte (%00)"`},
		{long, fmt.Sprintf(`"detail":"the path is %d bytes; the scope it is part of holds at most %d with the tenant and method"`, len(long), ledger.MaxScopeLen)},
	} {
		status, body := post(srv.URL, c.path)
		require.Equal(t, http.StatusBadRequest, status, "%.40s: %s", c.path, body)
		require.Contains(t, body, `"type":"`+idemhttp.ProblemPathInvalid+`"`)
		require.Contains(t, body, c.detail)
	}
	require.Zero(t, runs.Load(), "the handler did not run")
	require.NotContains(t, logs.String(), "level=ERROR", "a client's bad path is not the service's error")
	require.Contains(t, logs.String(), "outcome=rejected scope=\"\" key=\"\" status=400")

	// The longest path that fits is served: "acme|POST " is 10 bytes.
	fits := "/" + strings.Repeat("b", ledger.MaxScopeLen-len("acme|POST /"))
	status, body := post(srv.URL, fits)
	require.Equal(t, http.StatusCreated, status, body)
	status, _ = post(srv.URL, "/v1/%0a") // a decoded newline is a byte like any other
	require.Equal(t, http.StatusCreated, status)
	require.EqualValues(t, 2, runs.Load())

	status, body = post(srv.URL, "/v1/orders", "X-Tenant-Suffix: |globex")
	require.Equal(t, http.StatusInternalServerError, status, body)
	require.Contains(t, body, `"type":"`+idemhttp.ProblemInternal+`"`)
	require.Contains(t, logs.String(), `level=ERROR msg="idempotency scope"`, "the service's bad tenant is logged as its error")
	require.EqualValues(t, 2, runs.Load())

	// A route named by Config.Route is the service's: one that cannot be
	// part of a scope is its error, not the client's.
	named, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil },
		Route: func(r *http.Request) string { return "orders " + r.URL.Path }})
	require.NoError(t, err)
	srv2 := httptest.NewServer(named.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })))
	t.Cleanup(srv2.Close)
	status, body = post(srv2.URL, "/v1/%00")
	require.Equal(t, http.StatusInternalServerError, status, body)
	status, _ = post(srv2.URL, "/v1/named")
	require.Equal(t, http.StatusAccepted, status)

	var scopes []string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		scopes = nil
		for rec, err := range l.Records(tx, ledger.ListOptions{}) {
			if err != nil {
				return err
			}
			scopes = append(scopes, rec.Scope)
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"acme|POST " + fits, "acme|POST /v1/\n", "acme|POST orders /v1/named"}, scopes, "only the served requests were stored, under their routes")
}
