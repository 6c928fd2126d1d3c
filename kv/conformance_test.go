package kv_test

import (
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// The embedded bbolt backend passes the public conformance suite, the one
// every backend must pass unchanged. The file is mapped large enough up
// front: bbolt's writer waits for open readers when it must grow the map,
// which the snapshot test would otherwise meet.
func TestBoltConformance(t *testing.T) {
	t.Parallel()
	kvtest.RunConformance(t, func(t testing.TB) kv.Backend {
		db, err := kv.Open(filepath.Join(t.TempDir(), "conformance.db"), &kv.Options{NoSync: true, InitialMmapSize: 16 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return db // a *kv.DB is itself a Backend, over the bbolt one
	})
}

// The remote protocol of the test matrix is itself a backend that passes
// the suite: here it serves bbolt files.
func TestRemoteConformance(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var mu sync.Mutex
	var dbs []*kv.DB
	go func() {
		_ = kvtest.Serve(ln, func(name string) (kv.Backend, error) {
			db, err := kv.Open(filepath.Join(dir, fmt.Sprintf("r%d.db", len(dbs))), &kv.Options{NoSync: true, InitialMmapSize: 16 << 20})
			mu.Lock()
			dbs = append(dbs, db)
			mu.Unlock()
			return db, err
		})
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, db := range dbs {
			_ = db.Close()
		}
	})
	n := 0
	kvtest.RunConformance(t, func(t testing.TB) kv.Backend {
		n++
		b, err := kvtest.RemoteBackend(ln.Addr().String(), fmt.Sprintf("remote-%d", n))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
