package command

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
)

// A real second process holds the database: every command fails fast with
// a message that says how to inspect it live, and --addr against that
// process's admin endpoint returns the same records.
func TestLockedFileAndAddr(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	want, _, code := run("keys", "--db", db, "--json")
	require.Equal(t, 0, code)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOLD_DB="+db, "HOLD_TOKEN=t0ken")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	require.True(t, ok, line)

	for _, args := range [][]string{{"keys"}, {"stats"}, {"check"}, {"intents"}, {"sweep"}} {
		_, stderr, code := run(append(args, "--db", db)...)
		require.Equal(t, 1, code, args)
		require.Contains(t, stderr, "is held by a running process")
		require.Contains(t, stderr, "--addr http://127.0.0.1:8081")
	}

	got, stderr, code := run("keys", "--addr", url, "--json")
	require.Equal(t, 0, code, stderr)
	require.JSONEq(t, want, got)
	out, _, code := run("get", "--addr", url, "--scope", "acme|POST /v1/orders", "--key", "create-1", "--body", "--json")
	require.Equal(t, 0, code)
	var r inspect.Record
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, "redacted", r.BodyEncoding, "the admin endpoint redacts bodies by default")
	require.Empty(t, r.Body)
	table, _, code := run("outbox", "--addr", url)
	require.Equal(t, 0, code)
	require.Contains(t, table, "ev-poison")
	table, _, code = run("stats", "--addr", url)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^writer +idle; 0 writes queued$`, table, "the service's writer")
	_, stderr, code = run("check", "--addr", url)
	require.Equal(t, 1, code, "a full check through the admin endpoint needs the token")
	require.Contains(t, stderr, "admin token")
	_, stderr, code = run("check", "--addr", url, "--token", "t0ken")
	require.Equal(t, 0, code, stderr)
	_, _, code = run("keys", "--addr", url, "--db", db)
	require.Equal(t, 2, code)

	// A backup of the running service: not of its file, and through its
	// endpoint with the token only; the copy lists what the file did.
	copyPath := filepath.Join(t.TempDir(), "live-copy.db")
	_, stderr, code = run("backup", "--db", db, "--out", copyPath)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "oncekv backup --addr")
	_, stderr, code = run("backup", "--addr", url, "--out", copyPath)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "401")
	_, err = os.Stat(copyPath)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, stderr, code = run("backup", "--addr", url, "--token", "t0ken", "--out", copyPath)
	require.Equal(t, 0, code, stderr)
	fromCopy, _, code := run("keys", "--db", copyPath, "--json")
	require.Equal(t, 0, code)
	require.JSONEq(t, want, fromCopy)
	_, stderr, code = run("restore", "--db", db, "--from", copyPath)
	require.Equal(t, 1, code, "never under a running service")
	require.Contains(t, stderr, "stop the service before restoring")
	aside, err := filepath.Glob(db + ".replaced-*")
	require.NoError(t, err)
	require.Empty(t, aside, "the running service's file stays where it is")

	// An operator's action through the running service's endpoint: with
	// its token only, and never with --db beside --addr.
	out, stderr, code = run("intents", "--addr", url, "--state", "needs_attention", "--json")
	require.Equal(t, 0, code, stderr)
	var parked []inspect.Intent
	require.NoError(t, json.Unmarshal([]byte(out), &parked))
	require.Len(t, parked, 1)
	id := parked[0].ID
	_, stderr, code = run("intents", "requeue", "--addr", url, id)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "401")
	_, stderr, code = run("intents", "requeue", "--addr", url, "--db", db, "--token", "t0ken", id)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "not two of them")
	out, stderr, code = run("intents", "requeue", "--addr", url, "--token", "t0ken", id)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `requeued\s+`+id+`[\s\S]*state\s+unknown`, out)
	out, _, code = run("intents", "--addr", url, "--state", "needs_attention")
	require.Equal(t, 0, code)
	require.NotContains(t, out, id, "requeued: no longer parked")
	_, stderr, code = run("recount", "--addr", url)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "401")
	out, stderr, code = run("recount", "--addr", url, "--token", "t0ken")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "ok: every tenant's usage matched its records")
}
