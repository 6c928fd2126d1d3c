package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// What runs again and what does not. The server's transient errors, as the
// client returns them (rpctypes.EtcdError), run again: the client retries
// a Get on them by itself but not a Txn, and the registry of prefixes
// reads through a Txn (CI saw a replica's first transaction fail with
// "leader changed" while the cluster was electing). An unknown commit
// never runs again; refusals are final.
func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTimeoutDueToLeaderFail, true},
		{rpctypes.Error(rpctypes.ErrGRPCLeaderChanged), true}, // what the client hands back
		{fmt.Errorf("etcdkv: read the registry of prefixes: %w", rpctypes.ErrLeaderChanged), true},
		{rpctypes.ErrCompacted, true},
		{context.DeadlineExceeded, true},
		{rpctypes.ErrPermissionDenied, false},
		{rpctypes.ErrTooManyOps, false},
		{fmt.Errorf("%w: %w", ErrCommitUnknown, rpctypes.ErrLeaderChanged), false},
		{errors.New("something else"), false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
