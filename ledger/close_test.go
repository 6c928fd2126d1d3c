package ledger_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// A database closed under a load of Do calls (a shutdown that did not
// wait for its callers) answers every call: with its stored answer, or
// with kv.ErrClosed and nothing written; no other error, no hang. After a
// reopen, exactly the calls that succeeded have their order and their
// record, and a retry of each replays it. bbolt only: a remote backend's
// call that meets the Close fails with its connection's error.
func TestCloseUnderLoadAnswersEveryCall(t *testing.T) {
	t.Parallel()
	l, b := setup(t, nil)
	kvtest.RequireBolt(t, b.db)
	outcomes := kvtest.CloseUnderLoad(t, 8, 11, func(key string) error {
		_, err := l.Do(ctx, req(key, key), order(key, nil))
		return err
	}, b.db.Close)

	ok := map[string]bool{}
	for _, o := range outcomes {
		if o.Err != nil {
			require.True(t, errors.Is(o.Err, kv.ErrClosed), "%s: %v", o.Key, o.Err)
			continue
		}
		ok[o.Key] = true
	}
	require.NotEmpty(t, ok)

	db := kvtest.OpenPath(t, b.path, &kv.Options{NoSync: true, Clock: b.clock}, ledger.RecordKind)
	l2, err := ledger.New(db, nil)
	require.NoError(t, err)
	stored := orders(t, db)
	require.Len(t, stored, len(ok), "an order for each call that succeeded, and no other")
	for key := range ok {
		require.Contains(t, stored, key)
		runs := 0
		res, err := l2.Do(ctx, req(key, key), order(key, &runs))
		require.NoError(t, err)
		require.True(t, res.Replayed, key)
		require.Zero(t, runs)
	}
}
