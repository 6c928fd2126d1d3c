// Package etcdtest runs real etcd clusters for tests: members embedded in
// the test process (server/v3/embed) on loopback ports, or a member in a
// process of its own that a test can kill with SIGKILL.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	Members []*Member
	dir     string
	spec    string // the initial cluster
}

// Member is one etcd member: embedded, or a child process (Proc).
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string
	Etcd      *embed.Etcd // embedded members
	Proc      *exec.Cmd   // members in a process of their own
	stopped   bool
}

// Options configure a cluster.
type Options struct {
	// Members is the number of members (default 1).
	Members int
	// Process lists the members (by index) that run as child processes
	// of the test binary instead of in-process: a test can SIGKILL them.
	// The test binary's TestMain must call RunMemberIfAsked.
	Process []int
	// Fsync keeps etcd's fsync (off by default in tests: the tests are
	// about correctness; the benchmarks turn it on).
	Fsync bool
}

func freeURL(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return "http://" + ln.Addr().String()
}

// Start starts a cluster and stops it when the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Members == 0 {
		o.Members = 1
	}
	c := &Cluster{t: t, dir: t.TempDir()}
	var spec []string
	for i := range o.Members {
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: freeURL(t), PeerURL: freeURL(t), Dir: filepath.Join(c.dir, fmt.Sprintf("m%d", i))}
		c.Members = append(c.Members, m)
		spec = append(spec, m.Name+"="+m.PeerURL)
	}
	c.spec = strings.Join(spec, ",")
	inProc := map[int]bool{}
	for _, i := range o.Process {
		inProc[i] = true
	}
	ready := make(chan error, o.Members)
	for i, m := range c.Members {
		if inProc[i] {
			c.startProcess(m, o.Fsync)
			go func() { ready <- waitHealthy(m.ClientURL, 30*time.Second) }()
			continue
		}
		go func() {
			e, err := embed.StartEtcd(memberConfig(m, c.spec, o.Fsync))
			if err != nil {
				ready <- err
				return
			}
			m.Etcd = e
			select {
			case <-e.Server.ReadyNotify():
				ready <- nil
			case <-time.After(60 * time.Second):
				ready <- fmt.Errorf("etcdtest: member %s not ready", m.Name)
			}
		}()
	}
	for range o.Members {
		if err := <-ready; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Stop)
	return c
}

func memberConfig(m *Member, spec string, fsync bool) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	pu, _ := url.Parse(m.PeerURL)
	cu, _ := url.Parse(m.ClientURL)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = spec
	cfg.InitialClusterToken = "oncekv-test"
	cfg.LogLevel = "fatal" // Close logs every listener it shuts as an error
	cfg.LogOutputs = []string{"stderr"}
	cfg.UnsafeNoFsync = !fsync
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "10000"
	return cfg
}

// Endpoints returns the members' client URLs, comma-separated.
func (c *Cluster) Endpoints() string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return strings.Join(eps, ",")
}

// Leader returns the member that leads, among the embedded ones still
// running (nil if none knows).
func (c *Cluster) Leader() *Member {
	for _, m := range c.Members {
		if m.Etcd != nil && !m.stopped && m.Etcd.Server.Leader() == m.Etcd.Server.MemberID() {
			return m
		}
	}
	return nil
}

// StopMember stops a member: closes an embedded one, SIGKILLs a process.
func (c *Cluster) StopMember(m *Member) {
	if m.stopped {
		return
	}
	m.stopped = true
	if m.Etcd != nil {
		m.Etcd.Close()
	}
	if m.Proc != nil {
		_ = m.Proc.Process.Signal(syscall.SIGKILL)
		_ = m.Proc.Wait()
	}
}

// Stop stops every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		c.StopMember(m)
	}
}

// A member in a process of its own: the test binary re-executed with
// ONCEKV_ETCD_MEMBER set.
const envMember = "ONCEKV_ETCD_MEMBER"

func (c *Cluster) startProcess(m *Member, fsync bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test binary itself
	cmd.Env = append(os.Environ(), envMember+"="+strings.Join([]string{m.Name, m.Dir, m.PeerURL, m.ClientURL, c.spec, fmt.Sprint(fsync)}, "|"))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	m.Proc = cmd
}

// RunMemberIfAsked runs an etcd member and never returns when this process
// was started as one (Options.Process); call it first in TestMain.
func RunMemberIfAsked() {
	v := os.Getenv(envMember)
	if v == "" {
		return
	}
	f := strings.Split(v, "|")
	m := &Member{Name: f[0], Dir: f[1], PeerURL: f[2], ClientURL: f[3]}
	e, err := embed.StartEtcd(memberConfig(m, f[4], f[5] == "true"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest member:", err)
		os.Exit(3)
	}
	err = <-e.Err() // runs until killed
	fmt.Fprintln(os.Stderr, "etcdtest member stopped:", err)
	os.Exit(0)
}

func waitHealthy(clientURL string, d time.Duration) error {
	deadline := time.Now().Add(d)
	u, _ := url.Parse(clientURL)
	for time.Now().Before(deadline) {
		if conn, err := net.DialTimeout("tcp", u.Host, 200*time.Millisecond); err == nil {
			_ = conn.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond) // a child process has no readiness signal but its listener
	}
	return fmt.Errorf("etcdtest: member at %s did not start", clientURL)
}
