package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/selfkill"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/sideeffect/providertest/httpprovider"
)

func TestMain(m *testing.M) {
	if os.Getenv("CRASH_DB") != "" {
		os.Exit(child())
	}
	if path := os.Getenv("CRASH_HTTP_DB"); path != "" {
		os.Exit(httpChild(path))
	}
	if path := os.Getenv("CRASH_MIGRATE"); path != "" {
		os.Exit(migrateChild(path))
	}
	if path := os.Getenv("CRASH_REKEY"); path != "" {
		os.Exit(rekeyChild(path))
	}
	goleak.VerifyTestMain(m)
}

// sink is the event destination: it records every delivery.
type sink struct {
	mu     sync.Mutex
	counts map[string]int
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ev struct{ ID string }
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &ev)
	s.mu.Lock()
	s.counts[ev.ID]++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func serveHTTP(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

type harness struct {
	t        *testing.T
	dir      string
	db       string
	acklog   string
	provider *httpprovider.Server
	pdb      *kv.DB
	purl     string
	sink     *sink
	surl     string
	ranges   [][2]int
	next     int
	crashes  map[string]int
	runs     int
}

func newHarness(t *testing.T) *harness {
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, db: filepath.Join(dir, "service.db"), acklog: filepath.Join(dir, "acks.log"),
		sink: &sink{counts: map[string]int{}}, crashes: map[string]int{}}
	var err error
	h.pdb, err = kv.Open(filepath.Join(dir, "provider.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.pdb.Close() })
	// The provider fails before charging 10% of the time and loses the
	// answer after charging 20% of the time: the failure that matters most.
	h.provider = httpprovider.New(h.pdb, httpprovider.Faults{FailRate: 0.1, LoseRate: 0.2}, 7)
	h.purl = serveHTTP(t, h.provider.Handler())
	h.surl = serveHTTP(t, h.sink)
	return h
}

// run starts the workload child; killAfter > 0 kills it after that delay.
func (h *harness) run(fp string, rng [2]int, drain bool, killAfter time.Duration) (killed bool) {
	h.t.Helper()
	var watch func(*os.Process, <-chan struct{}) bool
	if killAfter > 0 {
		watch = func(p *os.Process, exited <-chan struct{}) bool {
			select {
			case <-time.After(killAfter):
				_ = p.Signal(syscall.SIGKILL)
				return true
			case <-exited:
				return false
			}
		}
	}
	return h.runOn(h.db, fp, rng, drain, watch)
}

// runOn starts the workload child on the file db, and watch (if not nil)
// beside it: exited is closed when the child has ended, and watch reports
// whether it killed the child. runOn reports whether the child was
// killed: by watch (then however it ended), or at its failpoint. The
// child commits durably unless db is h.db (SIGKILL leaves the page cache
// to the disk, so a sync would add nothing).
func (h *harness) runOn(db, fp string, rng [2]int, drain bool, watch func(p *os.Process, exited <-chan struct{}) bool) (killed bool) {
	h.t.Helper()
	h.runs++
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CRASH_DB="+db, "CRASH_PROVIDER="+h.purl, "CRASH_SINK="+h.surl, "CRASH_ACKLOG="+h.acklog,
		fmt.Sprintf("CRASH_RANGE=%d:%d", rng[0], rng[1]), "ONCEKV_FAILPOINT="+fp)
	if drain {
		cmd.Env = append(cmd.Env, "CRASH_DRAIN=1")
	}
	if db != h.db {
		cmd.Env = append(cmd.Env, "CRASH_DURABLE=1")
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(h.t, cmd.Start())
	exited, watched := make(chan struct{}), make(chan bool, 1)
	if watch != nil {
		go func() { watched <- watch(cmd.Process, exited) }()
	} else {
		watched <- false
	}
	err := cmd.Wait()
	close(exited)
	if <-watched {
		return true
	}
	if err == nil {
		return false
	}
	_, ok := err.(*exec.ExitError)
	require.True(h.t, ok, "%v", err)
	require.True(h.t, selfkill.Killed(cmd.ProcessState), "child failed: %v\n%s", err, stderr.String())
	return true
}

// check reopens the file as the next process would and runs bbolt's check
// and every oncekv invariant.
func (h *harness) check(after string) {
	h.t.Helper()
	db, err := kv.Open(h.db, &kv.Options{NoSync: true})
	require.NoError(h.t, err, "reopen after %s", after)
	problems, err := db.Check(context.Background(), inspect.Checkers()...)
	require.NoError(h.t, err)
	require.Empty(h.t, problems, "after %s", after)
	require.NoError(h.t, db.Close())
}

// crashAt runs cycles at fp until one crashes there: first at the hit-th
// time the failpoint is reached, then (if that run ended before reaching it
// so often) at the first time. It gives up after five tries.
func (h *harness) crashAt(fp string, hit int) {
	for try := 0; try < 5; try++ {
		if h.cycle(fp, hit, 0) {
			return
		}
		hit = 1
	}
	h.t.Fatalf("failpoint %s never reached", fp)
}

// cycle crashes a fresh range at fp (or at a random moment when fp is
// empty), checks, and restarts the workload on the same range and keys. It
// reports whether the first run crashed.
func (h *harness) cycle(fp string, hit int, kill time.Duration) bool {
	rng := [2]int{h.next, h.next + 3}
	h.next += 3
	h.ranges = append(h.ranges, rng)
	spec := ""
	if fp != "" {
		spec = fmt.Sprintf("%s@%d", fp, hit)
	}
	crashed := h.run(spec, rng, false, kill)
	if crashed {
		name := fp
		if name == "" {
			name = "random"
		}
		h.crashes[name]++
	}
	h.acknowledgedHeld(rng, "crash at "+spec) // before the restart, which would do a lost one again
	h.check("crash at " + spec)
	require.False(h.t, h.run("", rng, false, 0), "the restart must finish its range")
	h.check("restart")
	return crashed
}

// verify compares the final state with the ack log: lost, duplicated and
// unexpected must all be zero.
func (h *harness) verify() (lost, duplicated, unexpected int) {
	expected := map[int]bool{}
	for _, r := range h.ranges {
		for i := r[0]; i < r[1]; i++ {
			expected[i] = true
		}
	}
	acks, err := readAcks(h.acklog)
	require.NoError(h.t, err)
	for i := range expected {
		require.True(h.t, acks[i], "operation %d was never acknowledged", i)
	}
	for i := range acks {
		if !expected[i] {
			unexpected++
		}
	}

	charges, err := h.provider.All(context.Background())
	require.NoError(h.t, err)
	perSubject := map[string][]string{}
	for _, c := range charges {
		perSubject[c.Subject] = append(perSubject[c.Subject], c.ID)
	}
	db, err := kv.Open(h.db, &kv.Options{ReadOnly: true})
	require.NoError(h.t, err)
	defer db.Close()
	get := func(tx kv.Tx, b []byte, k string) string {
		if bk := tx.Bucket(b); bk != nil {
			return string(bk.Get([]byte(k)))
		}
		return ""
	}
	require.NoError(h.t, db.View(context.Background(), func(tx kv.Tx) error {
		for i := range acks {
			order := fmt.Sprintf("order-%d", i)
			cs := perSubject[order]
			switch {
			case len(cs) == 0:
				lost++
				h.t.Logf("lost: %s has no charge", order)
			case len(cs) > 1:
				duplicated++
				h.t.Logf("duplicated: %s charged %v", order, cs)
			case get(tx, ordersB, order) != "paid:"+cs[0]:
				lost++
				h.t.Logf("lost: %s is %q, charged %s", order, get(tx, ordersB, order), cs[0])
			}
			for _, c := range []struct {
				bucket []byte
				key    string
			}{{createdB, order}, {shippedB, order}, {appliedB, fmt.Sprintf("msg-%d", i)}} {
				switch n, _ := strconv.Atoi(get(tx, c.bucket, c.key)); {
				case n == 0:
					lost++
					h.t.Logf("lost: %s %s never applied", c.bucket, c.key)
				case n > 1:
					duplicated++
					h.t.Logf("duplicated: %s %s applied %d times", c.bucket, c.key, n)
				}
			}
			switch n := len(perSubject[fmt.Sprintf("refund-%d", i)]); {
			case n == 0:
				lost++
			case n > 1:
				duplicated++
			}
			h.sink.mu.Lock()
			for _, id := range []string{"paid/" + order, fmt.Sprintf("consumed/msg-%d", i)} {
				if h.sink.counts[id] == 0 {
					lost++
					h.t.Logf("lost: event %s never delivered", id)
				}
			}
			h.sink.mu.Unlock()
		}
		return nil
	}))
	for subject := range perSubject {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimPrefix(subject, "order-"), "refund-"), "%d", &i); err != nil || !expected[i] {
			unexpected++
		}
	}
	return lost, duplicated, unexpected
}

// elsewhere are the failpoints this workload cannot reach, each crashed by
// a test of its own: a migration happens only on a file of an older format
// (TestCrashDuringMigration), a rekey only when a key is retired
// (TestCrashDuringRekey).
var elsewhere = map[string]bool{failpoint.RecstoreMigrated: true, failpoint.RekeyBetweenBatches: true}

func cycles() int {
	if n, err := strconv.Atoi(os.Getenv("ONCEKV_CRASH_CYCLES")); err == nil && n > 0 {
		return n
	}
	return 10
}

// TestCrashAtEveryFailpoint kills the workload at every failpoint, cycles()
// times each (CI: 10; release: 100), plus at random moments, and proves
// nothing acknowledged was lost, nothing was applied or charged twice, and
// nothing unexpected appeared.
func TestCrashAtEveryFailpoint(t *testing.T) {
	if !failpoint.Enabled {
		t.Skip("build with -tags failpoints to crash at failpoints")
	}
	h := newHarness(t)
	n := cycles()
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	for _, fp := range failpoint.All {
		if elsewhere[fp] {
			continue
		}
		for c := 0; c < n; c++ {
			h.crashAt(fp, 1+c%3)
		}
	}
	for c := 0; c < 2*n; c++ {
		h.cycle("", 0, time.Duration(5+rng.IntN(60))*time.Millisecond)
	}
	// A last run drains the reconciler and the relay.
	require.False(t, h.run("", [2]int{0, 0}, true, 0))
	h.check("drain")

	lost, duplicated, unexpected := h.verify()
	total := 0
	for _, fp := range failpoint.All {
		total += h.crashes[fp]
	}
	for fp := range elsewhere {
		h.crashes[fp] = n // crashed by their own test
	}
	charges, _ := h.provider.All(context.Background())
	deliveries := 0
	for _, c := range h.sink.counts {
		deliveries += c
	}
	t.Logf("%d failpoints x %d cycles: %d crashes at failpoints, %d at random moments, %d processes, %d operations, %d provider charges, %d event deliveries for %d events, %s",
		len(failpoint.All), n, total, h.crashes["random"], h.runs, h.next, len(charges), deliveries, len(h.sink.counts), time.Since(start).Round(time.Second))
	t.Logf("lost=%d duplicated=%d unexpected=%d", lost, duplicated, unexpected)
	for _, fp := range failpoint.All {
		require.GreaterOrEqual(t, h.crashes[fp], n, "failpoint %s crashed only %d times", fp, h.crashes[fp])
	}
	require.Zero(t, lost, "lost")
	require.Zero(t, duplicated, "duplicated")
	require.Zero(t, unexpected, "unexpected")
}
