package kv_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// sampleFile returns the bytes of kv.WriteSample's database.
func sampleFile(t testing.TB) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sample.db")
	kv.WriteSample(t, path)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return raw
}

func write(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.db")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// A truncated copy once made Open panic (and a service die with SIGBUS);
// now Open compares the meta page's high-water mark with the file size
// first (issue 13, item 11).
func TestOpenRefusesATruncatedFile(t *testing.T) {
	t.Parallel()
	raw := sampleFile(t)
	for _, n := range []int{8192, 3 * 4096, len(raw) / 2} {
		path := write(t, raw[:n])
		for _, ro := range []bool{true, false} {
			_, err := kv.Open(path, &kv.Options{ReadOnly: ro})
			require.ErrorIs(t, err, kv.ErrDamaged, "%d bytes", n)
			require.ErrorContains(t, err, "is truncated")
			require.ErrorContains(t, err, path)
		}
	}
}

// Open and Check never panic on a damaged file: the mutation is a byte
// overwrite, a bit flip or a truncation of a real database.
func FuzzOpenDamagedFile(f *testing.F) {
	raw := sampleFile(f)
	// The freelist's count at 0xFFFF, the real count (2^60) in its first
	// element: once a fatal out-of-memory error.
	_, at := kv.NewestMeta(raw)
	f.Add(uint32(at*4096+10), []byte{0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}, false)
	fuzzOpenDamaged(f, raw)
}

// A damaged file written without bbolt's freelist (NoFreelistSync, as etcd
// writes its files) once crashed the process at a writable Open: bbolt
// walks such a file to find its free pages in a goroutine of its own,
// where a damaged page is a fatal panic. Open now walks it first.
func FuzzOpenDamagedFileWithoutFreelist(f *testing.F) {
	path := write(f, sampleFile(f))
	kvtest.DropFreelist(f, path)
	raw, err := os.ReadFile(path)
	require.NoError(f, err)
	f.Add(uint32(2*4096+20), []byte("garbage garbage garbage"), false)
	f.Add(uint32(3*4096+8), []byte{0x10}, false)
	f.Add(uint32(4*4096+10), []byte{0xff, 0xff, 0xff, 0x7f}, false)
	fuzzOpenDamaged(f, raw)
}

// fuzzOpenDamaged opens copies of the database raw, damaged at one place
// (or truncated there), for reading and for writing, and checks them:
// each must open and check, or fail with an error, never crash.
func fuzzOpenDamaged(f *testing.F, raw []byte) {
	f.Add(uint32(0), []byte{0xff}, false)
	f.Add(uint32(4096+16), []byte{1, 2, 3, 4}, false)
	f.Add(uint32(2*4096+8), []byte{0x10}, false)
	f.Add(uint32(3*4096+20), []byte("garbage garbage garbage"), false)
	f.Add(uint32(5*4096), []byte{0}, true)
	f.Fuzz(func(t *testing.T, off uint32, patch []byte, truncate bool) {
		data := append([]byte(nil), raw...)
		at := int(off) % len(data)
		if truncate {
			data = data[:at]
		} else {
			copy(data[at:], patch)
		}
		path := write(t, data)
		clean := false // a writable open found nothing wrong
		for _, ro := range []bool{true, false} {
			db, err := kv.Open(path, &kv.Options{ReadOnly: ro, NoSync: true, RequireFormat: true})
			if err != nil {
				requireUnlocked(t, path) // a clear error, and nothing left holding the file
				continue
			}
			problems, err := db.Check(ctx)
			clean = !ro && err == nil && len(problems) == 0
			require.NoError(t, db.Close())
		}
		if clean {
			// Close commits (the freelist): a file that checked clean stays so.
			db, err := kv.Open(path, &kv.Options{ReadOnly: true})
			require.NoError(t, err, "a file that checked clean opens again")
			problems, err := db.Check(ctx)
			require.NoError(t, err)
			require.Empty(t, problems, "a file that checked clean is clean after Close")
			require.NoError(t, db.Close())
		}
	})
}

// A freelist page whose header is intact but whose count or IDs are not
// once killed the process or worse: bbolt allocates a slice of whatever
// count it finds (a count of 2^60 is a fatal out-of-memory error, which
// no recover catches), and hands the listed pages to writers (a live page
// listed as free would be overwritten by the next commit). Open refuses
// such a file for writing; Check of a read-only open reports it.
func TestOpenRefusesAGarbledFreelist(t *testing.T) {
	t.Parallel()
	raw := sampleFile(t)
	root, at := kv.NewestMeta(raw)
	// The root of the orders bucket: live, below the root page.
	var orders uint64
	bdb, err := bolt.Open(write(t, raw), 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, bdb.View(func(tx *bolt.Tx) error { orders = uint64(tx.Bucket([]byte("orders")).Root()); return nil }))
	require.NoError(t, bdb.Close())
	require.NotEqual(t, root, orders)

	for _, c := range []struct {
		name      string
		count     uint16
		first     uint64
		open      string // Open for writing refuses it, saying this
		checkSays string // Check of a read-only open reports this
	}{
		{"a count of 2^60 in the first element", 0xFFFF, 1 << 60, "more than fit in it", "more than fit in it"},
		{"a page past the end", 1, 1 << 40, "lists page", "lists page"},
		{"a meta page listed as free", 1, 1, "lists page", "lists page"},
		// The next commit would free the list's page a second time (bbolt
		// panics), or write the new list over the root (found by
		// FuzzOpenDamagedFile: the commit at Close panicked).
		{"the list's own page listed as free", 1, at, "lists its own page", "lists its own page"},
		{"the root page listed as free", 1, root, "is in use, and the freelist lists it as free", "reachable freed"},
		// In range and in order: only a walk of the whole tree sees that
		// the page is in use. Opened for writing, it once was, and Close's
		// commit wrote the new freelist over it: the orders were lost.
		{"a live page below the root listed as free", 1, orders, "is in use, and the freelist lists it as free", "reachable freed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := append([]byte(nil), raw...)
			page := data[at*4096:]
			binary.NativeEndian.PutUint16(page[10:], c.count)
			binary.NativeEndian.PutUint64(page[16:], c.first)
			path := write(t, data)
			_, err := kv.Open(path, &kv.Options{NoSync: true})
			require.ErrorIs(t, err, kv.ErrDamaged)
			require.ErrorContains(t, err, c.open)
			require.ErrorContains(t, err, "freelist")
			requireUnlocked(t, path)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, data, after, "a refused file is not written")

			ro, err := kv.Open(path, &kv.Options{ReadOnly: true})
			require.NoError(t, err, "a reader never loads the freelist")
			problems, err := ro.Check(ctx)
			require.NoError(t, err)
			require.Contains(t, fmt.Sprint(problems), c.checkSays)
			require.NoError(t, ro.Close())
		})
	}
}

// A root page whose element count is garbled made a writable Open panic
// (a slice past the end of the map, while the format record was read):
// the panic escaped Open into the caller. It is now ErrDamaged naming the
// file; a read-only open that gets past it has Check report the page.
func TestOpenRefusesADamagedRootPage(t *testing.T) {
	t.Parallel()
	raw := sampleFile(t)
	root, _ := kv.NewestMeta(raw)
	binary.NativeEndian.PutUint16(raw[root*4096+10:], 0xFFF0)
	path := write(t, raw)

	_, err := kv.Open(path, &kv.Options{NoSync: true})
	require.ErrorIs(t, err, kv.ErrDamaged)
	require.ErrorContains(t, err, path)
	db, err := kv.Open(path, &kv.Options{NoSync: true}) // nothing left locked or registered
	require.ErrorIs(t, err, kv.ErrDamaged)
	require.Nil(t, db)

	ro, err := kv.Open(path, &kv.Options{ReadOnly: true})
	if err != nil {
		require.ErrorIs(t, err, kv.ErrDamaged)
		return
	}
	problems, err := ro.Check(ctx)
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(problems), "more than fit in it")
	require.NoError(t, ro.Close())
}

// Errors that say what happened (issue 13, item 14).
func TestOpenErrorsSayWhatHappened(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := kv.Open(dir, nil)
	require.ErrorIs(t, err, kv.ErrNotDatabase)
	require.ErrorContains(t, err, "is a directory")

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for _, o := range []kv.Options{{ReadOnly: true}, {RequireFormat: true}} {
		_, err = kv.Open(empty, &o)
		require.ErrorIs(t, err, kv.ErrNotDatabase)
		require.ErrorContains(t, err, "is empty (0 bytes)")
	}
	_, err = kv.Open(filepath.Join(dir, "missing.db"), &kv.Options{RequireFormat: true})
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join(dir, "missing.db"))
	require.True(t, os.IsNotExist(err), "RequireFormat never creates")

	garbage := write(t, []byte(strings.Repeat("not bbolt ", 500)))
	_, err = kv.Open(garbage, nil)
	require.ErrorIs(t, err, kv.ErrNotDatabase)
	require.ErrorContains(t, err, "no valid meta page")

	// The same file twice in one process: at once, and named as such.
	path := filepath.Join(dir, "twice.db")
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	for _, ro := range []bool{false, true} {
		_, err = kv.Open(path, &kv.Options{ReadOnly: ro})
		require.ErrorIs(t, err, kv.ErrLocked)
		require.ErrorContains(t, err, "is already open in this process")
	}
	_, err = kv.Open(filepath.Join(dir, ".", "twice.db"), nil)
	require.ErrorContains(t, err, "is already open in this process", "another spelling of the same path")
	require.NoError(t, db.Close())
	db, err = kv.Open(path, nil)
	require.NoError(t, err, "after Close it opens again")
	require.NoError(t, db.Close())

	// Another application's bbolt file: refused untouched with RequireFormat.
	foreign := filepath.Join(dir, "foreign.db")
	b, err := bolt.Open(foreign, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("theirs")); return err }))
	require.NoError(t, b.Close())
	before, _ := os.ReadFile(foreign)
	_, err = kv.Open(foreign, &kv.Options{RequireFormat: true})
	require.ErrorIs(t, err, kv.ErrNotDatabase)
	after, _ := os.ReadFile(foreign)
	require.Equal(t, before, after)
}

// A file without write permission, opened for writing, says so and suggests
// a read-only open. Root ignores permissions, so the open runs in a child
// process as nobody when the test runs as root.
func TestOpenReadOnlyFileForWriting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ro.db")
	db, err := kv.Open(path, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, os.Chmod(path, 0o444))
	if os.Getuid() != 0 {
		_, err := kv.Open(path, nil)
		require.ErrorContains(t, err, "for writing")
		require.ErrorContains(t, err, "open it read-only")
		return
	}
	// The child (nobody) must reach the file and a copy of this binary.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(dir, 0o755))
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, "kv.test")
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(bin, "-test.run", "^TestOpenReadOnlyChild$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KV_RO_CHILD="+path)
	asNobody(cmd)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "child: ok")
}

func TestOpenReadOnlyChild(t *testing.T) {
	path := os.Getenv("KV_RO_CHILD")
	if path == "" {
		t.Skip("runs as the child of TestOpenReadOnlyFileForWriting")
	}
	_, err := kv.Open(path, nil)
	require.ErrorContains(t, err, "for writing")
	require.ErrorContains(t, err, "open it read-only")
	db, err := kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	fmt.Println("child: ok")
}
