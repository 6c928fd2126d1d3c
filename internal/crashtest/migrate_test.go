package crashtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/oldformat"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/internal/selfkill"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// migrateChild opens a database as a service would at start: the ledger
// and the inbox migrate an older file before anything else.
func migrateChild(path string) int {
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 3
	}
	defer func() { _ = db.Close() }()
	if _, err := ledger.New(db, nil); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		return 4
	}
	if _, err := inbox.New(db, nil); err != nil {
		fmt.Fprintln(os.Stderr, "inbox:", err)
		return 5
	}
	return 0
}

// runKillable runs this test binary as a child with env set and the
// failpoint fp armed ("" for none). It reports whether the child was
// SIGKILLed at the failpoint; any other failure fails t.
func runKillable(t *testing.T, env, fp string) (killed bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env, "ONCEKV_FAILPOINT="+fp)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return false
	}
	require.True(t, selfkill.Killed(cmd.ProcessState), "child failed: %v\n%s", err, out)
	return true
}

// TestCrashDuringMigration kills a process migrating a format-1 file
// between its batches, several times, then lets one finish: every record
// answers exactly as before, none is lost or doubled, the file checks
// clean, and the format was raised before the first record moved.
func TestCrashDuringMigration(t *testing.T) {
	if !failpoint.Enabled {
		t.Skip("build with -tags failpoints to crash at failpoints")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	const n = 3500 // four batches
	scope := "acme|POST /v1/orders"
	oldformat.WriteFormat1(t, path, func(l *ledger.Ledger, in *inbox.Inbox) {
		for i := range n {
			_, err := l.Do(ctx, ledger.Request{Scope: scope, Key: fmt.Sprint(i), Fingerprint: ledger.Fingerprint{1}},
				func(kv.Tx) (ledger.Response, error) {
					return ledger.Response{Status: 201, Body: []byte(fmt.Sprint(i))}, nil
				})
			require.NoError(t, err)
		}
		for i := range 1500 {
			_, err := in.Handle(ctx, "billing", fmt.Sprint(i), func(kv.Tx) error { return nil })
			require.NoError(t, err)
		}
	})
	run := func(fp string) bool { return runKillable(t, "CRASH_MIGRATE="+path, fp) }
	crashes := 0
	for _, hit := range []int{1, 1, 2, 1} { // batches of ledger, then of the inbox
		if run(fmt.Sprintf("%s@%d", failpoint.RecstoreMigrated, hit)) {
			crashes++
		}
		db, err := kv.Open(path, &kv.Options{ReadOnly: true})
		require.NoError(t, err)
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			v, err := keyspace.StoredFormat(tx)
			require.Equal(t, uint32(recstore.TailFormat), v, "the format is raised before the first record moves")
			return err
		}))
		require.NoError(t, db.Close())
	}
	require.GreaterOrEqual(t, crashes, 3)
	require.False(t, run(""), "a run without a failpoint finishes the migration")

	db, err := kv.Open(path, &kv.Options{NoSync: true})
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
		require.Equal(t, fmt.Sprint(i), string(res.Response.Body))
	}
	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	for i := range 1500 {
		seen, err := in.Seen(ctx, "billing", fmt.Sprint(i))
		require.NoError(t, err)
		require.True(t, seen, "inbox mark %d", i)
	}
	problems, err := db.Check(ctx, inspect.Checkers()...)
	require.NoError(t, err)
	require.Empty(t, problems)
	t.Logf("migration of %d records and %d marks crashed %d times between batches; nothing lost or doubled", n, 1500, crashes)
}
