package ledger_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/syncfault"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// A request whose commit's sync fails after the meta page was written (a
// disk that failed the write-back, injected by strace) runs once, however
// often it is retried. The process goes on from that commit while the
// disk may not hold it; before the database refused calls after such a
// failure, the ledger took the failed commit's record out of its key
// directory, and the retry in the same process ran the work a second time
// on top of the first (a second charge), which the disk then kept. Now
// the first attempt's error says the outcome is unknown, the retries in
// that process are refused without running anything, and after a reopen
// the retry is answered from the disk: replayed here, where the page
// cache kept the commit.
func TestSyncFailedRequestRunsOnce(t *testing.T) {
	work := func(tx kv.Tx) (ledger.Response, error) {
		return ledger.Response{Status: http.StatusCreated, Body: []byte("charged")}, kvtest.Increment(tx, "runs", "k1")
	}
	if syncfault.Child() {
		db, err := kv.Open(os.Getenv("LEDGER_SYNCFAIL_PATH"), nil)
		require.NoError(t, err)
		l, err := ledger.New(db, nil)
		require.NoError(t, err)
		_, err = l.Do(ctx, req("k1", "k1"), work) // syncs 1 and 2 (its meta page, failed)
		require.ErrorIs(t, err, kv.ErrCommitUnknown)
		for range 3 {
			_, err = l.Do(ctx, req("k1", "k1"), func(tx kv.Tx) (ledger.Response, error) {
				t.Error("the retry ran the work again")
				return work(tx)
			})
			require.ErrorIs(t, err, kv.ErrSyncFailed)
		}
		require.NoError(t, db.Close())
		return
	}

	path := filepath.Join(t.TempDir(), "ledger.db")
	db := kvtest.OpenPath(t, path, nil, ledger.RecordKind)
	kvtest.RequireBolt(t, db)
	_, err := ledger.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	syncfault.Run(t, "2", "LEDGER_SYNCFAIL_PATH="+path)

	db = kvtest.OpenPath(t, path, nil, ledger.RecordKind)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	res, err := l.Do(ctx, req("k1", "k1"), work)
	require.NoError(t, err)
	require.True(t, res.Replayed, "the disk held the commit: the retry replays it")
	require.Equal(t, "charged", string(res.Response.Body))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Equal(t, 1, kvtest.Counter(tx, "runs", "k1"))
		return nil
	}))
}
