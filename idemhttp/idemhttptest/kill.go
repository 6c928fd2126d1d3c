package idemhttptest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncekv/oncekv/internal/selfkill"
)

// Environment of a KillRestart child process.
const (
	envChild = "ONCEKV_LEDGERTEST_CHILD" // the database path: this process is a child
	envPoint = "ONCEKV_LEDGERTEST_POINT" // the crash point armed in this child
)

var armed = sync.OnceValue(func() string { return os.Getenv(envPoint) })

// Crashpoint marks a place in the service's code where a crash matters —
// after the provider charged and before the commit, between two writes —
// so KillRestart can kill the service exactly there. It does nothing unless
// the process is a KillRestart child armed with that name; then it kills the
// process with SIGKILL (no deferred function, no flush, no close runs;
// TerminateProcess on Windows) and never returns.
func Crashpoint(name string) {
	if name == "" || armed() != name {
		return
	}
	selfkill.Now()
}

// Service is an endpoint that KillRestart runs in child processes.
type Service struct {
	// Open starts the service on the database file at path, in the child
	// process, and returns its handler (the middleware included). The child
	// never closes it: it is killed, or exits when the parent is done.
	Open func(path string) http.Handler
	// Request returns a fresh copy of the one logical request: the same
	// Idempotency-Key and body every time. Its URL's host is replaced.
	Request func() *http.Request
	// Executions counts, from the database file at path, how many times the
	// work took effect (rows written, charges recorded). The parent calls it
	// after the last child has exited.
	Executions func(path string) int
}

// KillRestart proves the endpoint survives a real crash. It re-executes the
// running test binary as a child process serving svc on a fresh database
// file, sends the request, and lets the child kill itself with SIGKILL when
// it reaches Crashpoint(point); then it starts a second child on the same
// file, retries the request with the same key until a final answer, stops
// that child, and requires that the work ran exactly once across both.
//
// Call it from a top-level or sub-test; the child runs the same test, in
// which KillRestart serves instead of driving. The test fails if the child
// never reaches the crash point.
func KillRestart(t *testing.T, svc Service, point string) Answer {
	t.Helper()
	if path := os.Getenv(envChild); path != "" {
		serveChild(svc, path)
		return Answer{} // not reached: serveChild exits
	}
	path := t.TempDir() + "/service.db"
	first := startChild(t, path, point)
	c := &http.Client{Timeout: 30 * time.Second}
	if a, err := send(c, first.url, svc.Request()); err == nil {
		first.stop()
		t.Fatalf("idemhttptest: the request finished (%s) without reaching Crashpoint(%q)", a, point)
	}
	if !first.killed() {
		t.Fatalf("idemhttptest: the child did not die at Crashpoint(%q): %s", point, first.output())
	}
	second := startChild(t, path, "")
	a := settle(t, c, second.url, Target{Request: svc.Request})
	second.stop()
	if got := svc.Executions(path); got != 1 {
		t.Fatalf("idemhttptest: across a SIGKILL at %q and a restart the work ran %d times, want 1 (answer %s)", point, got, a)
	}
	return a
}

// serveChild runs the service on a loopback port, tells the parent its
// address and serves until the parent closes stdin.
func serveChild(svc Service, path string) {
	srv := &http.Server{Handler: svc.Open(path), ReadHeaderTimeout: 10 * time.Second}
	ln, err := listenLoopback()
	if err != nil {
		fmt.Println("idemhttptest-error", err)
		os.Exit(2)
	}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("idemhttptest-ready http://%s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

type child struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	url   string
	mu    sync.Mutex
	out   strings.Builder
	done  chan struct{}
}

// testPattern selects exactly the running test (and subtest) in the child.
func testPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func startChild(t *testing.T, path, point string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", testPattern(t.Name()), "-test.count=1", "-test.v=false") //nolint:gosec // re-executes this very test binary
	cmd.Env = append(os.Environ(), envChild+"="+path, envPoint+"="+point)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("idemhttptest: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("idemhttptest: %v", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("idemhttptest: start child: %v", err)
	}
	c := &child{t: t, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if u, ok := strings.CutPrefix(line, "idemhttptest-ready "); ok {
				ready <- u
				continue
			}
			c.mu.Lock()
			c.out.WriteString(line + "\n")
			c.mu.Unlock()
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	select {
	case c.url = <-ready:
	case <-c.done:
		t.Fatalf("idemhttptest: the child exited before serving: %s", c.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("idemhttptest: the child did not start within 30s: %s", c.output())
	}
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// killed waits for the child to end and reports whether SIGKILL ended it.
func (c *child) killed() bool {
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		return false
	}
	return selfkill.Killed(c.cmd.ProcessState)
}

// stop ends a child by closing its stdin, and waits for it.
func (c *child) stop() {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
