package etcdkv_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfAsked()
	// The embedded etcd servers' connections (cmux, the members' HTTP peer
	// transport) end a while after Close; they are etcd's, not the
	// backend's, which talks gRPC only.
	kvtest.RunWithoutLeaks(m, 0, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/soheilhy/cmux.(*MuxConn).Read"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
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
