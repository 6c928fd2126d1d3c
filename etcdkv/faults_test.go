package etcdkv_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
)

// countingBackend counts the write transactions run on it.
type countingBackend struct {
	kv.Backend
	n *atomic.Int64
}

func (b countingBackend) Update(ctx context.Context, fn func(kv.Tx) error) error {
	b.n.Add(1)
	return b.Backend.Update(ctx, fn)
}

// TestLedgerLinearizableThroughEtcdFaults runs the ledger's porcupine
// linearizability check (three replicas of the ledger, duplicate requests,
// claims taken over, stale completions) on a three-member cluster while
// the cluster loses its leader twice: an embedded leader closed, then a
// leader running as its own process SIGKILLed, each restarted later. The
// history stays linearizable (nothing lost, nothing applied twice, no
// replay of another body) and the members hold identical data afterwards.
func TestLedgerLinearizableThroughEtcdFaults(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, Process: []int{2}})
	embeddedMember, processMember := c.Members[0], c.Members[2]
	var updates atomic.Int64
	stop := make(chan struct{})
	faults := make(chan []string, 1)
	go func() {
		var done []string
		defer func() { faults <- done }()
		ctx := context.Background()
		at := func(n int64) bool {
			for updates.Load() < n {
				select {
				case <-stop:
					return false
				case <-time.After(2 * time.Millisecond):
				}
			}
			return true
		}
		step := func(what string, err error) {
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
			done = append(done, what)
		}
		if !at(150) {
			return
		}
		step("move the leadership to embedded "+embeddedMember.Name, c.MoveLeader(ctx, embeddedMember))
		c.StopMember(embeddedMember)
		step("close the leader "+embeddedMember.Name, nil)
		if !at(400) {
			return
		}
		step("restart "+embeddedMember.Name, c.RestartMember(embeddedMember))
		step("move the leadership to process "+processMember.Name, c.MoveLeader(ctx, processMember))
		c.StopMember(processMember)
		step("SIGKILL the leader "+processMember.Name, nil)
		if !at(650) {
			return
		}
		step("restart "+processMember.Name, c.RestartMember(processMember))
	}()
	runSuites(t, c, func(name string, b kv.Backend) kv.Backend {
		if strings.HasSuffix(name, "lin.db") {
			return countingBackend{b, &updates}
		}
		return b
	}, "-run", "^TestLedgerIsLinearizable$", "./internal/crashtest")
	close(stop)
	done := <-faults
	t.Logf("%d write transactions; faults: %s", updates.Load(), strings.Join(done, "; "))
	if len(done) != 6 {
		t.Fatalf("the faults did not all happen while the ledger ran (%d write transactions)", updates.Load())
	}
	for _, m := range c.Members {
		if !c.Running(m) {
			if err := c.RestartMember(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Identical(ctx); err != nil {
		t.Fatal(err)
	}
}
