package embedded

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/kv/kvtest"
)

func TestMain(m *testing.M) {
	RunMemberIfAsked() // TestStartAgainOnATakenPort runs this binary as a member
	// A member stopped and started again (the example) ends its peer
	// connections (cmux, the HTTP transport) a while after Close, as in
	// package etcdkv: a short drain waits that out, then anything left
	// is a leak.
	kvtest.RunWithoutLeaks(m, 10*time.Second, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
