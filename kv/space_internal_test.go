package kv

import (
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The pause after a commit that failed for lack of space is ten times what
// that commit took in the writer's turn (bbolt's rebuild of its freelist,
// mostly), within its bounds: failing costs the writer a tenth of its time
// at most.
func TestNoSpacePauseIsTenTimesTheFailedCommit(t *testing.T) {
	t.Parallel()
	full := &noSpaceCommit{&os.PathError{Op: "write", Path: "x.db", Err: syscall.ENOSPC}}
	turnAgo := func(d time.Duration) *atomic.Int64 {
		var since atomic.Int64
		since.Store(int64(time.Since(writerEpoch)-d) + 1)
		return &since
	}
	for _, tc := range []struct {
		took, want time.Duration
	}{
		{40 * time.Millisecond, 400 * time.Millisecond},
		{time.Millisecond, 100 * time.Millisecond}, // at least the least
		{2 * time.Second, 5 * time.Second},         // at most the most
	} {
		n := &noSpace{minWait: 100 * time.Millisecond, maxWait: 5 * time.Second}
		dir := t.TempDir()
		before := time.Now()
		n.record(dir, full, turnAgo(tc.took))
		after := time.Now()
		until := time.Unix(0, n.until)
		require.False(t, until.Before(before.Add(tc.want)), "took %v: paused until %v, want %v after %v", tc.took, until, tc.want, before)
		// The time this test took between the two reads counts as the
		// commit's, ten times over.
		require.False(t, until.After(after.Add(tc.want+10*after.Sub(before))), "took %v: paused until %v, want %v after %v", tc.took, until, tc.want, after)
		require.ErrorIs(t, n.refusal("/nonexistent"), syscall.ENOSPC)

		n.record("", nil, turnAgo(0))
		require.NoError(t, n.refusal("/nonexistent"), "a commit ends the pause")
	}
}
