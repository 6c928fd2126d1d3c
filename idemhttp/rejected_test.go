package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

func recordCount(t *testing.T, l *ledger.Ledger) int {
	n := 0
	require.NoError(t, l.DB().View(ctx, func(tx kv.Tx) error {
		n = 0
		for range l.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
			n++
		}
		return nil
	}))
	return n
}

// Every answer below 500 was kept 24h, including 400s whose detail echoed a
// megabyte of input: one tenant could grow the file without bound (issue 13,
// item 8). A request rejected before it wrote anything stores nothing (and
// its corrected retry with the same key runs); a stored 4xx body is capped;
// a problem detail never echoes unbounded input.
func TestRejectedRequestsStoreNothing(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind, sideeffect.RecordKind)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		mode := r.URL.Query().Get("mode")
		if mode == "invalid" {
			// Validation failed before anything happened; the detail echoes
			// the (huge) input, and WriteProblem clips it.
			idemhttp.WriteProblem(w, idemhttp.Problem{Type: idemhttp.ProblemInvalidBody, Title: "Invalid order", Status: 400,
				Detail: "unknown field " + r.Header.Get("X-Field")}, 0)
			return
		}
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err == nil {
			err = b.Put([]byte(r.URL.Query().Get("id")), []byte("x"))
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		switch mode {
		case "reject-after-write":
			idemhttp.DoNotStore(w)
			w.WriteHeader(409)
			fmt.Fprint(w, "conflict, rolled back")
		case "big-conflict":
			w.WriteHeader(409)
			fmt.Fprint(w, strings.Repeat("x", 10<<10))
		case "conflict":
			w.WriteHeader(409)
			fmt.Fprint(w, "conflict, stored")
		default:
			w.WriteHeader(201)
			fmt.Fprint(w, "created")
		}
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(query, key string, hdr ...string) reply {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/orders?"+query, strings.NewReader(""))
		req.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, string(body)}
	}

	huge := strings.Repeat("F", 60<<10)
	for i := range 20 {
		r := post("mode=invalid", fmt.Sprint("k", i), "X-Field", huge)
		require.Equal(t, 400, r.status)
		require.Less(t, len(r.body), 1024, "the detail is clipped")
	}
	require.Zero(t, recordCount(t, l), "rejected requests store nothing")
	require.Equal(t, uint64(20), mw.Stats().Rejected)

	// The corrected retry with the same key runs: no 422 against a stored 400.
	r := post("mode=invalid", "fix-me", "X-Field", "oops")
	require.Equal(t, 400, r.status)
	r = post("id=o1", "fix-me")
	require.Equal(t, 201, r.status, r.body)
	require.Empty(t, r.header.Get(idemhttp.HeaderReplayed))

	// DoNotStore after writes: rolled back, not stored.
	r = post("mode=reject-after-write&id=o2", "k-dns")
	require.Equal(t, 409, r.status)
	require.Equal(t, "conflict, rolled back", r.body)
	r = post("mode=reject-after-write&id=o2", "k-dns")
	require.Empty(t, r.header.Get(idemhttp.HeaderReplayed))

	// A 4xx with writes and a small body is an answer: stored and replayed;
	// one over the cap is sent but not stored.
	require.Equal(t, 409, post("mode=conflict&id=o3", "k-c").status)
	require.Equal(t, "true", post("mode=conflict&id=o3", "k-c").header.Get(idemhttp.HeaderReplayed))
	big := post("mode=big-conflict&id=o4", "k-big")
	require.Equal(t, 409, big.status)
	require.Len(t, big.body, 10<<10)
	require.Empty(t, post("mode=big-conflict&id=o4", "k-big").header.Get(idemhttp.HeaderReplayed))

	require.Equal(t, 2, recordCount(t, l), "fix-me and k-c")
	var orders []string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		orders = nil
		c := tx.Bucket([]byte("orders")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			orders = append(orders, string(k))
		}
		return nil
	}))
	require.Equal(t, []string{"o1", "o3"}, orders, "rolled-back requests left no business writes")
}

// A tenant over its quota gets 429 problem+json with Retry-After; another
// tenant is not affected (issue 13, item 9).
func TestQuotaIs429(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	l, err := ledger.New(b.db, &ledger.Config{Quota: &ledger.Quota{MaxRecords: 2}})
	require.NoError(t, err)
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }})
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		bk, _ := tx.CreateBucketIfNotExists([]byte("orders"))
		_ = bk.Put([]byte(r.Header.Get("Idempotency-Key")), []byte("x"))
		w.WriteHeader(201)
	})))
	defer srv.Close()
	post := func(tenant, key string) reply {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/orders", strings.NewReader(""))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Tenant", tenant)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header, string(body)}
	}
	require.Equal(t, 201, post("acme", "1").status)
	require.Equal(t, 201, post("acme", "2").status)
	r := post("acme", "3")
	require.Equal(t, 429, r.status, r.body)
	require.Equal(t, idemhttp.ProblemQuota, problemType(t, r))
	require.Equal(t, "60", r.header.Get("Retry-After"))
	require.Equal(t, "true", post("acme", "1").header.Get(idemhttp.HeaderReplayed), "replays are answered")
	require.Equal(t, 201, post("globex", "3").status)
	require.Equal(t, uint64(1), mw.Stats().Quota)
}
