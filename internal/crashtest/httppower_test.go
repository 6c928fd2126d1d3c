package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// The service of TestHTTPPowerLoss: POST /orders behind the idempotency
// middleware, durable. Each order gets a new random ID, so a request run
// twice answers differently: a client that was given an ID must be given
// the same one ever after.
var httpOrdersB = []byte("http-orders")

// httpChild serves the service on the database at path until it is
// killed, printing its address first.
func httpChild(path string) int {
	db, err := kv.Open(path, &kv.Options{LockTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	l, err := ledger.New(db, &ledger.Config{RecoverOrphans: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		return 3
	}
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "middleware:", err)
		return 3
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx(r.Context())
		b, err := tx.CreateBucketIfNotExists(httpOrdersB)
		if err == nil {
			id := uuid.NewString()
			if err = b.Put([]byte(id), []byte(r.Header.Get("Idempotency-Key"))); err == nil {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = fmt.Fprintf(w, `{"id":%q}`, id)
				return
			}
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 3
	}
	fmt.Println(ln.Addr().String())
	_ = (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
	return 4
}

// TestHTTPPowerLoss cuts the power under an HTTP service behind the
// idempotency middleware, durable on powercut's filesystem, while clients
// send every request twice at once and retry: the answers a client was
// given are what the disk holds. After each cut the service restarts on
// what the cut left and every request of the cycle is sent again: one the
// client had an answer for replays that answer byte for byte (the same
// order ID; a request run twice would get a new one), and at the end each
// request made exactly one order.
func TestHTTPPowerLoss(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state-0")
	require.NoError(t, os.Mkdir(state, 0o700))
	db := filepath.Join(state, "service.db")
	rng := rand.New(rand.NewPCG(11, 12))
	answered := map[string]string{} // key → the body a client was given
	var keys []string
	during, early := 0, 0
	n := 2 * cycles()
	for c := 1; c <= n; c++ {
		mnt := t.TempDir()
		pc := kvtest.MountPowerDisk(t, bin, mnt, state)
		out := filepath.Join(dir, fmt.Sprintf("state-%d", c))
		cut := kvtest.PlanCut(c, rng, out, 40, 30*time.Millisecond)
		svc := startHTTPChild(t, filepath.Join(mnt, "service.db"))
		cycleKeys := make([]string, 24)
		for i := range cycleKeys {
			cycleKeys[i] = fmt.Sprintf("order-%d-%d", c, i)
		}
		keys = append(keys, cycleKeys...)
		sent := make(chan struct{})
		var answers map[string]string
		var sendErr error
		go func() { answers, sendErr = sendAll(svc.url, cycleKeys, 4); close(sent) }() // until the power goes
		account, _, err := pc.CutWhile(cut, sent)
		require.NoError(t, err)
		svc.kill()
		<-sent
		require.NoError(t, sendErr)
		pc.Unmount()
		if len(answers) > 0 {
			during++
		}
		if len(answers) < len(cycleKeys) {
			early++
		}
		for k, body := range answers {
			answered[k] = body
		}

		state = out
		db = filepath.Join(state, "service.db")
		svc = startHTTPChild(t, db)
		for _, k := range cycleKeys {
			status, body, replayed, err := post(svc.url, k)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status, "%s after the cut: %s", k, body)
			if want, ok := answered[k]; ok {
				require.Equal(t, want, body, "%s was answered before the cut (%s), and answers otherwise after it: the answer was lost", k, account)
				require.True(t, replayed, "%s: a replay", k)
			}
			answered[k] = body
		}
		svc.kill()
	}
	ids := map[string][]string{} // key → its orders' IDs
	d, err := kv.Open(db, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, d.View(context.Background(), func(tx kv.Tx) error {
		clear(ids)
		b := tx.Bucket(httpOrdersB)
		require.NotNil(t, b)
		c := b.Cursor()
		for id, k := c.First(); id != nil; id, k = c.Next() {
			ids[string(k)] = append(ids[string(k)], string(id))
		}
		return nil
	}))
	require.NoError(t, d.Close())
	for _, k := range keys {
		var body struct{ ID string }
		require.NoError(t, json.Unmarshal([]byte(answered[k]), &body))
		require.Equal(t, []string{body.ID}, ids[k], "%s: one order, the one its client was given", k)
	}
	t.Logf("%d power cuts, %d after some answers and %d before every request was answered; %d requests, each with one order and its first answer", n, during, early, len(keys))
	require.Positive(t, during)
	require.Positive(t, early)
}

// httpService is a running httpChild.
type httpService struct {
	url  string
	cmd  *exec.Cmd
	kill func()
}

// startHTTPChild starts the service on the database at path.
func startHTTPChild(t *testing.T, path string) *httpService {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CRASH_HTTP_DB="+path)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = testWriter{t}
	require.NoError(t, cmd.Start())
	once := sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	t.Cleanup(once)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the service did not start")
	return &httpService{url: "http://" + strings.TrimSpace(line) + "/orders", cmd: cmd, kill: once}
}

// sendAll sends each key's request from workers goroutines, twice at
// once, again after a 409 or a 5xx, until one is answered 201 or the
// service stops answering. It returns the answered keys' bodies, and an
// error if the two copies of one were answered with different bodies.
func sendAll(url string, keys []string, workers int) (map[string]string, error) {
	var mu sync.Mutex
	answers := map[string]string{}
	var problems []error
	work := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range work {
				body, ok, err := sendTwice(url, k)
				mu.Lock()
				if err != nil {
					problems = append(problems, err)
				} else if ok {
					answers[k] = body
				}
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return answers, errors.Join(problems...)
}

// sendTwice sends key's request twice, the second copy up to 4 ms after
// the first, until one copy gets a 201;
// ok is false once the service stops answering.
func sendTwice(url, key string) (body string, ok bool, err error) {
	for {
		type answer struct {
			status int
			body   string
			err    error
		}
		var a [2]answer
		var wg sync.WaitGroup
		for i := range a {
			wg.Go(func() {
				if i == 1 { // the copy of a retry: it may meet the first's commit, or join it
					time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond) //nolint:gosec // timing dice
				}
				a[i].status, a[i].body, _, a[i].err = post(url, key)
			})
		}
		wg.Wait()
		var created []string
		for _, x := range a {
			if x.err != nil {
				return "", false, nil // the service is gone (killed after the cut)
			}
			if x.status == http.StatusCreated {
				created = append(created, x.body)
			}
		}
		if len(created) == 2 && created[0] != created[1] {
			return "", false, fmt.Errorf("%s answered twice, differently: %s and %s", key, created[0], created[1])
		}
		if len(created) > 0 {
			return created[0], true, nil
		}
		time.Sleep(2 * time.Millisecond) // 409 (the other copy is running) or 503 (the disk failed): retry
	}
}

// post sends key's request once.
func post(url, key string) (status int, body string, replayed bool, err error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"item":"book"}`))
	if err != nil {
		return 0, "", false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get(idemhttp.HeaderReplayed) == "true", err
}
