package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// fuzzServer serves two endpoints through the middleware on a loopback
// server: POST /v1/orders and POST /v1/orders/{id}/refunds. Each request
// names its tenant in X-Run, so every fuzz input starts with no records.
// The handler stores the body and answers with a run number, so a replay
// (the same number) and an execution (a new one) are told apart.
type fuzzServer struct {
	db     *kv.DB
	srv    *httptest.Server
	client *http.Client
	seq    atomic.Int64
	mu     sync.Mutex
	runs   map[string]int // executions per tenant
}

const fuzzMaxBody = 2048

func newFuzzServer(tb testing.TB) *fuzzServer {
	s := &fuzzServer{runs: map[string]int{}}
	s.db = kvtest.Open(tb, &kv.Options{NoSync: true}, ledger.RecordKind)
	l, err := ledger.New(s.db, nil)
	if err != nil {
		tb.Fatal(err)
	}
	mw, err := idemhttp.New(&idemhttp.Config{
		Ledger:       l,
		Tenant:       func(r *http.Request) (string, error) { return r.Header.Get("X-Run"), nil },
		MaxBodyBytes: fuzzMaxBody,
	})
	if err != nil {
		tb.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		body, _ := io.ReadAll(r.Body)
		b, err := tx.CreateBucketIfNotExists([]byte("fuzz"))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		n := s.seq.Add(1)
		if err := b.Put(fmt.Appendf(nil, "%016d", n), body); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		tenant := r.Header.Get("X-Run")
		tx.OnCommit(func() {
			s.mu.Lock()
			s.runs[tenant]++
			s.mu.Unlock()
		})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d,"target":%q,"bytes":%d}`, n, r.URL.RequestURI(), len(body))
	})
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", mw.Wrap(h))
	mux.Handle("POST /v1/orders/{id}/refunds", mw.Wrap(h))
	s.srv = httptest.NewServer(mux)
	s.client = s.srv.Client()
	tb.Cleanup(s.srv.Close)
	return s
}

func (s *fuzzServer) ran(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[tenant]
}

// fuzzReq is one request of an input.
type fuzzReq struct {
	refund      bool // the refunds endpoint (another scope)
	id, query   string
	contentType string
	body        []byte
}

var fuzzContentTypes = []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json", "text/plain", ""}

func (q fuzzReq) target() string {
	t := "/v1/orders"
	if q.refund {
		// ServeMux redirects or does not route these (they never reach
		// the middleware): "", "." and "..", and a slash, even escaped.
		id := strings.ReplaceAll(q.id, "/", "_")
		if id == "" || id == "." || id == ".." {
			id = "x"
		}
		t += "/" + url.PathEscape(id) + "/refunds"
	}
	if q.query != "" {
		t += "?" + url.Values{"q": {q.query}}.Encode()
	}
	return t
}

func (q fuzzReq) json() bool {
	mt, _, err := mime.ParseMediaType(q.contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

type fuzzReply struct {
	status   int
	body     string
	replayed bool
}

// send posts q; ok is false when Go's client refuses to send the key.
func (s *fuzzServer) send(t *testing.T, tenant, key string, q fuzzReq) (fuzzReply, bool) {
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+q.target(), bytes.NewReader(q.body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Run", tenant)
	req.Header.Set(idemhttp.HeaderKey, key)
	if q.contentType != "" {
		req.Header.Set("Content-Type", q.contentType)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if strings.Contains(err.Error(), "invalid header field value") {
			return fuzzReply{}, false
		}
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fuzzReply{resp.StatusCode, string(body), resp.Header.Get(idemhttp.HeaderReplayed) == "true"}, true
}

// sameRequest is the test's own idea of "the same request": the same
// endpoint and concrete target, the same kind of body, and JSON bodies
// that decode to equal values with numbers kept as written, other bodies
// byte for byte. A blank body (empty or whitespace) holds no JSON value:
// its Content-Type says nothing, and it is compared byte for byte.
func sameRequest(a, b fuzzReq) bool {
	ua, _ := url.ParseRequestURI(a.target())
	ub, _ := url.ParseRequestURI(b.target())
	if a.refund != b.refund || ua.RequestURI() != ub.RequestURI() {
		return false
	}
	if blank(a.body) || blank(b.body) {
		return bytes.Equal(a.body, b.body)
	}
	if a.json() != b.json() {
		return false
	}
	if !a.json() || bytes.Equal(a.body, b.body) { // bytes, or JSON written the same
		return bytes.Equal(a.body, b.body)
	}
	va, oka := decodeJSON(a.body)
	vb, okb := decodeJSON(b.body)
	return oka && okb && reflect.DeepEqual(va, vb)
}

// blank reports a body of nothing but JSON whitespace.
func blank(p []byte) bool { return len(bytes.Trim(p, " \t\r\n")) == 0 }

// decodeJSON decodes a body that is one JSON value, numbers as written.
func decodeJSON(p []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(p))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil, false
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, false // more after the value
	}
	return v, true
}

// reserialise returns a JSON body's value written again with other
// spacing and member order (encoding/json sorts them), or body itself.
func reserialise(body []byte) []byte {
	v, ok := decodeJSON(body)
	if !ok {
		return body
	}
	out, err := json.MarshalIndent(v, " ", "\t")
	if err != nil {
		return body
	}
	return out
}

// problemOf is the type of the problem in body ("" if it is none).
func problemOf(body string) string {
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(body), &p)
	return p.Type
}

// FuzzMiddlewareNeverReplaysAnotherRequest sends, under a fresh tenant, a
// request A, A again, and a request B with the same key (B is A, A with
// its JSON body re-serialised, or anything else), and checks what a client
// relies on:
//
//   - nothing answers 5xx, and a refused request (400, 413) runs nothing;
//   - A's retry replays A's answer byte for byte, without running again;
//   - B, on the same endpoint, replays A's answer only when it is the
//     same request (same target, equal JSON or equal bytes), and is
//     refused as a reused key (422) otherwise;
//   - B on the other endpoint is its own request: it never gets A's
//     answer, nor a refusal because of A.
func FuzzMiddlewareNeverReplaysAnotherRequest(f *testing.F) {
	f.Add("k1", false, "", "", uint8(0), []byte(`{"amount_cents":2500,"currency":"eur"}`), uint8(0), false, "", "", uint8(0), []byte(``))
	f.Add("k2", false, "", "", uint8(0), []byte(`{"a":1,"b":[1,2,{"c":"d"}]}`), uint8(1), false, "", "", uint8(1), []byte(``))
	f.Add("k3", true, "ord_1", "", uint8(0), []byte(`{"amount_cents":1}`), uint8(2), true, "ord_2", "", uint8(0), []byte(`{"amount_cents":1}`))
	f.Add("k4", false, "", "a=b", uint8(3), []byte("plain text"), uint8(2), false, "", "a=c", uint8(3), []byte("plain text"))
	f.Add("k5", false, "", "", uint8(0), []byte(`{"a":1}`), uint8(2), true, "", "", uint8(0), []byte(`{"a":1}`))
	f.Add("k6", false, "", "", uint8(0), []byte(`{"a":2500}`), uint8(2), false, "", "", uint8(0), []byte(`{"a":2500.0}`))
	f.Add("k7", false, "", "", uint8(0), []byte(`{"a":1,"A":2}`), uint8(2), false, "", "", uint8(0), []byte(`{"A":2,"a":1}`))
	f.Add(`"quoted"`, false, "", "", uint8(4), []byte(`{"a":"\u00e9"}`), uint8(2), false, "", "", uint8(4), []byte(`{"a":"é"}`))
	f.Add("k9", false, "", "", uint8(0), []byte(strings.Repeat("x", fuzzMaxBody+1)), uint8(0), false, "", "", uint8(0), []byte(``))
	s := newFuzzServer(f)
	var execs atomic.Int64
	f.Fuzz(func(t *testing.T, key string, refundA bool, idA, queryA string, ctA uint8, bodyA []byte,
		mode uint8, refundB bool, idB, queryB string, ctB uint8, bodyB []byte) {
		tenant := fmt.Sprintf("t%d", s.seq.Add(1))
		a := fuzzReq{refundA, idA, queryA, fuzzContentTypes[int(ctA)%len(fuzzContentTypes)], bodyA}
		var b fuzzReq
		switch mode % 3 {
		case 0:
			b = a
		case 1:
			b = a
			b.body = reserialise(a.body)
		default:
			b = fuzzReq{refundB, idB, queryB, fuzzContentTypes[int(ctB)%len(fuzzContentTypes)], bodyB}
		}

		ra, ok := s.send(t, tenant, key, a)
		if !ok {
			return
		}
		switch ra.status {
		case http.StatusCreated:
			if ra.replayed || s.ran(tenant) != 1 {
				t.Fatalf("A ran %d times (replayed %t): %s", s.ran(tenant), ra.replayed, ra.body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if s.ran(tenant) != 0 {
				t.Fatalf("A was refused (%d %s) but ran", ra.status, ra.body)
			}
		default:
			t.Fatalf("A answered %d: %s", ra.status, ra.body)
		}

		ra2, _ := s.send(t, tenant, key, a)
		if ra.status == http.StatusCreated && (ra2.status != ra.status || ra2.body != ra.body || !ra2.replayed) {
			t.Fatalf("A's retry answered %d %q (replayed %t), not A's answer %q", ra2.status, ra2.body, ra2.replayed, ra.body)
		}
		if ra.status != http.StatusCreated && (ra2.status != ra.status || problemOf(ra2.body) != problemOf(ra.body)) {
			t.Fatalf("A was refused with %d %s, its retry with %d %s", ra.status, ra.body, ra2.status, ra2.body)
		}
		if ran := s.ran(tenant); ran > 1 {
			t.Fatalf("A ran %d times", ran)
		}

		before := s.ran(tenant)
		rb, ok := s.send(t, tenant, key, b)
		if !ok {
			t.Fatal("the client refused B's key after sending A's")
		}
		if rb.status >= 500 {
			t.Fatalf("B answered %d: %s", rb.status, rb.body)
		}
		if rb.status == http.StatusCreated && rb.body == ra.body && (a.refund != b.refund || !sameRequest(a, b)) {
			t.Fatalf("B (%s %q) got A's answer (%s %q): %s", b.target(), b.body, a.target(), a.body, rb.body)
		}
		switch {
		case problemOf(ra.body) == idemhttp.ProblemKeyInvalid:
			// The key is refused before anything else is read, B's body
			// (however large) included: the same answer.
			if rb.status != http.StatusBadRequest || problemOf(rb.body) != idemhttp.ProblemKeyInvalid {
				t.Fatalf("B, with A's invalid key, answered %d %s", rb.status, rb.body)
			}
		case len(b.body) > fuzzMaxBody:
			// Refused for its own size before any record is read.
			if rb.status != http.StatusRequestEntityTooLarge || problemOf(rb.body) != idemhttp.ProblemBodyTooLarge {
				t.Fatalf("B, a body of %d bytes over the limit of %d, answered %d %s", len(b.body), fuzzMaxBody, rb.status, rb.body)
			}
		case ra.status != http.StatusCreated || a.refund != b.refund:
			// B is a request of its own (A stored nothing, or B's endpoint
			// is another scope): executed, or refused for what it is.
			if rb.status == http.StatusUnprocessableEntity || rb.status == http.StatusConflict {
				t.Fatalf("B (%s), its own request, answered %d %s", b.target(), rb.status, rb.body)
			}
		case rb.status == http.StatusBadRequest && b.json() && problemOf(rb.body) == idemhttp.ProblemInvalidBody:
			if sameRequest(a, b) {
				t.Fatalf("B, the same request as A, was refused as invalid: %s", rb.body)
			}
		case sameRequest(a, b):
			if rb.status != http.StatusCreated || rb.body != ra.body || !rb.replayed {
				t.Fatalf("B (%s %q), the same request as A (%s %q), answered %d %s, not A's answer", b.target(), b.body, a.target(), a.body, rb.status, rb.body)
			}
		default:
			if rb.status != http.StatusUnprocessableEntity || problemOf(rb.body) != idemhttp.ProblemKeyReused {
				t.Fatalf("B (%s %q), not A (%s %q), answered %d %s, not key reused", b.target(), b.body, a.target(), a.body, rb.status, rb.body)
			}
		}
		if rb.status != http.StatusCreated || rb.replayed {
			if ran := s.ran(tenant); ran != before {
				t.Fatalf("B answered %d (replayed %t) but ran", rb.status, rb.replayed)
			}
		}
		if n := execs.Add(1); n&(n-1) == 0 { // the check reads the whole file: at 1, 2, 4, 8... inputs
			kvtest.MustCheck(t, s.db, ledger.RecordKind)
		}
	})
}
