package command

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

func copyFile(t *testing.T, src, dst string, n int) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	if n > 0 {
		b = b[:n]
	}
	require.NoError(t, os.WriteFile(dst, b, 0o600))
}

// Damaged files once crashed the tools: a truncated copy panicked kv.Open
// (exit 2, the usage code) and a garbled freelist panicked keys and stats
// (issue 13, item 11). Each is now exit 1 with a message naming the file.
func TestDamagedFilesAreReportedNotCrashedOn(t *testing.T) {
	t.Parallel()
	src := fixture(t)
	dir := t.TempDir()
	trunc := filepath.Join(dir, "truncated.db")
	copyFile(t, src, trunc, 3*4096)
	for _, cmd := range []string{"check", "keys", "stats", "intents", "sweep"} {
		_, stderr, code := run(cmd, "--db", trunc)
		require.Equal(t, 1, code, "%s: %s", cmd, stderr)
		require.Contains(t, stderr, trunc)
		require.Contains(t, stderr, "is truncated")
	}

	// A garbled freelist page: the meta page says where it is. keys and
	// stats never need the freelist of a read-only file: they may answer;
	// check reads it and must report the damage.
	garbled := filepath.Join(dir, "garbled.db")
	copyFile(t, src, garbled, 0)
	damage(t, garbled, func(raw []byte, meta int) {
		freelist := binary.NativeEndian.Uint64(raw[meta+32:])
		page := raw[freelist*4096 : (freelist+1)*4096]
		for i := range page {
			page[i] = byte(i*131 + 7)
		}
	})
	requireReported(t, garbled, false, "keys", "stats", "check", "sweep")
}

// damage rewrites the file at path through change, which gets its bytes
// and the offset of its newer meta page.
func damage(t *testing.T, path string, change func(raw []byte, meta int)) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	meta := 16 // past the page header
	if binary.NativeEndian.Uint64(raw[4096+16+48:]) > binary.NativeEndian.Uint64(raw[16+48:]) {
		meta += 4096
	}
	change(raw, meta)
	require.NoError(t, os.WriteFile(path, raw, 0o600))
}

// requireReported runs each command on the damaged file at path: none may
// crash (a stack trace, the usage exit code); check and sweep must fail
// (exit 1), naming the file with namesFile (a file Open refuses; check
// reports the problems it finds on its output).
func requireReported(t *testing.T, path string, namesFile bool, cmds ...string) {
	t.Helper()
	for _, cmd := range cmds {
		_, stderr, code := run(cmd, "--db", path)
		require.NotEqual(t, ExitUsage, code, "%s: %s", cmd, stderr)
		require.NotContains(t, stderr, "goroutine ", "no stack trace")
		if cmd == "check" || cmd == "sweep" {
			require.Equal(t, 1, code, "%s: %s", cmd, stderr)
			if namesFile {
				require.Contains(t, stderr, path, "%s names the file", cmd)
			}
		}
	}
}

// A damaged file without a freelist (left by a crash, or written with
// etcd's bbolt settings) once killed any command that opened it for
// writing: bbolt walks such a file in a goroutine of its own, where damage
// is an unrecoverable panic. kv.Open walks it first; check walks it before
// bbolt's check does.
func TestDamagedFileWithoutFreelistIsReportedNotCrashedOn(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nofreelist.db")
	copyFile(t, fixture(t), path, 0)
	kvtest.DropFreelist(t, path)
	damage(t, path, func(raw []byte, meta int) {
		require.Equal(t, ^uint64(0), binary.NativeEndian.Uint64(raw[meta+32:]), "no freelist in the file")
		root := binary.NativeEndian.Uint64(raw[meta+16:])
		binary.NativeEndian.PutUint16(raw[root*4096+10:], 0xFFF0) // the root page claims more elements than fit
	})
	requireReported(t, path, true, "sweep", "check", "keys", "stats")
}

// Maintenance commands once adopted foreign files: sweep turned an empty
// file into a database and added buckets to another application's bbolt
// file, and check called it healthy (issue 13, item 12).
func TestForeignFilesAreRefusedUntouched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	foreign := filepath.Join(dir, "foreign.db")
	b, err := bolt.Open(foreign, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("their-data"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("k"), []byte("v"))
	}))
	require.NoError(t, b.Close())
	before, err := os.ReadFile(foreign)
	require.NoError(t, err)

	for _, cmd := range []string{"sweep", "check", "keys", "stats", "compact"} {
		args := []string{cmd, "--db", empty}
		if cmd == "compact" {
			args = append(args, "--out", filepath.Join(dir, "out-"+cmd+".db"))
		}
		_, stderr, code := run(args...)
		require.Equal(t, 1, code, "%s: %s", cmd, stderr)
		require.Contains(t, stderr, "is empty")
		args[2] = foreign
		_, stderr, code = run(args...)
		require.Equal(t, 1, code, "%s: %s", cmd, stderr)
		require.Contains(t, stderr, "without an oncekv format record")
	}
	fi, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, fi.Size(), "the empty file stayed empty")
	after, err := os.ReadFile(foreign)
	require.NoError(t, err)
	require.Equal(t, before, after, "the foreign file was not modified")
}

// CLI conventions (issue 13, item 13).
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	for _, args := range [][]string{{"nope"}, {"keys", "extra"}, {"version", "x"}, {"sweep", "--db", db, "--batch", "-5"}, {"intents", "requeue"}, {"intents", "resolve", "id", "--state", "pending", "--reason", "x"}} {
		_, stderr, code := run(args...)
		require.Equal(t, ExitUsage, code, "%v: %s", args, stderr)
	}
	out, _, code := run("version")
	require.Equal(t, 0, code)
	require.Regexp(t, `^oncekv \S+.* go1\.\d+`, out)
	out2, _, code := run("--version")
	require.Equal(t, 0, code)
	require.Equal(t, out, out2)

	// compact --out never overwrites and never follows a symlink.
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o600))
	link := filepath.Join(dir, "link.db")
	dangling := filepath.Join(dir, "dangling.db")
	targets := []string{victim}
	if linked(t, victim, link) && linked(t, filepath.Join(dir, "created-through-link"), dangling) {
		targets = append(targets, link, dangling)
	}
	for _, target := range targets {
		_, stderr, code := run("compact", "--db", db, "--out", target)
		require.Equal(t, 1, code, "%s: %s", target, stderr)
	}
	got, _ := os.ReadFile(victim)
	require.Equal(t, "precious", string(got))
	_, err := os.Lstat(filepath.Join(dir, "created-through-link"))
	require.True(t, os.IsNotExist(err), "nothing was created through the dangling link")
}

// A provider's error text with a terminal escape sequence must not reach the
// operator's terminal as one; a corrupt record is shown as corrupt.
func TestStoredTextIsEscapedAndCorruptRecordsShown(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "esc.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	hostile := sideeffect.ProviderFunc{DoFunc: func(context.Context, sideeffect.Call) (sideeffect.Report, error) {
		return sideeffect.Report{State: sideeffect.Failed, Reason: "declined \x1b]0;pwned\x07\x1b[2J"}, nil
	}}
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: hostile}}})
	require.NoError(t, err)
	in, _, err := x.Create(context.Background(), sideeffect.Spec{Kind: "charge", Subject: "order/\x1b[31mred", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	_, err = x.Execute(context.Background(), in.ID)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	out, _, code := run("intents", "--db", path)
	require.Equal(t, 0, code)
	require.NotContains(t, out, "\x1b")
	require.Contains(t, out, `declined \x1b]0;pwned\a\x1b[2J`)

	// Flip a byte of a ledger record: keys shows it as corrupt, with its key.
	src := fixture(t)
	b, err := bolt.Open(src, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		name, k, ok := recstore.Locate(kv.WrapTx(tx), recstore.Spec{Name: "ledger"}, "acme|POST /v1/orders", "create-1")
		require.True(t, ok)
		bk := tx.Bucket(name)
		v := append([]byte(nil), bk.Get(k)...)
		v[len(v)-10] ^= 0xff // in the stored response, not in the key
		return bk.Put(k, v)
	}))
	require.NoError(t, b.Close())
	out, _, code = run("keys", "--db", src)
	require.Equal(t, 0, code)
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "create-1") && strings.HasPrefix(l, "acme") {
			line = l
		}
	}
	require.Contains(t, line, "corrupt")
	require.Contains(t, line, "checksum mismatch")
	out, _, _ = run("keys", "--db", src, "--json")
	var keys []inspect.Key
	require.NoError(t, json.Unmarshal([]byte(out), &keys))
	found := false
	for _, k := range keys {
		if k.Key == "create-1" && k.Scope == "acme|POST /v1/orders" {
			found = true
			require.Equal(t, "corrupt", k.Status)
		}
	}
	require.True(t, found)
}

// Message IDs come from a broker, and response headers from the
// application: printed raw, an escape sequence in one took over the
// operator's terminal, and a newline forged a row (found by
// FuzzCommandsOnGarbledValues). The commands show them escaped. (An
// idempotency key is visible ASCII, or the ledger refuses it; keys and get
// escape it too, for a damaged file.)
func TestHostileIDsAreEscaped(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ids.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	require.NoError(t, err)
	const hostile = "id-\x1b]0;pwned\x07\x1b[2J\nbilling\tforged"
	const shown = `id-\x1b]0;pwned\a\x1b[2J\nbilling\tforged`
	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	_, err = in.Handle(context.Background(), "billing", hostile, func(kv.Tx) error { return nil })
	require.NoError(t, err)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	_, err = l.Do(context.Background(), ledger.Request{Scope: "acme|POST /v1/orders", Key: "k-1", Fingerprint: ledger.Fingerprint{1}},
		func(kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Header: map[string][]string{"X-Note": {hostile}}, Body: []byte("{}")}, nil
		})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	for _, args := range [][]string{{"inbox"}, {"get", "--scope", "acme|POST /v1/orders", "--key", "k-1"}} {
		out, stderr, code := run(append(args, "--db", path)...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.NotContains(t, out, "\x1b", "%v", args)
		require.Contains(t, out, shown, "%v", args)
		require.NotContains(t, out, "\nbilling\tforged", "%v: a newline in an ID makes a row", args)
	}
}

// Operators requeue and resolve parked intents on a stopped service's file.
func TestIntentsRequeueAndResolveOffline(t *testing.T) {
	t.Parallel()
	db := fixture(t)
	out, _, code := run("intents", "--db", db, "--state", "needs_attention", "--json")
	require.Equal(t, 0, code)
	var parked []inspect.Intent
	require.NoError(t, json.Unmarshal([]byte(out), &parked))
	require.Len(t, parked, 1)
	id := parked[0].ID

	out, stderr, code := run("intents", "resolve", "--db", db, id, "--state", "succeeded", "--result", "ch_manual", "--reason", "seen in the provider's dashboard")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "resolution")
	out, _, _ = run("intents", "--db", db, "--json")
	var all []inspect.Intent
	require.NoError(t, json.Unmarshal([]byte(out), &all))
	for _, in := range all {
		if in.ID == id {
			require.Equal(t, "unknown", in.State)
			require.Equal(t, "succeeded", in.Resolution)
		}
	}
	_, stderr, code = run("intents", "requeue", "--db", db, "no-such-intent")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not found")
	_, stderr, code = run("intents", "requeue", "--db", db, id)
	require.Equal(t, 0, code, stderr)
}

// linked makes a symbolic link at link to target, and reports whether it
// could: on Windows links need a privilege, and under Wine a link made
// cannot be seen.
func linked(t *testing.T, target, link string) bool {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		require.Equal(t, "windows", runtime.GOOS, "%v", err)
		return false
	}
	_, err := os.Lstat(link)
	return err == nil
}
