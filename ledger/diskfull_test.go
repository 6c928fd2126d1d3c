package ledger_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/diskfull"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// The disk fills up under a service's load, is freed, fills up again: a
// request either answers with its stored response or fails with an error
// matching syscall.ENOSPC, and its retry, once space returns, runs it or
// replays it. No request runs twice (each has a counter the business write
// increments in its transaction), none is lost, every answer replays byte
// for byte, and the directory never answers for a record a refused commit
// left out of the file (it would replay what was never stored, or refuse
// to run the retry). The file checks clean, before and after a reopen.
func TestDiskFullRunsEachRequestOnce(t *testing.T) {
	t.Parallel()
	dir := diskfull.Mount(t, 2<<20)
	path := filepath.Join(dir, "ledger.db")
	db := kvtest.OpenPath(t, path, nil, ledger.RecordKind) // durable: fsync on every commit
	kvtest.RequireBolt(t, db)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)

	body := func(key string) []byte { // incompressible, as the log stores it
		b := make([]byte, 1500)
		r := rand.NewChaCha8([32]byte([]byte(fmt.Sprintf("%-32s", key))))
		_, _ = r.Read(b)
		return b
	}
	work := func(key string) ledger.Work {
		return func(tx kv.Tx) (ledger.Response, error) {
			if err := kvtest.Increment(tx, "runs", key); err != nil {
				return ledger.Response{}, err
			}
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return ledger.Response{}, err
			}
			return ledger.Response{Status: http.StatusCreated, Body: body(key)}, b.Put([]byte(key), body(key))
		}
	}
	do := func(key string) (ledger.Result, error) { return l.Do(ctx, req(key, key), work(key)) }

	var keys, refused []string
	for round := range 3 {
		free := diskfull.Fill(t, dir, 96<<10) // room for some requests, not for all
		type outcome struct {
			key string
			res ledger.Result
			err error
		}
		outcomes := make(chan outcome, 8*12)
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				for i := range 12 {
					key := fmt.Sprintf("r%d-c%d-%02d", round, c, i)
					res, err := do(key)
					outcomes <- outcome{key, res, err}
				}
			})
		}
		wg.Wait()
		close(outcomes)
		for o := range outcomes {
			keys = append(keys, o.key)
			if o.err != nil {
				require.ErrorIs(t, o.err, syscall.ENOSPC, o.key)
				refused = append(refused, o.key)
				continue
			}
			require.False(t, o.res.Replayed, o.key)
			require.Equal(t, body(o.key), o.res.Response.Body, o.key)
		}
		t.Logf("round %d: %d answered, %d refused", round, 8*12-len(refused), len(refused))
		require.NotEmpty(t, refused, "round %d: the full disk refused nothing", round)
		require.Less(t, len(refused), 8*12, "round %d: the room left took no request", round)
		free()
		// The retries, once space has returned: each runs now, or replays
		// an answer (a refused request never committed, but the retry of a
		// request whose answer was lost on the way would).
		for _, key := range refused {
			res, err := do(key)
			require.NoError(t, err, key)
			require.Equal(t, body(key), res.Response.Body, key)
		}
		refused = refused[:0]
	}

	requireOnce := func() { // over l and db, the reopened ones too
		t.Helper()
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			runs := kvtest.Counters(tx, "runs")
			require.Len(t, runs, len(keys))
			for _, key := range keys {
				require.Equal(t, 1, runs[key], "%s ran %d times", key, runs[key])
			}
			return nil
		}))
		for _, key := range keys {
			res, err := l.Do(ctx, req(key, key), func(kv.Tx) (ledger.Response, error) {
				t.Errorf("%s ran again", key)
				return ledger.Response{}, nil
			})
			require.NoError(t, err, key)
			require.True(t, res.Replayed, key)
			require.Equal(t, body(key), res.Response.Body, key)
		}
	}
	requireOnce()
	kvtest.MustCheck(t, db, ledger.RecordKind)

	require.NoError(t, db.Close())
	db = kvtest.OpenPath(t, path, nil, ledger.RecordKind)
	l, err = ledger.New(db, nil)
	require.NoError(t, err)
	requireOnce()
}
