package command

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"
)

// demoConfig are the demo's knobs.
type demoConfig struct {
	ops, clients               int
	lose, dup, concurrent      float64 // client-side transport faults
	providerFail, providerLose float64 // provider faults
	seed                       uint64
	replicas                   int // service replicas, on etcd when more than one
}

func newDemo(o *options) *cobra.Command {
	cfg := demoConfig{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run the payments service under retries and faults, and prove nothing was charged twice",
		Long: `demo starts the payments example and its payment provider in this process,
on loopback, with an embedded database (a new file under the temp directory
unless --db), and runs --clients clients doing --ops logical payments
(create an order, pay it) through a transport that loses responses, sends
duplicates and concurrent duplicates, against a provider that fails before
charging and loses responses after charging. Clients retry with their same
keys. The summary counts operations, attempts, replays, conflicts, provider
charges, duplicates and lost operations (both must be 0), and latency; the
database is left for inspection. Exit 1 if anything was duplicated or lost.

--replicas 3 runs three replicas of the service behind a load balancer that
spreads every request, retries and duplicates included, over them; their
state is on etcd: a three-member cluster embedded in this process (its
leader is killed a third of the way through and comes back at two thirds),
or the cluster at --etcd. --etcd alone runs one replica on it.

--key-file (or $ONCEKV_KEY) runs the service encrypted at rest: stored
responses, intents, events and order rows are sealed with that key.`,
		Example: `  oncekv demo
  oncekv demo --ops 1000 --clients 16
  oncekv demo --db demo.db && oncekv keys --db demo.db --limit 5
  oncekv keygen > demo.key && oncekv demo --key-file demo.key
  oncekv demo --replicas 3
  oncekv demo --replicas 3 --etcd http://127.0.0.1:2379 && oncekv keys --etcd http://127.0.0.1:2379 --etcd-prefix /oncekv-demo/`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.ops <= 0 || cfg.clients <= 0 || cfg.replicas <= 0 {
				return usagef("--ops, --clients and --replicas must be positive")
			}
			if o.db != "" && (o.etcd != "" || cfg.replicas > 1) {
				return usagef("--db is one process's file: with --replicas or --etcd the state is on etcd")
			}
			if o.etcd != "" && !cmd.Flags().Changed("etcd-prefix") {
				o.etcdPrefix = demoPrefix
			}
			return runDemo(cmd.Context(), o, cfg)
		},
	}
	f := c.Flags()
	f.IntVar(&cfg.ops, "ops", 300, "logical payments (create + pay)")
	f.IntVar(&cfg.clients, "clients", 8, "concurrent clients")
	f.Float64Var(&cfg.lose, "lose-responses", 0.10, "fraction of responses lost on the way back")
	f.Float64Var(&cfg.dup, "duplicates", 0.10, "fraction of requests sent twice in a row")
	f.Float64Var(&cfg.concurrent, "concurrent-duplicates", 0.10, "fraction of requests sent twice at once")
	f.Float64Var(&cfg.providerFail, "provider-fail", 0.05, "fraction of provider calls failing before charging")
	f.Float64Var(&cfg.providerLose, "provider-lose", 0.10, "fraction of provider calls that charge, then drop the response")
	f.Uint64Var(&cfg.seed, "seed", uint64(time.Now().UnixNano()), "seed of every fault")
	f.IntVar(&cfg.replicas, "replicas", 1, "service replicas behind a load balancer, sharing one ledger on etcd (embedded unless --etcd)")
	return c
}

// demoPrefix is the demo's etcd prefix unless --etcd-prefix says otherwise.
const demoPrefix = "/oncekv-demo/"

type serverHandle struct {
	srv  *http.Server
	done chan struct{}
	url  string
}

func serve(h http.Handler) (*serverHandle, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &serverHandle{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{}), url: "http://" + ln.Addr().String()}
	go func() { _ = s.srv.Serve(ln); close(s.done) }()
	return s, nil
}

func (s *serverHandle) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
}

// demoResult is the summary, printed as a table or JSON.
type demoResult struct {
	DB              string   `json:"db"`
	Replicas        int      `json:"replicas"`
	Faults          []string `json:"etcd_faults,omitempty"` // what happened to the etcd cluster during the run
	Operations      int      `json:"operations"`
	Clients         int      `json:"clients"`
	Attempts        int64    `json:"attempts"`
	LostResponses   int64    `json:"lost_responses"`
	Replays         int64    `json:"replays"`
	Conflicts       int64    `json:"conflicts"`
	ProviderCharges int      `json:"provider_charges"`
	Duplicates      int      `json:"duplicates"`
	Lost            int      `json:"lost"`
	P50MS           float64  `json:"p50_ms"`
	P99MS           float64  `json:"p99_ms"`
	Seconds         float64  `json:"seconds"`
	Inspect         string   `json:"inspect"`
	Encrypted       string   `json:"encrypted,omitempty"` // "key id N" with --key-file
}

func runDemo(ctx context.Context, o *options, cfg demoConfig) error {
	if err := o.loadCipher(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "oncekv-demo-")
	if err != nil {
		return err
	}
	dbPath := o.db
	if dbPath == "" {
		dbPath = filepath.Join(dir, "payments.db")
	}
	providerPath := strings.TrimSuffix(dbPath, filepath.Ext(dbPath)) + "-provider.db"
	pdb, err := kv.Open(providerPath, &kv.Options{LockTimeout: lockTimeout})
	if err != nil {
		return fmt.Errorf("provider database: %w", err)
	}
	defer func() { _ = pdb.Close() }()
	psrv, err := serve(httpprovider.New(pdb, httpprovider.Faults{FailRate: cfg.providerFail, LoseRate: cfg.providerLose}, cfg.seed).Handler())
	if err != nil {
		return err
	}
	defer psrv.close()

	st, err := startDemoStore(o, cfg, dir)
	if err != nil {
		return err
	}
	defer st.close()
	svc, err := startReplicas(ctx, o, st, cfg.replicas, psrv.url)
	if err != nil {
		return err
	}
	defer svc.close()
	a := svc.apps[0]

	tr := &faultTransport{base: &http.Transport{MaxIdleConnsPerHost: cfg.clients * 2}, lose: cfg.lose, dup: cfg.dup, concurrent: cfg.concurrent,
		rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0xdeadbeef))} //nolint:gosec // fault dice, seeded for reproducible runs
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	policy := sideeffect.RetryPolicy{MaxAttempts: 30, Deadline: time.Minute, Backoff: sideeffect.Backoff{Base: 20 * time.Millisecond, Cap: 500 * time.Millisecond}}

	progress := newProgress(o.diag, cfg.ops) // stderr: stdout carries the summary (one JSON document with --json)
	start := time.Now()
	latencies := make([]time.Duration, cfg.ops)
	orderIDs := make([]string, cfg.ops)
	failures := make([]error, cfg.ops)
	work := make(chan int)
	var wg sync.WaitGroup
	for range cfg.clients {
		wg.Go(func() {
			for i := range work {
				t0 := time.Now()
				orderIDs[i], failures[i] = payOne(ctx, client, policy, svc.url, i)
				latencies[i] = time.Since(t0)
				progress.add()
				st.faults(progress.done.Load(), cfg.ops)
			}
		})
	}
	for i := range cfg.ops {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	progress.finish()
	elapsed := time.Since(start)

	// Count charges per order at the provider, and check every order.
	res := demoResult{DB: dbPath, Replicas: cfg.replicas, Operations: cfg.ops, Clients: cfg.clients, Attempts: tr.attempts.Load(), LostResponses: tr.lost.Load(),
		Replays: tr.replays.Load(), Conflicts: tr.conflicts.Load(), Seconds: elapsed.Seconds(),
		Inspect: "oncekv keys --db " + dbPath + " --limit 10"}
	if o.cipher != nil {
		res.Encrypted = fmt.Sprintf("key id %d", o.cipher.Current())
		res.Inspect += " (add --key-file to read bodies: oncekv get --body --key-file ...)"
	}
	if st.etcd != "" {
		res.DB, res.Faults = st.describe(), st.done()
		res.Inspect = fmt.Sprintf("oncekv keys --etcd %s --etcd-prefix %s --limit 10", st.etcd, o.etcdPrefix)
		if st.cluster != nil {
			res.Inspect = "(the embedded etcd cluster stops with the demo: run etcd and pass --etcd to keep the state)"
		}
	}
	charges, err := providerCharges(psrv.url)
	if err != nil {
		return err
	}
	perOrder := map[string]int{}
	for _, c := range charges {
		perOrder[strings.TrimPrefix(c.Subject, "order/")]++
	}
	res.ProviderCharges = len(charges)
	for id, n := range perOrder {
		if n > 1 || !slices.Contains(orderIDs, id) {
			res.Duplicates += max(n-1, 1)
		}
	}
	for i, id := range orderIDs {
		if failures[i] != nil || id == "" {
			res.Lost++
			continue
		}
		row, err := a.Orders.Get(ctx, id)
		if err != nil || row.Value.Status != "paid" || perOrder[id] != 1 {
			res.Lost++
		}
	}
	slices.Sort(latencies)
	res.P50MS = float64(latencies[len(latencies)/2].Microseconds()) / 1000
	res.P99MS = float64(latencies[min(len(latencies)-1, len(latencies)*99/100)].Microseconds()) / 1000

	err = o.emit(res, func(w io.Writer) {
		fmt.Fprintf(w, "operations\t%d logical payments (create an order, pay it) by %d clients in %.1fs\n", res.Operations, res.Clients, res.Seconds)
		if res.Replicas > 1 || len(res.Faults) > 0 {
			fmt.Fprintf(w, "replicas\t%d behind a load balancer, state on %s\n", res.Replicas, res.DB)
		}
		for _, f := range res.Faults {
			fmt.Fprintf(w, "etcd fault\t%s\n", f)
		}
		fmt.Fprintf(w, "attempts\t%d HTTP requests sent (%d responses lost on the way back, duplicates sent on purpose)\n", res.Attempts, res.LostResponses)
		fmt.Fprintf(w, "replays\t%d answered from the idempotency record\n", res.Replays)
		fmt.Fprintf(w, "conflicts\t%d answered 409 while the first attempt was in progress\n", res.Conflicts)
		fmt.Fprintf(w, "provider charges\t%d\n", res.ProviderCharges)
		if res.Encrypted != "" {
			fmt.Fprintf(w, "encrypted\tat rest, %s\n", res.Encrypted)
		}
		fmt.Fprintf(w, "duplicates\t%d (must be 0)\n", res.Duplicates)
		fmt.Fprintf(w, "lost operations\t%d (must be 0)\n", res.Lost)
		fmt.Fprintf(w, "latency\tp50 %.1fms, p99 %.1fms per logical payment, retries included\n", res.P50MS, res.P99MS)
		fmt.Fprintf(w, "inspect\t%s\n", res.Inspect)
	})
	if err != nil {
		return err
	}
	if res.Duplicates != 0 || res.Lost != 0 {
		for i, f := range failures {
			if f != nil {
				return fmt.Errorf("payment %d: %w", i, f)
			}
		}
		return fmt.Errorf("%d duplicates, %d lost operations", res.Duplicates, res.Lost)
	}
	return nil
}

// payOne creates order i and pays it, retrying with the same keys.
func payOne(ctx context.Context, c *http.Client, p sideeffect.RetryPolicy, base string, i int) (string, error) {
	call := func(path, key, body string) (map[string]any, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer sk_test_acme")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := p.Do(ctx, c, req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
			return nil, fmt.Errorf("%s: %d %v", path, resp.StatusCode, m)
		}
		return m, nil
	}
	o, err := call("/v1/orders", fmt.Sprintf("demo-create-%d", i),
		fmt.Sprintf(`{"external_ref":"demo-%d","amount_cents":%d,"currency":"eur","client_ts":%q}`, i, 100+i, time.Now().UTC().Format(time.RFC3339Nano)))
	if err != nil {
		return "", err
	}
	id, _ := o["id"].(string)
	paid, err := call("/v1/orders/"+id+"/pay", fmt.Sprintf("demo-pay-%d", i), "")
	if err != nil {
		return id, err
	}
	if paid["status"] != "paid" {
		return id, fmt.Errorf("order %s: status %v", id, paid["status"])
	}
	return id, nil
}

func providerCharges(base string) ([]httpprovider.Charge, error) {
	resp, err := httpClient.Get(base + "/v1/charges")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var cs []httpprovider.Charge
	err = json.NewDecoder(resp.Body).Decode(&cs) // before cs is read: the order of a return's operands is not specified
	return cs, err
}
