package etcdtest

import (
	"testing"

	"github.com/oncekv/oncekv/etcdkv/embedded"
)

// Options configure a cluster: Dir is the test's temporary directory when
// empty.
type Options = embedded.Options

// Start starts a cluster and stops it when the test ends.
func Start(t testing.TB, o Options) *embedded.Cluster {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c, err := embedded.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// RunMemberIfAsked is embedded.RunMemberIfAsked: call it first in TestMain
// when a test asks for process members.
func RunMemberIfAsked() { embedded.RunMemberIfAsked() }
