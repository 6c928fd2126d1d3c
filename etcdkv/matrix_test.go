package etcdkv_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/embedded"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// matrixPackages are the library packages whose own test suites run on
// etcd: unchanged, through kvtest's remote protocol (ONCEKV_TEST_REMOTE).
var matrixPackages = []string{"./ledger", "./idemhttp", "./conditional", "./inbox", "./outbox", "./sideeffect", "./retention", "./inspect", "./internal/crashtest"}

func init() {
	if p := os.Getenv("ONCEKV_MATRIX_PACKAGES"); p != "" {
		matrixPackages = strings.Split(p, ",")
	}
}

// TestLibrarySuitesOnEtcd runs the test suites of the ledger, idemhttp
// (the middleware), conditional, inbox, outbox, sideeffect, retention and
// inspect (the console, the admin API) packages, and the ledger's
// porcupine linearizability check (three replicas, restarts), with every
// kvtest database on a fresh etcd backend (a prefix of its own on one
// three-member cluster) — a test matrix, not copies of the tests. Tests
// that need a bbolt file or one writer process skip themselves there
// (kvtest.RequireLocal, RequireBolt). With -short (CI's profile) the
// suites run with -short too and shrink their largest fills; make
// etcd-long runs them whole.
func TestLibrarySuitesOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	runSuites(t, c, nil, matrixPackages...)
}

// TestLibrarySuitesWithLostAnswers runs the suites whose work must happen
// once (the ledger, the middleware, the inbox, the outbox, side effects)
// on etcd with the answer of every other commit lost: each such commit is
// settled by its marker, applied or fenced. A function run again after a
// commit that applied, or a commit reported as failed that had applied,
// fails their tests, which count calls and the work in the database.
// Not parallel: it sets a fault for every backend of the process.
func TestLibrarySuitesWithLostAnswers(t *testing.T) {
	lost, restore := etcdkv.LoseAnswers(2)
	defer restore()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	runSuites(t, c, nil, "./ledger", "./idemhttp", "./inbox", "./outbox", "./sideeffect")
	if lost() < 1000 {
		t.Fatalf("%d answers lost: the fault did not reach the suites' commits", lost())
	}
	t.Logf("%d commits settled by their markers", lost())
}

// runSuites runs go test on the library's packages with every kvtest
// database on its own prefix of cluster c; wrap, if set, wraps each
// backend before it is served.
func runSuites(t *testing.T, c *embedded.Cluster, wrap func(name string, b kv.Backend) kv.Backend, args ...string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var mu sync.Mutex
	var backends []*etcdkv.Backend
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = kvtest.Serve(ln, func(name string) (kv.Backend, error) {
			b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: fmt.Sprintf("/matrix/%d/", n.Add(1))})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			backends = append(backends, b)
			mu.Unlock()
			if wrap != nil {
				return wrap(name, b), nil
			}
			return b, nil
		})
	}()
	defer func() {
		_ = ln.Close()
		<-served
		mu.Lock()
		defer mu.Unlock()
		for _, b := range backends {
			_ = b.Close()
		}
	}()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"test", "-count=1", "-timeout=5m"}, args...)
	if testing.Short() {
		args = append(args, "-short")
	}
	if v := os.Getenv("ONCEKV_MATRIX_VERBOSE"); v != "" {
		args = append(args, "-v")
	}
	cmd := exec.Command("go", args...) //nolint:gosec // go test of this repository's packages
	cmd.Dir = root
	cmd.Env = append(os.Environ(), kvtest.EnvRemote+"="+ln.Addr().String())
	out, err := cmd.CombinedOutput()
	t.Logf("go %s (on etcd):\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("the library's suites fail on etcd: %v", err)
	}
}
