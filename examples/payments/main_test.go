package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const acme, globex = "sk_test_acme", "sk_test_globex"

func TestCreateReplayAndErrors(t *testing.T) {
	t.Parallel()
	svc, prov, _ := service(t)
	u := svc.url + "/v1/orders"

	first := do(t, "POST", u, acme, "create-1", orderBody("ext-1", 2500, "10:00:00"))
	require.Equal(t, 201, first.Status, first.Body)
	o := first.json(t)
	require.Equal(t, "pending", o["status"])
	require.Equal(t, "ext-1", o["external_ref"])
	require.EqualValues(t, 2500, o["amount_cents"])
	require.EqualValues(t, 1, o["version"])
	require.Equal(t, "/v1/orders/"+o["id"].(string), first.Header.Get("Location"))

	// Replay: byte for byte, with the header; reordered JSON and a new
	// client_ts/request_id are the same request.
	for _, body := range []string{
		orderBody("ext-1", 2500, "10:00:00"),
		`{"request_id":"other","client_ts":"11:11:11","currency":"eur","amount_cents":2500,"external_ref":"ext-1"}`,
	} {
		again := do(t, "POST", u, acme, "create-1", body)
		require.Equal(t, 201, again.Status)
		require.Equal(t, first.Body, again.Body)
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	}
	// Any other change under the same key: 422.
	changed := do(t, "POST", u, acme, "create-1", orderBody("ext-1", 2600, "10:00:00"))
	require.Equal(t, 422, changed.Status)
	require.Equal(t, "application/problem+json", changed.Header.Get("Content-Type"))
	require.Contains(t, changed.Body, "idempotency-key-reused")

	// A new key for an existing external_ref returns the existing order.
	dup := do(t, "POST", u, acme, "create-1-other-key", orderBody("ext-1", 2500, "10:05:00"))
	require.Equal(t, 200, dup.Status)
	require.Equal(t, o["id"], dup.json(t)["id"])

	// 400s, 401s, 413.
	for _, c := range []struct {
		apiKey, key, body string
		status            int
		problem           string
	}{
		{acme, "", orderBody("ext-2", 1, "x"), 400, "idempotency-key-missing"},
		{acme, strings.Repeat("k", 256), orderBody("ext-2", 1, "x"), 400, "idempotency-key-invalid"},
		{acme, "bad-1", `{"external_ref":"","amount_cents":1,"currency":"eur"}`, 400, "invalid-body"},
		{acme, "bad-2", `{"external_ref":"x","amount_cents":-5,"currency":"eur"}`, 400, "invalid-body"},
		{acme, "bad-3", `{"external_ref":"x","amount_cents":5,"currency":"eur","surprise":1}`, 400, "invalid-body"},
		{acme, "bad-4", `{"external_ref":`, 400, "invalid-body"},
		{"", "k", orderBody("ext-2", 1, "x"), 401, "unauthenticated"},
		{"sk_live_nope", "k", orderBody("ext-2", 1, "x"), 401, "unauthenticated"},
		{acme, "big", `{"external_ref":"x","pad":"` + strings.Repeat("x", 1<<20) + `"}`, 413, "body-too-large"},
	} {
		r := do(t, "POST", u, c.apiKey, c.key, c.body)
		require.Equal(t, c.status, r.Status, r.Body)
		require.Contains(t, r.Body, c.problem)
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	}
	require.Equal(t, 401, do(t, "GET", u+"/"+o["id"].(string), "", "", "").Status)

	// Tenant isolation: the same key under two tenants makes two orders, and
	// a tenant cannot read another's order.
	g := do(t, "POST", u, globex, "create-1", orderBody("ext-1", 2500, "10:00:00"))
	require.Equal(t, 201, g.Status)
	require.NotEqual(t, o["id"], g.json(t)["id"])
	require.Equal(t, 404, do(t, "GET", u+"/"+o["id"].(string), globex, "", "").Status)
	require.Equal(t, 200, do(t, "GET", u+"/"+o["id"].(string), acme, "", "").Status)

	// Pay: charged once per order, whatever the keys.
	pay := do(t, "POST", u+"/"+o["id"].(string)+"/pay", acme, "pay-1", "")
	require.Equal(t, 200, pay.Status, pay.Body)
	p := pay.json(t)
	require.Equal(t, "paid", p["status"])
	require.NotEmpty(t, p["charge_id"])
	again := do(t, "POST", u+"/"+o["id"].(string)+"/pay", acme, "pay-1", "")
	require.Equal(t, pay.Body, again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	other := do(t, "POST", u+"/"+o["id"].(string)+"/pay", acme, "pay-1-new-key", "")
	require.Equal(t, 200, other.Status)
	require.Equal(t, p["charge_id"], other.json(t)["charge_id"])
	require.Len(t, charges(t, prov.url), 1)
	require.Equal(t, 404, do(t, "POST", u+"/"+o["id"].(string)+"/pay", globex, "pay-x", "").Status)

	svc.stop(t) // SIGTERM: a clean shutdown
	prov.stop(t)
}

// 50 concurrent identical POSTs: one order; every answer is the same bytes
// (or a 409 while the first is in progress).
func TestStormOfDuplicates(t *testing.T) {
	t.Parallel()
	svc, _, _ := service(t)
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	start := make(chan struct{})
	for i := range replies {
		wg.Go(func() {
			<-start
			replies[i] = do(t, "POST", svc.url+"/v1/orders", acme, "storm", orderBody("ext-storm", 999, "t"))
		})
	}
	close(start)
	wg.Wait()
	var body string
	for _, r := range replies {
		if r.Status == 409 {
			continue
		}
		require.Equal(t, 201, r.Status, r.Body)
		if body == "" {
			body = r.Body
		}
		require.Equal(t, body, r.Body)
	}
	// Exactly one order exists for the external_ref: a create under a fresh
	// key returns it with 200.
	r := do(t, "POST", svc.url+"/v1/orders", acme, "storm-check", orderBody("ext-storm", 999, "t"))
	require.Equal(t, 200, r.Status)
	require.Equal(t, strings.TrimSpace(body), strings.TrimSpace(r.Body))
}

// dropProxy forwards requests to target and drops the reply of the first n
// of them: the request took effect, the client never hears.
type dropProxy struct {
	target  string
	drops   atomic.Int32
	dropped atomic.Int32
}

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequest(r.Method, p.target+r.URL.Path, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if p.drops.Add(-1) >= 0 {
		p.dropped.Add(1)
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(rb)
}

// The reply is lost on the way back; the client retries through the same
// proxy with the same keys: one order, one charge.
func TestLostResponseThroughProxy(t *testing.T) {
	t.Parallel()
	svc, prov, _ := service(t)
	proxy := &dropProxy{target: svc.url}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	send := func(url, key, body string) reply {
		for attempt := 0; attempt < 5; attempt++ {
			r, err := try("POST", url, acme, key, body)
			if err == nil {
				return r
			}
		}
		t.Fatal("no reply after 5 attempts")
		return reply{}
	}
	proxy.drops.Store(1)
	created := send(base+"/v1/orders", "lost-1", orderBody("ext-lost", 700, "t"))
	require.Equal(t, 201, created.Status)
	require.Equal(t, "true", created.Header.Get("Idempotent-Replayed"), "the retry got the stored reply")
	id := created.json(t)["id"].(string)

	proxy.drops.Store(1)
	paid := send(base+"/v1/orders/"+id+"/pay", "lost-pay-1", "")
	require.Equal(t, 200, paid.Status, paid.Body)
	require.Equal(t, "paid", paid.json(t)["status"])
	require.EqualValues(t, 2, proxy.dropped.Load())

	cs := charges(t, prov.url)
	require.Len(t, cs, 1)
	require.Equal(t, "order/"+id, cs[0].Subject)
	require.Equal(t, paid.json(t)["charge_id"], cs[0].ID)
}

// The provider fails before charging: 502, the order stays pending; the
// retry with the same key succeeds once the provider is back.
func TestProviderFailureThenRetry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", dir+"/provider.db", "-fail-rate", "1")
	paddr := strings.TrimPrefix(prov.url, "http://") // the provider comes back on it below
	svc := start(t, "payments", "-addr", "127.0.0.1:0", "-db", dir+"/payments.db", "-provider", prov.url)
	o := do(t, "POST", svc.url+"/v1/orders", acme, "c", orderBody("ext-f", 100, "t")).json(t)
	id := o["id"].(string)
	r := do(t, "POST", svc.url+"/v1/orders/"+id+"/pay", acme, "pay", "")
	require.Equal(t, 502, r.Status, r.Body)
	require.Contains(t, r.Body, "outcome-pending")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, "pending", do(t, "GET", svc.url+"/v1/orders/"+id, acme, "", "").json(t)["status"])
	require.Empty(t, charges(t, prov.url))

	prov.stop(t)
	prov = start(t, "provider", "-addr", paddr, "-db", dir+"/provider.db")
	// Retries during the intent's backoff get 503 and Retry-After, and spend
	// nothing; the client honours it.
	for range 10 {
		r = do(t, "POST", svc.url+"/v1/orders/"+id+"/pay", acme, "pay", "")
		if r.Status != 503 {
			break
		}
		require.Contains(t, r.Body, "side-effect-backoff")
		secs, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err)
		time.Sleep(time.Duration(secs) * time.Second)
	}
	require.Equal(t, 200, r.Status, r.Body)
	require.Equal(t, "paid", r.json(t)["status"])
	require.Len(t, charges(t, prov.url), 1)
}

// The service is killed with SIGKILL, repeatedly, while clients pay orders
// through a provider that loses 30% of its responses after charging. The
// service restarts on the same file; the clients retry with their same keys
// until every order is paid. Every order is paid once, and the provider
// holds one charge per order.
func TestCrashDuringPayments(t *testing.T) {
	t.Parallel()
	const clients, orders, kills = 6, 8, 3
	dir := t.TempDir()
	prov := start(t, "provider", "-addr", "127.0.0.1:0", "-db", dir+"/provider.db", "-lose-rate", "0.3", "-fail-rate", "0.1", "-seed", "11")
	args := []string{"-addr", "127.0.0.1:0", "-db", dir + "/payments.db", "-provider", prov.url}
	var mu sync.Mutex
	svc := start(t, "payments", args...)
	base := svc.url
	args[1] = strings.TrimPrefix(base, "http://") // restarted on the same address

	// retry sends a request until it gets a final answer, riding out the
	// service's deaths (connection refused/reset) and 409/502/503.
	retry := func(path, key, body string) reply { return untilFinal(t, base+path, key, body) }

	var paidOrders sync.Map
	var started atomic.Int32
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range orders {
				ref := fmt.Sprintf("crash-%d-%d", c, i)
				o := retry("/v1/orders", "create-"+ref, orderBody(ref, 100+i, "t"))
				if o.Status != 201 && o.Status != 200 {
					t.Errorf("create %s: %d %s", ref, o.Status, o.Body)
					return
				}
				id := o.json(t)["id"].(string)
				started.Add(1)
				p := retry("/v1/orders/"+id+"/pay", "pay-"+ref, "")
				if p.Status != 200 {
					t.Errorf("pay %s: %d %s", ref, p.Status, p.Body)
					return
				}
				paidOrders.Store(id, p.json(t)["charge_id"])
			}
		})
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()
	// The killer: SIGKILL the service mid-load, restart it on the same file.
	for k := range kills {
		for started.Load() < int32((k+1)*clients*orders/(kills+1)) {
			select {
			case <-clientsDone:
				t.Fatal("clients finished before the planned kills")
			case <-time.After(5 * time.Millisecond):
			}
		}
		mu.Lock()
		require.NoError(t, svc.cmd.Process.Signal(syscall.SIGKILL))
		_ = svc.cmd.Wait()
		svc = start(t, "payments", args...)
		mu.Unlock()
	}
	<-clientsDone

	// One charge per order, and it is the charge the order records.
	byOrder := map[string][]string{}
	for _, ch := range charges(t, prov.url) {
		byOrder[strings.TrimPrefix(ch.Subject, "order/")] = append(byOrder[strings.TrimPrefix(ch.Subject, "order/")], ch.ID)
	}
	n := 0
	paidOrders.Range(func(id, chargeID any) bool {
		n++
		require.Equal(t, []string{chargeID.(string)}, byOrder[id.(string)], "order %s", id)
		var o map[string]any
		r := do(t, "GET", base+"/v1/orders/"+id.(string), acme, "", "")
		require.NoError(t, json.Unmarshal([]byte(r.Body), &o))
		require.Equal(t, "paid", o["status"])
		return true
	})
	require.Equal(t, clients*orders, n)
	require.Len(t, byOrder, clients*orders, "no order charged twice, no stray charge")
	for id, cs := range byOrder {
		require.Len(t, cs, 1, "order %s", id)
	}
}
