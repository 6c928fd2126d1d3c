package etcdkv_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfAsked()
	// The embedded etcd members end their peer connections (cmux, the
	// HTTP transport) a while after Close: a short drain waits that out,
	// then anything left is a leak. opencensus's worker is a package
	// global of etcd's dependencies, started once per process.
	kvtest.RunWithoutLeaks(m, 10*time.Second, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

var prefixes atomic.Int64

// The etcd backend passes the public conformance suite unchanged, against
// a real three-member cluster.
func TestConformance(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	kvtest.RunConformance(t, func(t testing.TB) kv.Backend {
		b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: fmt.Sprintf("/conf/%d/", prefixes.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}
