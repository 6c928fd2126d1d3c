package kvtest_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv/kvtest"
)

// CloseUnderLoad closes once every worker is warm, a worker that stops
// before it is warm included (it used to wait for it for ever), and returns
// every call's outcome, each worker's last one its error.
func TestCloseUnderLoad(t *testing.T) {
	t.Parallel()
	errClosed, errEarly := errors.New("closed"), errors.New("early")
	var closed atomic.Bool
	outcomes := kvtest.CloseUnderLoad(t, 3, 5, func(key string) error {
		switch {
		case strings.HasPrefix(key, "w0-"):
			return errEarly // stops at its first call
		case closed.Load():
			return errClosed
		}
		return nil
	}, func() error { closed.Store(true); return nil })
	last := map[string]error{}
	calls := map[string]int{}
	for _, o := range outcomes {
		w := o.Key[:strings.IndexByte(o.Key, '-')]
		calls[w]++
		last[w] = o.Err
	}
	require.Equal(t, 1, calls["w0"])
	require.ErrorIs(t, last["w0"], errEarly)
	for _, w := range []string{"w1", "w2"} {
		require.GreaterOrEqual(t, calls[w], 6, "%s: warm, then one call after the close at least", w)
		require.ErrorIs(t, last[w], errClosed)
	}
}
