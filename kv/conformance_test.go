package kv_test

import (
	"path/filepath"
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
