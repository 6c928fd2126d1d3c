package command

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// storedValue names one value in oncekv's buckets: the path of nested
// bucket names, then the key.
type storedValue struct {
	buckets [][]byte
	key     []byte
}

// storedValues lists every value (not nested bucket) in oncekv's own
// buckets of the bbolt file at path, in file order.
func storedValues(tb testing.TB, path string) []storedValue {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var out []storedValue
	var walk func(b *bolt.Bucket, names [][]byte)
	walk = func(b *bolt.Bucket, names [][]byte) {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				walk(b.Bucket(k), append(append([][]byte(nil), names...), bytes.Clone(k)))
				continue
			}
			out = append(out, storedValue{buckets: names, key: bytes.Clone(k)})
		}
	}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if bytes.HasPrefix(name, []byte(record.ReservedPrefix)) {
				walk(b, [][]byte{bytes.Clone(name)})
			}
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// FuzzCommandsOnGarbledValues damages one value in oncekv's buckets of the
// fixture (every kind of record: idempotency records, inbox marks, outbox
// events, intents, rows, usage counters) and runs the read-only commands
// and check on the file. None may crash (a stack trace, the usage exit
// code) or print a raw escape sequence from the stored bytes; check must
// not call a file with a damaged record healthy. The web console and the
// admin API then serve the same file (serveDamaged).
func FuzzCommandsOnGarbledValues(f *testing.F) {
	dir, err := os.MkdirTemp("", "oncekv-garble-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := fixture(f)
	clean, err := os.ReadFile(src)
	if err != nil {
		f.Fatal(err)
	}
	values := storedValues(f, src)
	if len(values) < 20 {
		f.Fatalf("the fixture has %d values in oncekv's buckets", len(values))
	}
	f.Add(uint16(0), uint8(1), uint16(20), []byte{0xff})
	f.Add(uint16(3), uint8(0), uint16(0), []byte("\x1b[2J\x1b]0;pwned\x07"))
	f.Add(uint16(7), uint8(2), uint16(5), []byte{})
	f.Add(uint16(12), uint8(1), uint16(0), []byte{0x01})
	f.Fuzz(func(t *testing.T, which uint16, mode uint8, off uint16, data []byte) {
		path := filepath.Join(t.TempDir(), "g.db")
		if err := os.WriteFile(path, clean, 0o600); err != nil {
			t.Fatal(err)
		}
		sv := values[int(which)%len(values)]
		changed, mark := false, false
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(sv.buckets[0])
			for _, n := range sv.buckets[1:] {
				b = b.Bucket(n)
			}
			old := b.Get(sv.key)
			// Time index entries (empty values) and the usage bucket's
			// completion mark count by being there: their bytes are never
			// read, and a check need not see them changed.
			mark = len(old) == 0 || bytes.Equal(sv.key, []byte("\x00complete"))
			v := kvtest.Damage(old, mode, off, data)
			changed = !bytes.Equal(v, old)
			return b.Put(sv.key, v)
		})
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		if !changed {
			return
		}
		for _, args := range [][]string{{"keys"}, {"keys", "--json", "--expired"}, {"stats"}, {"intents"}, {"inbox"}, {"outbox"}, {"get", "--scope", "acme|POST /v1/orders", "--key", "create-1", "--body"}, {"check"}} {
			stdout, stderr, code := run(append(args, "--db", path)...)
			if code == ExitUsage || strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Fatalf("%v on a damaged %q value: exit %d\n%s", args, sv.buckets, code, stderr)
			}
			if strings.ContainsRune(stdout, 0x1b) || strings.ContainsRune(stderr, 0x1b) {
				t.Fatalf("%v printed a raw escape sequence from the damaged %q value:\n%q", args, sv.buckets, stdout+stderr)
			}
			if args[0] == "check" && code == 0 && !mark {
				t.Fatalf("check calls the file healthy after the damage to %q key %q (mode %d):\n%s", sv.buckets, sv.key, mode%3, stdout)
			}
		}
		serveDamaged(t, path, sv)
	})
}

// serveDamaged renders every page of the web console and every read of
// the admin API (with the token: bodies and the full check) from the
// damaged file at path, in process: a panic fails the fuzz target, and
// nothing may answer 5xx without saying why.
func serveDamaged(t *testing.T, path string, sv storedValue) {
	db, err := kv.Open(path, &kv.Options{ReadOnly: true})
	if err != nil {
		return // refused at open: the commands reported it
	}
	defer db.Close()
	h, err := inspect.Handler(db, inspect.HandlerOptions{Token: "fuzz"})
	if err != nil {
		return
	}
	record := "scope=" + url.QueryEscape("acme|POST /v1/orders") + "&key=create-1"
	for _, target := range []string{
		inspect.ConsolePath, inspect.ConsolePath + "keys", inspect.ConsolePath + "record?" + record,
		inspect.ConsolePath + "intents", inspect.ConsolePath + "outbox", inspect.ConsolePath + "inbox",
		"/keys?expired=1", "/get?body=1&" + record, "/intents", "/outbox", "/inbox", "/stats", "/check",
	} {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Host, req.RemoteAddr = "127.0.0.1", "127.0.0.1:40000"
		if !strings.HasPrefix(target, inspect.ConsolePath) {
			req.Header.Set("Authorization", "Bearer fuzz")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && !strings.Contains(rec.Body.String(), "corrupt") && !strings.Contains(rec.Body.String(), "damaged") {
			t.Fatalf("%s on a damaged %q value: %d without a reason\n%s", target, sv.buckets, rec.Code, rec.Body.String())
		}
	}
}
