package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/etcdkv/embedded"
)

// balancer is the load balancer in front of the replicas: every request
// goes to a replica picked at random; a replica that is down answers 502
// (the client retries, as it would through a real one).
type balancer struct {
	replicas []*httputil.ReverseProxy
}

func newBalancer(urls []string) *balancer {
	b := &balancer{}
	for _, u := range urls {
		target, _ := url.Parse(u)
		p := httputil.NewSingleHostReverseProxy(target)
		p.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "replica down: "+err.Error(), http.StatusBadGateway)
		}
		b.replicas = append(b.replicas, p)
	}
	return b
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.replicas[rand.IntN(len(b.replicas))].ServeHTTP(w, r) //nolint:gosec // load spreading, not a secret
}

// replicaSet is three payments services as processes on one etcd cluster
// (one member of which is a process too), one provider, a balancer.
type replicaSet struct {
	cluster  *embedded.Cluster
	prov     *proc
	mu       sync.Mutex
	replicas []*proc
	args     [][]string
	base     string
}

func startReplicas(t *testing.T, n int, providerArgs ...string) *replicaSet {
	t.Helper()
	dir := t.TempDir()
	c, err := embedded.Start(embedded.Options{Members: 3, Dir: dir, Process: []int{2}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	rs := &replicaSet{cluster: c}
	rs.prov = start(t, "provider", append([]string{"-addr", "127.0.0.1:0", "-db", dir + "/provider.db", "-seed", "5"}, providerArgs...)...)
	var urls []string
	for range n {
		args := []string{"-addr", "127.0.0.1:0", "-etcd", c.Endpoints(), "-etcd-prefix", "/payments/", "-provider", rs.prov.url,
			"-lease", "2s", "-call-timeout", "2s"}
		p := start(t, "payments", args...)
		args[1] = strings.TrimPrefix(p.url, "http://") // restarted on the same address
		rs.args = append(rs.args, args)
		rs.replicas = append(rs.replicas, p)
		urls = append(urls, p.url)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: newBalancer(urls), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	rs.base = "http://" + ln.Addr().String()
	return rs
}

// restart SIGKILLs replica i and starts it again on the same address.
func (rs *replicaSet) restart(t *testing.T, i int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.replicas[i].kill()
	rs.replicas[i] = start(t, "payments", rs.args[i]...)
}

// final sends a request until it gets a final answer: riding out replicas
// and etcd members going down (502, connection errors), requests in
// progress elsewhere (409) and answers not yet known (503).
func final(t *testing.T, method, u, key, body string) reply {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		r, err := try(method, u, acme, key, body)
		if err == nil && r.Status != 409 && r.Status < 500 {
			return r
		}
		time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond) //nolint:gosec // jitter
	}
	t.Errorf("%s %s (key %s): no final answer", method, u, key)
	return reply{}
}

// strip removes what legitimately differs between the copies' answers:
// whether this copy was the first or a replay.
func strip(r reply) string { return fmt.Sprintf("%d %s", r.Status, strings.TrimSpace(r.Body)) }

// TestReplicasOneChargePerPayment: one tenant's payments through a load
// balancer over three replicas of the service on one three-member etcd
// cluster. 32 workers send three copies of every request at once (the
// balancer spreads them over the replicas); meanwhile the etcd leader is
// closed, then a leader running as its own process is SIGKILLed, then a
// service replica is SIGKILLed with claims in flight, each brought back.
// Every logical payment ends with one order and one charge, every copy of
// a request gets the same answer, and the etcd members hold identical data
// afterwards.
func TestReplicasOneChargePerPayment(t *testing.T) {
	t.Parallel()
	workers, perWorker := 32, 3
	if os.Getenv("ONCEKV_REPLICAS_LONG") != "" {
		perWorker = 20
	}
	rs := startReplicas(t, 3, "-lose-rate", "0.2", "-fail-rate", "0.05")
	total := workers * perWorker
	var done atomic.Int32
	type outcome struct{ orderID, chargeID string }
	outcomes := make([]outcome, total)
	copies := func(method, path, key, body string) reply {
		answers := make([]reply, 3)
		var wg sync.WaitGroup
		for c := range answers {
			wg.Go(func() { answers[c] = final(t, method, rs.base+path, key, body) })
		}
		wg.Wait()
		for _, a := range answers[1:] {
			require.Equal(t, strip(answers[0]), strip(a), "%s %s: the copies got different answers", method, path)
		}
		return answers[0]
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				n := w*perWorker + i
				ref := fmt.Sprintf("rep-%d", n)
				o := copies("POST", "/v1/orders", "create-"+ref, orderBody(ref, 100+n, "t"))
				require.Equal(t, 201, o.Status, o.Body)
				id := o.json(t)["id"].(string)
				p := copies("POST", "/v1/orders/"+id+"/pay", "pay-"+ref, "")
				require.Equal(t, 200, p.Status, p.Body)
				require.Equal(t, "paid", p.json(t)["status"])
				outcomes[n] = outcome{id, p.json(t)["charge_id"].(string)}
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	at := func(frac float64) {
		for done.Load() < int32(frac*float64(total)) {
			select {
			case <-finished:
				t.Fatalf("the payments finished before the planned faults (%d of %d done)", done.Load(), total)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	ctx := context.Background()
	c := rs.cluster
	m0, m2 := c.Members[0], c.Members[2]

	at(0.15) // the etcd leader, embedded, closed
	require.NoError(t, c.MoveLeader(ctx, m0))
	c.StopMember(m0)
	at(0.35)
	require.NoError(t, c.RestartMember(m0))
	require.NoError(t, c.MoveLeader(ctx, m2)) // the etcd leader, a process, SIGKILLed
	c.StopMember(m2)
	at(0.55) // a service replica SIGKILLed with claims in flight
	rs.restart(t, 1)
	require.NoError(t, c.RestartMember(m2))
	<-finished
	if t.Failed() {
		return
	}

	// One order per logical payment: a create under a fresh key finds it.
	// One charge per order, the one the order records.
	byOrder := map[string][]string{}
	for _, ch := range charges(t, rs.prov.url) {
		id := strings.TrimPrefix(ch.Subject, "order/")
		byOrder[id] = append(byOrder[id], ch.ID)
	}
	for n, o := range outcomes {
		require.Equal(t, []string{o.chargeID}, byOrder[o.orderID], "payment %d", n)
		ref := fmt.Sprintf("rep-%d", n)
		again := final(t, "POST", rs.base+"/v1/orders", "check-"+ref, orderBody(ref, 100+n, "t"))
		require.Equal(t, 200, again.Status, "a second order for %s", ref)
		require.Equal(t, o.orderID, again.json(t)["id"])
	}
	require.Len(t, byOrder, total, "no stray charge")
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, c.Identical(sctx), "the etcd members differ")
	t.Logf("%d payments, each sent 3 times over 3 replicas: %d orders, %d charges; duplicates 0, lost 0", total, len(outcomes), len(byOrder))

	// The replicas that ran throughout export etcd's own counts
	// (oncekvotel.ObserveLedger, kv.DB.Counters): the copies of each
	// request, sent to three replicas at once, made their commits conflict.
	var updates, conflicts, lost float64
	for _, i := range []int{0, 2} {
		fams := scrape(t, rs.replicas[i].url)
		updates += counter(fams, "oncekv_etcd_updates_total", nil)
		conflicts += counter(fams, "oncekv_etcd_conflicts_total", nil)
		lost += counter(fams, "oncekv_etcd_answers_lost_total", nil)
	}
	require.Positive(t, updates, "oncekv_etcd_updates_total")
	require.Positive(t, conflicts, "oncekv_etcd_conflicts_total")
	t.Logf("replicas 0 and 2: %.0f write transactions, %.0f commits refused for a conflict, %.0f answers lost", updates, conflicts, lost)

}
