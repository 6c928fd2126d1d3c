package command

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"time"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/examples/payments/app"
	"github.com/oncekv/oncekv/kv"
)

// demoStore is where the demo's service keeps its state: a bbolt file, or
// etcd (the cluster at --etcd, or one embedded here whose leader the demo
// kills mid-run).
type demoStore struct {
	dbPath  string
	etcd    string            // endpoints, when on etcd
	cluster *embedded.Cluster // the embedded cluster, if any

	mu      sync.Mutex
	stage   int // faults started: 1 leader killed, 2 restarted
	killed  *embedded.Member
	kill    chan struct{} // closed when the kill is over
	pending sync.WaitGroup
	log     []string
}

func startDemoStore(o *options, cfg demoConfig, dir string) (*demoStore, error) {
	st := &demoStore{dbPath: o.db}
	if st.dbPath == "" {
		st.dbPath = filepath.Join(dir, "payments.db")
	}
	switch {
	case o.etcd != "":
		st.etcd = o.etcd
	case cfg.replicas > 1:
		c, err := embedded.Start(embedded.Options{Members: 3, Dir: filepath.Join(dir, "etcd")})
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: %w", err)
		}
		st.cluster, st.etcd = c, c.Endpoints()
	}
	return st, nil
}

// describe names the store for the summary.
func (st *demoStore) describe() string {
	if st.cluster != nil {
		return fmt.Sprintf("etcd, a 3-member cluster embedded in this process (%s)", st.etcd)
	}
	return "etcd " + st.etcd
}

// faults kills the embedded cluster's leader a third of the way through
// the run and restarts it at two thirds; called as payments complete.
func (st *demoStore) faults(done int64, total int) {
	if st.cluster == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.stage == 0 && done >= int64(total/3):
		st.stage = 1
		st.kill = make(chan struct{})
		st.pending.Go(func() {
			defer close(st.kill)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var m *embedded.Member
			for m == nil && ctx.Err() == nil {
				if m = st.cluster.Leader(ctx); m == nil {
					time.Sleep(50 * time.Millisecond) // an election in progress
				}
			}
			if m == nil {
				st.note("no leader to kill")
				return
			}
			st.cluster.StopMember(m)
			st.mu.Lock()
			st.killed = m
			st.mu.Unlock()
			st.note(fmt.Sprintf("leader %s killed after %d payments", m.Name, done))
		})
	case st.stage == 1 && done >= int64(2*total/3):
		st.stage = 2
		st.pending.Go(func() {
			<-st.kill
			st.mu.Lock()
			m := st.killed
			st.mu.Unlock()
			if m == nil {
				return
			}
			if err := st.cluster.RestartMember(m); err != nil {
				st.note(fmt.Sprintf("%s did not restart: %v", m.Name, err))
				return
			}
			st.note(fmt.Sprintf("%s restarted after %d payments, rejoined as a follower", m.Name, done))
		})
	}
}

func (st *demoStore) note(s string) {
	st.mu.Lock()
	st.log = append(st.log, s)
	st.mu.Unlock()
}

// done waits for the faults under way and returns what happened.
func (st *demoStore) done() []string {
	st.pending.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.log...)
}

func (st *demoStore) close() {
	st.pending.Wait()
	if st.cluster != nil {
		st.cluster.Close()
	}
}

// open returns a new replica of the service on the store.
func (st *demoStore) open(o *options, providerURL string) (*app.App, error) {
	cfg := app.Config{DBPath: st.dbPath, ProviderURL: providerURL, Grace: time.Second, Lease: 5 * time.Second, Cipher: o.cipher}
	if st.etcd != "" {
		b, err := etcdkv.Open(st.etcd, &etcdkv.Options{Prefix: o.etcdPrefix})
		if err != nil {
			return nil, err
		}
		cfg.Backend = b
		a, err := app.New(cfg)
		if err != nil {
			_ = b.Close()
		}
		return a, err
	}
	a, err := app.New(cfg)
	if errors.Is(err, kv.ErrLocked) {
		return nil, errors.New(lockedHelp(st.dbPath))
	}
	return a, err
}

// demoService is the running replicas and the load balancer before them.
type demoService struct {
	apps    []*app.App
	servers []*serverHandle
	lb      *serverHandle
	url     string
	stop    context.CancelFunc
	bg      sync.WaitGroup
}

// startReplicas runs n replicas of the payments service on st, each with
// its background work, and a load balancer that sends every request to one
// of them at random.
func startReplicas(ctx context.Context, o *options, st *demoStore, n int, providerURL string) (*demoService, error) {
	ctx, stop := context.WithCancel(ctx)
	svc := &demoService{stop: stop}
	var proxies []*httputil.ReverseProxy
	for range n {
		a, err := st.open(o, providerURL)
		if err != nil {
			svc.close()
			return nil, err
		}
		svc.apps = append(svc.apps, a)
		svc.bg.Go(func() {
			if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintln(o.diag, "demo: payments background work:", err)
			}
		})
		s, err := serve(a.Handler)
		if err != nil {
			svc.close()
			return nil, err
		}
		svc.servers = append(svc.servers, s)
		u, _ := url.Parse(s.url)
		proxies = append(proxies, httputil.NewSingleHostReverseProxy(u))
	}
	svc.url = svc.servers[0].url
	if n > 1 {
		lb, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proxies[rand.IntN(len(proxies))].ServeHTTP(w, r) //nolint:gosec // load spreading, not a secret
		}))
		if err != nil {
			svc.close()
			return nil, err
		}
		svc.lb, svc.url = lb, lb.url
	}
	return svc, nil
}

// close stops the balancer, the replicas' servers, their background work,
// and closes their databases.
func (svc *demoService) close() {
	if svc.lb != nil {
		svc.lb.close()
	}
	for _, s := range svc.servers {
		s.close()
	}
	svc.stop()
	svc.bg.Wait()
	for _, a := range svc.apps {
		_ = a.Close()
	}
}
