package embedded

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	Etcd      *embed.Etcd   // embedded members, while running
	Proc      *exec.Cmd     // process members, while running
	exited    chan struct{} // closed when Proc has exited
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
//
// Ports are chosen free, then left for the members to listen on. Another
// program can take one in between (a connection's local port, say); Start
// then starts the cluster again on new ports, up to five times.
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
	for _, i := range o.Process {
		if i < 0 || i >= o.Members {
			return nil, fmt.Errorf("embedded: process member %d of %d", i, o.Members)
		}
	}
	for attempt := 1; ; attempt++ {
		c, err := startOnce(o)
		switch {
		case err == nil:
			return c, nil
		case !errors.Is(err, errPortTaken) || attempt == startAttempts:
			return nil, err
		}
		// A new cluster on new ports: the failed one's data is not its.
		for _, m := range c.Members {
			if err := os.RemoveAll(m.Dir); err != nil {
				return nil, fmt.Errorf("embedded: start again: %w", err)
			}
		}
	}
}

// startAttempts bounds Start's retries on a port taken.
const startAttempts = 5

// errPortTaken marks a member that could not listen on its port.
var errPortTaken = errors.New("port taken before the member listened")

// pickURLs chooses a cluster's URLs (a variable for tests).
var pickURLs = freeURLs

// startOnce starts a cluster on ports chosen now. On failure it returns
// the stopped cluster with the error.
func startOnce(o Options) (*Cluster, error) {
	c := &Cluster{fsync: o.Fsync}
	var spec []string
	urls, err := pickURLs(2 * o.Members)
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
		return c, err
	}
	return c, nil
}

// start runs one member and waits until it serves.
func (c *Cluster) start(m *Member, state string, timeout time.Duration) error {
	if m.process {
		return c.startProcess(m, state, timeout)
	}
	e, err := embed.StartEtcd(memberConfig(m, c.spec, c.fsync, state))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			err = fmt.Errorf("%w (%w)", err, errPortTaken)
		}
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

// startProcess runs a member as a child process and waits until it
// serves: it writes a line to its standard output once etcd is ready.
func (c *Cluster) startProcess(m *Member, state string, timeout time.Duration) error {
	cmd := exec.Command(os.Args[0]) //nolint:gosec // this program itself, as a member
	cmd.Env = append(os.Environ(), envMember+"="+strings.Join([]string{m.Name, m.Dir, m.PeerURL, m.ClientURL, c.spec, fmt.Sprint(c.fsync), state}, "|"))
	cmd.Stderr = os.Stderr
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("embedded: member %s: %w", m.Name, err)
	}
	cmd.Stdout = w
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		_ = r.Close()
		return fmt.Errorf("embedded: member %s: %w", m.Name, err)
	}
	exited, ready := make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	m.Proc, m.exited, m.stopped = cmd, exited, false
	c.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	go func() {
		defer func() { _ = r.Close() }()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if sc.Text() == readyLine {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, r) // until the member exits
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ready:
		return nil
	case <-exited:
		err := fmt.Errorf("embedded: member %s exited before it served (%s)", m.Name, cmd.ProcessState)
		if cmd.ProcessState.ExitCode() == exitPortTaken {
			err = fmt.Errorf("%w: %w", err, errPortTaken)
		}
		return err
	case <-timer.C:
		return fmt.Errorf("embedded: member %s not ready after %s", m.Name, timeout)
	}
}

// freeURLs returns n distinct loopback URLs on free ports. Every listener
// is held until all are chosen: one closed at once could hand its port to
// the next (two members got the same port, found by CI's etcd matrix).
//
// On Linux the ports are drawn below the ephemeral range, where the kernel
// never picks a connection's local port: a stopped member's port stays
// free for its restart, and a port cannot be taken by a connection before
// the member listens (which failed a CI run). Elsewhere the kernel picks.
func freeURLs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	lo, hi := quietPorts()
	urls := make([]string, 0, n)
	for misses := 0; len(urls) < n; {
		port := 0
		if hi > lo && misses < 100 {
			port = lo + rand.IntN(hi-lo) //nolint:gosec // a port number, not a secret
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port != 0 {
				misses++
				continue
			}
			return nil, err
		}
		lns = append(lns, ln)
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, nil
}

// quietPorts returns the ports [lo, hi) below Linux's ephemeral range, or
// an empty range where it is unknown.
func quietPorts() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first < 4096 {
		return 0, 0
	}
	return first / 2, first
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
	e, p, exited := m.Etcd, m.Proc, m.exited
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
	if p != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		<-exited
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
		if errors.Is(err, syscall.EADDRINUSE) {
			os.Exit(exitPortTaken)
		}
		os.Exit(3)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println(readyLine)
		err = <-e.Err() // runs until killed
	case err = <-e.Err():
	}
	fmt.Fprintln(os.Stderr, "embedded member stopped:", err)
	os.Exit(0)
}

// A member process's exit code when its port was taken, and the line it
// writes once it serves.
const (
	exitPortTaken = 4
	readyLine     = "oncekv-embedded-member-ready"
)

func quietLogger() *zap.Logger { return zap.NewNop() }
