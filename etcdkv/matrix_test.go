package etcdkv_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// matrixPackages are the library packages whose own test suites run on
// etcd: unchanged, through kvtest's remote protocol (ONCEKV_TEST_REMOTE).
var matrixPackages = []string{"./ledger", "./conditional", "./inbox", "./outbox", "./sideeffect", "./retention", "./internal/crashtest"}

func init() {
	if p := os.Getenv("ONCEKV_MATRIX_PACKAGES"); p != "" {
		matrixPackages = strings.Split(p, ",")
	}
}

// TestLibrarySuitesOnEtcd runs the test suites of the ledger, conditional,
// inbox, outbox, sideeffect and retention packages, and the ledger's
// porcupine linearizability check (three replicas, restarts), with every
// kvtest database on a fresh etcd backend (a prefix of its own on one
// three-member cluster) — a test matrix, not copies of the tests. Tests
// that need a bbolt file or one writer process skip themselves there
// (kvtest.RequireLocal, RequireBolt).
func TestLibrarySuitesOnEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on six packages")
	}
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var backends []*etcdkv.Backend
	go func() {
		_ = kvtest.Serve(ln, func(name string) (kv.Backend, error) {
			b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: fmt.Sprintf("/matrix/%d/", n.Add(1))})
			if err == nil {
				backends = append(backends, b)
			}
			return b, err
		})
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		for _, b := range backends {
			_ = b.Close()
		}
	})
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"test", "-count=1", "-timeout=5m"}, matrixPackages...)
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
