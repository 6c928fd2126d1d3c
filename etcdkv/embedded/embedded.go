// Package embedded runs a real etcd cluster on loopback ports for demos,
// examples and tests: members embedded in this process (server/v3/embed),
// or members in processes of their own that can be killed with SIGKILL.
//
// It is not a way to run etcd in production: members listen on plain
// HTTP on 127.0.0.1, and fsync is off unless Options.Fsync asks for it.
// Production runs an etcd cluster of its own and passes its endpoints to
// etcdkv.Open.
//
// A program that asks for process members (Options.Process) is
// re-executed as each of them: it must call RunMemberIfAsked first thing
// in main (or TestMain).
package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	Members []*Member
	spec    string // the initial cluster
	fsync   bool
	mu      sync.Mutex
}

// Member is one etcd member: embedded (Etcd), or a child process (Proc).
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string
	Etcd      *embed.Etcd // embedded members, while running
	Proc      *exec.Cmd   // process members, while running
	process   bool
	stopped   bool
}

// Options configure a cluster.
type Options struct {
	// Members is the number of members (default 1).
	Members int
	// Dir holds the members' data directories (required).
	Dir string
	// Process lists the members (by index) that run as child processes
	// of this program instead of in it: they can be SIGKILLed. The
	// program must call RunMemberIfAsked first thing.
	Process []int
	// Fsync keeps etcd's fsync (off by default: demos and tests are
	// about behaviour; benchmarks turn it on).
	Fsync bool
	// StartTimeout bounds the wait for every member to serve (default 60s).
	StartTimeout time.Duration
}

// Start starts a cluster and waits until every member serves. Close stops
// it.
func Start(o Options) (*Cluster, error) {
	if o.Members == 0 {
		o.Members = 1
	}
	if o.Dir == "" {
		return nil, errors.New("embedded: Options.Dir is required")
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	c := &Cluster{fsync: o.Fsync}
	var spec []string
	urls, err := freeURLs(2 * o.Members)
	if err != nil {
		return nil, err
	}
	for i := range o.Members {
		cu, pu := urls[2*i], urls[2*i+1]
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: cu, PeerURL: pu, Dir: filepath.Join(o.Dir, fmt.Sprintf("m%d", i))}
		c.Members = append(c.Members, m)
		spec = append(spec, m.Name+"="+m.PeerURL)
	}
	c.spec = strings.Join(spec, ",")
	for _, i := range o.Process {
		if i < 0 || i >= o.Members {
			return nil, fmt.Errorf("embedded: process member %d of %d", i, o.Members)
		}
		c.Members[i].process = true
	}
	ready := make(chan error, o.Members)
	for _, m := range c.Members {
		go func() { ready <- c.start(m, "new", o.StartTimeout) }()
	}
	var errs []error
	for range o.Members {
		errs = append(errs, <-ready)
	}
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// start runs one member and waits until it serves.
func (c *Cluster) start(m *Member, state string, timeout time.Duration) error {
	if m.process {
		cmd := exec.Command(os.Args[0]) //nolint:gosec // this program itself, as a member
		cmd.Env = append(os.Environ(), envMember+"="+strings.Join([]string{m.Name, m.Dir, m.PeerURL, m.ClientURL, c.spec, fmt.Sprint(c.fsync), state}, "|"))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("embedded: member %s: %w", m.Name, err)
		}
		c.mu.Lock()
		m.Proc, m.stopped = cmd, false
		c.mu.Unlock()
		return waitServing(m.ClientURL, timeout)
	}
	e, err := embed.StartEtcd(memberConfig(m, c.spec, c.fsync, state))
	if err != nil {
		return fmt.Errorf("embedded: member %s: %w", m.Name, err)
	}
	c.mu.Lock()
	m.Etcd, m.stopped = e, false
	c.mu.Unlock()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("embedded: member %s not ready after %s", m.Name, timeout)
	}
}

// freeURLs returns n distinct loopback URLs on free ports. Every listener
// is held until all are chosen: one closed at once could hand its port to
// the next (two members got the same port, found by CI's etcd matrix).
func freeURLs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	urls := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, nil
}

func memberConfig(m *Member, spec string, fsync bool, state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	pu, _ := url.Parse(m.PeerURL)
	cu, _ := url.Parse(m.ClientURL)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = spec
	cfg.ClusterState = state
	cfg.InitialClusterToken = "oncekv-embedded"
	cfg.LogLevel = "fatal" // Close logs every listener it shuts as an error
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = !fsync
	// Keep a bounded history: every write is a new revision, and an
	// uncompacted etcd grows until it hits its space quota.
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "10000"
	return cfg
}

// Endpoints returns the members' client URLs, comma-separated: what
// etcdkv.Open and the oncekv CLI's --etcd take.
func (c *Cluster) Endpoints() string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return strings.Join(eps, ",")
}

// Leader returns the running member that leads, or nil if none is known
// yet (an election in progress).
func (c *Cluster) Leader(ctx context.Context) *Member {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Endpoints(), ","), DialTimeout: 2 * time.Second, Logger: quietLogger()})
	if err != nil {
		return nil
	}
	defer func() { _ = cli.Close() }()
	for _, m := range c.Members {
		if !c.Running(m) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.ClientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return m
		}
	}
	return nil
}

// MoveLeader hands the leadership to member to (a running one) and waits
// until it leads.
func (c *Cluster) MoveLeader(ctx context.Context, to *Member) error {
	cur := c.Leader(ctx)
	if cur == nil {
		return errors.New("embedded: no leader to move")
	}
	if cur == to {
		return nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cur.ClientURL}, DialTimeout: 2 * time.Second, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	st, err := cli.Status(ctx, to.ClientURL)
	if err != nil {
		return fmt.Errorf("embedded: status of %s: %w", to.Name, err)
	}
	if _, err := cli.MoveLeader(ctx, st.Header.MemberId); err != nil {
		return fmt.Errorf("embedded: move the leadership to %s: %w", to.Name, err)
	}
	for c.Leader(ctx) != to {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// Running reports whether m runs (it was not stopped, or was restarted).
func (c *Cluster) Running(m *Member) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !m.stopped
}

// StopMember stops a member at once: closes an embedded one, SIGKILLs a
// process.
func (c *Cluster) StopMember(m *Member) {
	c.mu.Lock()
	if m.stopped {
		c.mu.Unlock()
		return
	}
	m.stopped = true
	e, p := m.Etcd, m.Proc
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
	if p != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		_ = p.Wait()
	}
}

// RestartMember starts a stopped member again on its data directory: it
// rejoins the cluster and catches up.
func (c *Cluster) RestartMember(m *Member) error {
	if c.Running(m) {
		return fmt.Errorf("embedded: member %s is running", m.Name)
	}
	return c.start(m, "existing", 60*time.Second)
}

// Close stops every member.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		c.StopMember(m)
	}
}

// Identical checks that the running members hold the same data: etcd's
// HashKV of each at the same revision (the latest the first member has
// applied, once every member has applied it).
func (c *Cluster) Identical(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(c.Endpoints(), ","), DialTimeout: 2 * time.Second, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	var running []*Member
	for _, m := range c.Members {
		if c.Running(m) {
			running = append(running, m)
		}
	}
	if len(running) == 0 {
		return errors.New("embedded: no member runs")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.compareHashes(ctx, cli, running)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // a follower may still be applying
	}
}

func (c *Cluster) compareHashes(ctx context.Context, cli *clientv3.Client, ms []*Member) error {
	st, err := cli.Status(ctx, ms[0].ClientURL)
	if err != nil {
		return err
	}
	rev := st.Header.Revision
	var first uint32
	for i, m := range ms {
		h, err := cli.HashKV(ctx, m.ClientURL, rev)
		if err != nil {
			return fmt.Errorf("embedded: hash of member %s at revision %d: %w", m.Name, rev, err)
		}
		if i == 0 {
			first = h.Hash
		} else if h.Hash != first {
			return fmt.Errorf("embedded: members %s and %s differ at revision %d", ms[0].Name, m.Name, rev)
		}
	}
	return nil
}

// A member in a process of its own: this program re-executed with
// ONCEKV_ETCD_MEMBER set.
const envMember = "ONCEKV_ETCD_MEMBER"

// RunMemberIfAsked runs an etcd member and never returns when this process
// was started as one (Options.Process); call it first in main or TestMain.
func RunMemberIfAsked() {
	v := os.Getenv(envMember)
	if v == "" {
		return
	}
	f := strings.Split(v, "|")
	if len(f) != 7 {
		fmt.Fprintln(os.Stderr, "embedded member: malformed", envMember)
		os.Exit(2)
	}
	m := &Member{Name: f[0], Dir: f[1], PeerURL: f[2], ClientURL: f[3]}
	e, err := embed.StartEtcd(memberConfig(m, f[4], f[5] == "true", f[6]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded member:", err)
		os.Exit(3)
	}
	err = <-e.Err() // runs until killed
	fmt.Fprintln(os.Stderr, "embedded member stopped:", err)
	os.Exit(0)
}

func waitServing(clientURL string, d time.Duration) error {
	deadline := time.Now().Add(d)
	u, _ := url.Parse(clientURL)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", u.Host, 200*time.Millisecond); err == nil {
			_ = conn.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond) // a child process has no readiness signal but its listener
	}
	return fmt.Errorf("embedded: member at %s did not start", clientURL)
}

func quietLogger() *zap.Logger { return zap.NewNop() }
