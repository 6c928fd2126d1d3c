package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"
)

// TestMain doubles as the service and the provider: with CHILD=payments or
// CHILD=provider the test binary runs that program with CHILD_ARGS (JSON),
// so tests drive real processes they can SIGKILL.
func TestMain(m *testing.M) {
	embedded.RunMemberIfAsked() // an etcd member of the replicas tests, in a process of its own
	if child := os.Getenv("CHILD"); child != "" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv("CHILD_ARGS")), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		var err error
		if child == "provider" {
			err = httpprovider.Main(ctx, args, os.Stdout)
		} else {
			err = run(ctx, args, os.Stdout)
		}
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, child+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// The replicas tests' embedded etcd members end their peer
	// connections a few seconds after they close.
	kvtest.RunWithoutLeaks(m, 15*time.Second)
}

type proc struct {
	cmd   *exec.Cmd
	url   string
	lines chan string // stdout after the "listening on" line
}

// waitLine waits for a line of the process's stdout that contains want.
func (p *proc) waitLine(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "the process exited before printing %q", want)
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line with %q", want)
		}
	}
}

// start runs the test binary as child with args and waits for its
// "listening on" line.
func start(t *testing.T, child string, args ...string) *proc {
	t.Helper()
	enc, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CHILD="+child, "CHILD_ARGS="+string(enc))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, lines: make(chan string, 256)}
	t.Cleanup(func() { p.kill() })
	lines := bufio.NewScanner(out)
	ready := make(chan string, 1)
	go func() {
		defer close(p.lines)
		listening := false
		for lines.Scan() {
			if _, rest, ok := strings.Cut(lines.Text(), "listening on "); ok && !listening {
				listening = true
				ready <- strings.Fields(rest)[0]
				close(ready)
				continue
			}
			select {
			case p.lines <- lines.Text():
			default: // nobody reads them: drop
			}
		}
		if !listening {
			close(ready)
		}
	}()
	select {
	case u, ok := <-ready:
		require.True(t, ok, "%s exited before listening", child)
		p.url = u
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start", child)
	}
	return p
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
	}
}

// stop ends the process with SIGTERM and requires a clean exit.
func (p *proc) stop(t *testing.T) {
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.cmd.Wait())
}

// service starts the provider and the service as separate processes.
func service(t *testing.T, providerArgs ...string) (svc, prov *proc, dir string) {
	dir = t.TempDir()
	prov = start(t, "provider", append([]string{"-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "provider.db"), "-seed", "7"}, providerArgs...)...)
	svc = start(t, "payments", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "payments.db"), "-provider", prov.url)
	return svc, prov, dir
}

type reply struct {
	Status int
	Header http.Header
	Body   string
}

func (r reply) json(t *testing.T) map[string]any {
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Body), &m), r.Body)
	return m
}

var client = &http.Client{Timeout: 20 * time.Second}

func do(t *testing.T, method, url, apiKey, key, body string) reply {
	t.Helper()
	r, err := try(method, url, apiKey, key, body)
	require.NoError(t, err)
	return r
}

func try(method, url, apiKey, key, body string) (reply, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}, err
}

// untilFinal POSTs to url as acme with the key until it gets a final
// answer, riding out a service's deaths (connection refused or reset) and
// its 409, 502 and 503 (a provider's lost answer), for 90 seconds at most.
func untilFinal(t *testing.T, url, key, body string) reply {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		r, err := try("POST", url, acme, key, body)
		if err == nil && r.Status != 409 && r.Status < 500 {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("%s %s: no final answer", url, key)
	return reply{}
}

func charges(t *testing.T, providerURL string) []httpprovider.Charge {
	r := do(t, "GET", providerURL+"/v1/charges", "", "", "")
	require.Equal(t, 200, r.Status)
	var cs []httpprovider.Charge
	require.NoError(t, json.Unmarshal([]byte(r.Body), &cs))
	return cs
}

func orderBody(ref string, amount int, ts string) string {
	return fmt.Sprintf(`{"external_ref":%q,"amount_cents":%d,"currency":"eur","client_ts":%q,"request_id":"req-%s"}`, ref, amount, ts, ts)
}
