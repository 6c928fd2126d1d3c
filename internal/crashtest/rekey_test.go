package crashtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

// rekeyRing is the ring of a service rotating from key 1 to key 2 (older
// lists the keys it still opens).
func rekeyRing(current uint32, older ...uint32) *seal.Ring {
	var old []seal.Key
	for _, id := range older {
		old = append(old, sealtest.Key(id))
	}
	r, err := seal.NewRing(sealtest.Key(current), old...)
	if err != nil {
		panic(err)
	}
	return r
}

// rekeyChild rekeys the file to key 2 in batches of 100, as `oncekv rekey`
// and a live service do.
func rekeyChild(path string) int {
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: rekeyRing(2, 1)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	defer func() { _ = db.Close() }()
	if _, err := inspect.Rekey(context.Background(), db, inspect.RekeyOptions{BatchSize: 100}); err != nil {
		fmt.Fprintln(os.Stderr, "rekey:", err)
		return 4
	}
	return 0
}

// TestCrashDuringRekey kills a process rekeying a file between its batches,
// several times, then lets one finish. After every crash each record
// replays its own bytes with the ring holding both keys and the file checks
// clean; at the end the old key is retired and every record still replays.
func TestCrashDuringRekey(t *testing.T) {
	if !failpoint.Enabled {
		t.Skip("build with -tags failpoints to crash at failpoints")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sealed.db")
	const n, events = 1200, 300
	scope := "acme|POST /v1/cards"
	body := func(i int) string { return fmt.Sprintf(`{"card":"4111-%04d"}`, i) }
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: rekeyRing(1)})
	require.NoError(t, err)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	for i := range n {
		_, err := l.Do(ctx, ledger.Request{Scope: scope, Key: fmt.Sprint(i), Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201, Body: []byte(body(i))}, nil })
		require.NoError(t, err)
	}
	ob := outbox.New(db)
	for i := range events {
		_, _, err := ob.Add(ctx, outbox.Event{ID: fmt.Sprint("ev-", i), Topic: "card", Payload: []byte(body(i))})
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	verify := func(ring *seal.Ring) {
		t.Helper()
		db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: ring})
		require.NoError(t, err)
		defer db.Close()
		l, err := ledger.New(db, nil)
		require.NoError(t, err)
		require.Equal(t, n, l.Stats().Records, "every record once")
		for i := range n {
			res, err := l.Do(ctx, ledger.Request{Scope: scope, Key: fmt.Sprint(i), Fingerprint: ledger.Fingerprint{1}},
				func(kv.Tx) (ledger.Response, error) {
					return ledger.Response{}, fmt.Errorf("record %d lost: the work ran again", i)
				})
			require.NoError(t, err)
			require.Equal(t, body(i), string(res.Response.Body))
		}
		seen := 0
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			for ev, err := range outbox.Events(tx, outbox.EventPending) {
				require.NoError(t, err)
				require.False(t, ev.Closed())
				var i int
				_, err := fmt.Sscanf(ev.ID, "ev-%d", &i)
				require.NoError(t, err)
				require.Equal(t, body(i), string(ev.Payload))
				seen++
			}
			return nil
		}))
		require.Equal(t, events, seen)
		problems, err := db.Check(ctx, inspect.Checkers()...)
		require.NoError(t, err)
		require.Empty(t, problems)
	}
	run := func(fp string) bool { return runKillable(t, "CRASH_REKEY="+path, fp) }
	crashes := 0
	for _, hit := range []int{1, 3, 2, 5} {
		if run(fmt.Sprintf("%s@%d", failpoint.RekeyBetweenBatches, hit)) {
			crashes++
		}
		verify(rekeyRing(2, 1))
	}
	require.GreaterOrEqual(t, crashes, 3)
	require.False(t, run(""), "a run without a failpoint finishes the rekey")
	verify(rekeyRing(2)) // key 1 retired
	t.Logf("rekey of %d records and %d events crashed %d times between batches; nothing lost, every value under the new key", n, events, crashes)
}
