package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/atomicfile"
	"github.com/oncekv/oncekv/internal/record"
)

// backup --db copies a stopped service's file: the copy lists the same
// records and passes the check. It never replaces a file, says what it
// needs, and a copy that fails the check (a damaged source) is not kept.
func TestBackupOfAFile(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "copy.db")
	stdout, stderr, code := run("backup", "--db", db, "--out", out, "--json")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Bytes   int64 `json:"bytes"`
		Checked bool  `json:"checked"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.True(t, res.Checked)
	fi, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, res.Bytes, fi.Size())
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.Contains(raw, []byte(`{"id":"ord_`)), "control: an unencrypted copy shows its bodies")
	for _, args := range [][]string{{"keys"}, {"intents"}, {"inbox"}, {"outbox"}} {
		listed := func(path string) any {
			stdout, stderr, code := run(append(args, "--db", path, "--json")...)
			require.Equal(t, 0, code, "%v: %s", args, stderr)
			var v any
			require.NoError(t, json.Unmarshal([]byte(stdout), &v))
			if m, ok := v.(map[string]any); ok {
				delete(m, "oldest_age_seconds") // read off the wall clock
			}
			return v
		}
		require.Equal(t, listed(db), listed(out), args)
	}

	_, stderr, code = run("backup", "--db", db, "--out", out)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "exists")
	for _, args := range [][]string{
		{"backup", "--db", db},
		{"backup", "--out", filepath.Join(dir, "x.db")},
		{"backup", "--db", db, "--addr", "http://127.0.0.1:1", "--out", filepath.Join(dir, "x.db")},
		{"backup", "--etcd", "127.0.0.1:2379", "--out", filepath.Join(dir, "x.db")},
	} {
		_, _, code := run(args...)
		require.Equal(t, 2, code, args)
	}

	// A damaged record in the source: the copy fails its check and is
	// not kept.
	damageAnIntent(t, db)
	damaged := filepath.Join(dir, "damaged.db")
	_, stderr, code = run("backup", "--db", db, "--out", damaged)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "fails its check")
	require.Contains(t, stderr, "corrupt")
	_, err = os.Stat(damaged)
	require.ErrorIs(t, err, os.ErrNotExist)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the first copy: no temporary file left")
}

// An encrypted database's copy stays sealed: made and checked without the
// key, it shows no stored body, and opens with the key.
func TestBackupOfAnEncryptedFileStaysSealed(t *testing.T) {
	t.Parallel()
	key1 := keyFile(t, "1")
	db := sealedFixture(t, key1)
	out := filepath.Join(t.TempDir(), "sealed-copy.db")
	_, stderr, code := run("backup", "--db", db, "--out", out)
	require.Equal(t, 0, code, stderr)
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	require.False(t, bytes.Contains(raw, []byte(`{"id":"ord_`)), "a stored body is not readable in the copy")
	stdout, _, code := run("get", "--db", out, "--scope", "acme|POST /v1/orders", "--key", "create-2", "--body")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "encrypted (key id 1)")
	stdout, stderr, code = run("get", "--db", out, "--scope", "acme|POST /v1/orders", "--key", "create-2", "--body", "--key-file", key1)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `{"id":"ord_2"}`)
	_, _, code = run("check", "--db", out, "--key-file", key1)
	require.Equal(t, 0, code)
}

// restore puts a backup in a stopped service's file's place: the file
// then lists what the copy did, the file it replaced is kept beside it,
// and a damaged copy is refused with the file untouched.
func TestRestoreABackup(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	dir := t.TempDir()
	backup := filepath.Join(dir, "backup.db")
	_, stderr, code := run("backup", "--db", db, "--out", backup)
	require.Equal(t, 0, code, stderr)
	atBackup, _, _ := run("keys", "--db", db, "--json")

	// The service goes on after the backup: a key the copy does not hold.
	b, err := bolt.Open(db, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("after the backup"))
		return err
	}))
	require.NoError(t, b.Close())
	before, err := os.ReadFile(db)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(db, 0o640)) // a group that reads it

	stdout, stderr, code := run("restore", "--db", db, "--from", backup, "--json")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Replaced string `json:"replaced"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	require.Contains(t, res.Replaced, db+".replaced-")
	kept, err := os.ReadFile(res.Replaced)
	require.NoError(t, err)
	require.True(t, bytes.Equal(before, kept), "the replaced file is kept as it was")
	restored, err := os.ReadFile(db)
	require.NoError(t, err)
	copied, err := os.ReadFile(backup)
	require.NoError(t, err)
	require.True(t, bytes.Equal(copied, restored), "the file is the copy")
	fi, err := os.Stat(db)
	require.NoError(t, err)
	if runtime.GOOS != "windows" { // which has no such permissions
		require.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "with the replaced file's mode")
	}
	now, _, code := run("keys", "--db", db, "--json")
	require.Equal(t, 0, code)
	require.JSONEq(t, atBackup, now)
	_, _, code = run("check", "--db", db)
	require.Equal(t, 0, code)

	// A damaged copy: refused, the file untouched.
	damaged := filepath.Join(dir, "damaged.db")
	require.NoError(t, os.WriteFile(damaged, copied, 0o600))
	damageAnIntent(t, damaged)
	_, stderr, code = run("restore", "--db", db, "--from", damaged)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "fails its check")
	require.Contains(t, stderr, "untouched")
	after, err := os.ReadFile(db)
	require.NoError(t, err)
	require.True(t, bytes.Equal(restored, after))

	// Into a path with no file yet; and the usage errors.
	fresh := filepath.Join(dir, "fresh.db")
	_, stderr, code = run("restore", "--db", fresh, "--from", backup)
	require.Equal(t, 0, code, stderr)
	got, _, _ := run("keys", "--db", fresh, "--json")
	require.JSONEq(t, atBackup, got)
	for _, args := range [][]string{{"restore", "--db", db}, {"restore", "--from", backup}, {"restore", "--etcd", "127.0.0.1:2379", "--from", backup}} {
		_, _, code := run(args...)
		require.Equal(t, 2, code, args)
	}
}

// oncekv restore killed with SIGKILL at moments spread over its run: the
// file's name holds the old file or the whole copy every time, never a
// part, and the database opens and checks clean. oncekv backup and
// oncekv compact killed the same way leave no file at --out or a whole
// copy that checks clean.
func TestCopiesSurviveSIGKILL(t *testing.T) {
	if raceDetector {
		// One goroutine in a process killed from outside: the race
		// detector has nothing to watch, and its build restores five
		// times slower (24 s for this test).
		t.Skip("the crash test runs in the normal build")
	}
	t.Parallel()
	dir := t.TempDir()
	target := fixture(t)
	old, err := os.ReadFile(target)
	require.NoError(t, err)
	// A copy large enough that restoring it takes a while: 32 MB more.
	big := fixture(t)
	b, err := bolt.Open(big, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("ballast"))
		for i := 0; err == nil && i < 32; i++ {
			err = bk.Put([]byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 1<<20))
		}
		return err
	}))
	require.NoError(t, b.Close())
	copyPath := filepath.Join(dir, "copy.db")
	_, stderr, code := run("backup", "--db", big, "--out", copyPath)
	require.Equal(t, 0, code, stderr)
	copied, err := os.ReadFile(copyPath)
	require.NoError(t, err)

	restore := func(kill time.Duration) { runKilled(t, kill, "restore", "--db", target, "--from", copyPath) }
	// How long a whole restore takes here: the kills spread over it.
	start := time.Now()
	restore(-1)
	whole := time.Since(start)
	require.NoError(t, os.WriteFile(target, old, 0o600))
	var torn, before, after int
	for i := range 12 {
		restore(whole * time.Duration(i) / 10)
		now, err := os.ReadFile(target)
		require.NoError(t, err)
		switch {
		case bytes.Equal(now, old):
			before++
		case bytes.Equal(now, copied):
			after++
			require.NoError(t, os.WriteFile(target, old, 0o600)) // the next round starts from the old file
		default:
			torn++
		}
	}
	t.Logf("a restore takes %v; killed 12 times over 1.1 of that: the old file %d times, the whole copy %d times", whole.Round(time.Millisecond), before, after)
	require.Zero(t, torn, "a part of the copy in the file's place")
	require.Positive(t, before, "some kills came before the copy was in place")

	// oncekv backup and oncekv compact killed the same way: --out holds
	// nothing or a whole copy that checks clean, never a part.
	for _, command := range []string{"backup", "compact"} {
		killedOut(t, dir, command, big)
	}

	restore(-1) // to the end, removing the killed restores' temporary files
	now, err := os.ReadFile(target)
	require.NoError(t, err)
	require.True(t, bytes.Equal(now, copied))
	requireNoLeftovers(t, filepath.Dir(target))
	_, stderr, code = run("check", "--db", target)
	require.Equal(t, 0, code, stderr)
}

// killedOut runs command (backup, compact: a copy of src at --out) to
// its end, then 12 times killed at moments spread over 1.1 of its run,
// and requires each --out to be absent or a whole copy that checks clean.
func killedOut(t *testing.T, dir, command, src string) {
	t.Helper()
	start := time.Now()
	runKilled(t, -1, command, "--db", src, "--out", filepath.Join(dir, command+"-whole.db"))
	whole := time.Since(start)
	var none, kept int
	for i := range 12 {
		out := filepath.Join(dir, fmt.Sprintf("%s-killed-%d.db", command, i))
		runKilled(t, whole*time.Duration(i)/10, command, "--db", src, "--out", out)
		if _, err := os.Stat(out); errors.Is(err, os.ErrNotExist) {
			none++
			continue
		}
		kept++
		_, stderr, code := run("check", "--db", out)
		require.Equal(t, 0, code, "%s killed at %d/10 of its run: %s", command, i, stderr)
	}
	t.Logf("%s takes %v; killed 12 times over 1.1 of that: no file %d times, a whole copy %d times", command, whole.Round(time.Millisecond), none, kept)
	require.Positive(t, none, "some kills came before the copy was in place")
	// The killed runs' temporary files went with the next run, the last
	// one's with this one.
	runKilled(t, -1, command, "--db", src, "--out", filepath.Join(dir, command+"-after.db"))
	requireNoLeftovers(t, dir)
}

// requireNoLeftovers requires that no killed copy's temporary file is
// left in dir, on Linux. On Windows they go once a minute old, after this
// test; elsewhere they are left (README, "Backups and restores").
func requireNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	if runtime.GOOS == "linux" {
		require.Empty(t, leftovers(t, dir))
	} else if left := leftovers(t, dir); len(left) > 0 {
		t.Logf("left, as %s removes them later or never: %v", runtime.GOOS, left)
	}
}

// leftovers lists the temporary files of copies in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.oncekv-*.tmp"))
	require.NoError(t, err)
	return m
}

// runKilled runs the CLI with args as a process of its own and kills it
// with SIGKILL after kill (a negative kill: it runs to its end, which
// must be a success).
func runKilled(t *testing.T, kill time.Duration, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	enc, _ := json.Marshal(args)
	cmd.Env = append(os.Environ(), "RUN_CLI="+string(enc))
	require.NoError(t, cmd.Start())
	if kill < 0 {
		require.NoError(t, cmd.Wait())
		return
	}
	time.Sleep(kill) // the moment of the crash, not a wait for a result
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// damageAnIntent cuts the first intent record of the file at path in half.
func damageAnIntent(t *testing.T, path string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		bk := tx.Bucket([]byte(record.ReservedPrefix + "intent"))
		k, v := bk.Cursor().First()
		return bk.Put(bytes.Clone(k), bytes.Clone(v[:len(v)/2]))
	}))
	require.NoError(t, b.Close())
}

// backup, compact and restore remove the temporary files earlier copies
// left when killed (one is made here as a SIGKILL leaves it: its writer's
// lock gone with the process; TestCopiesSurviveSIGKILL kills real ones),
// and say so on stderr; a file another copy holds stays.
func TestCopiesRemoveLeftovers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux tells a dead copy's file from a live one's")
	}
	t.Parallel()
	src := fixture(t)
	dir := t.TempDir()
	leave := func(name string) string {
		p := filepath.Join(dir, "."+name+".oncekv-42.tmp")
		require.NoError(t, os.WriteFile(p, make([]byte, 1000), 0o600))
		return p
	}
	live, err := atomicfile.Temp(dir, "running.db")
	require.NoError(t, err)
	defer func() { _ = live.Close() }()
	for _, c := range [][]string{
		{"backup", "--db", src, "--out", filepath.Join(dir, "b.db")},
		{"compact", "--db", src, "--out", filepath.Join(dir, "c.db")},
		{"restore", "--db", filepath.Join(dir, "r.db"), "--from", filepath.Join(dir, "b.db")},
	} {
		left := []string{leave(c[0] + "-1.db"), leave(c[0] + "-2.db")}
		_, stderr, code := run(c...)
		require.Equal(t, 0, code, stderr)
		for _, p := range left {
			require.Contains(t, stderr, "removed "+p+" (1000 bytes), left by a copy killed part way")
			require.NoFileExists(t, p)
		}
		require.Contains(t, stderr, "removed 2 such files, 2000 bytes in all", c[0])
		require.FileExists(t, live.Name(), "a running copy's file")
	}
}
