package ledger_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// garbleKeys are the records FuzzGarbledLogEntry writes: keys one bit
// apart, all answering the same request body, so a damaged identity can
// turn one key's entry into another's.
var garbleKeys = []string{"a", "c", "b"}

const scope = "acme|POST /v1/orders"

// FuzzGarbledLogEntry damages one stored record's log entry (replaced,
// bytes flipped, or cut short), opens the file again and asks for every
// record. Nothing may panic; the check must report the damage; and each
// key's answer must be its own stored response, or an error: never
// another key's response, never a second run of a key whose entry is
// intact, and none at all while the damaged entry still names its key.
func FuzzGarbledLogEntry(f *testing.F) {
	f.Add(uint8(0), uint8(1), uint16(25), []byte{0x02}) // the key "a" becomes "c": one bit
	f.Add(uint8(1), uint8(1), uint16(30), []byte{0xff})
	f.Add(uint8(2), uint8(2), uint16(10), []byte{})
	f.Add(uint8(0), uint8(0), uint16(0), []byte("garbage"))
	f.Fuzz(func(t *testing.T, which, mode uint8, off uint16, data []byte) {
		path := filepath.Join(t.TempDir(), "g.db")
		db, err := kv.Open(path, &kv.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := ledger.New(db, nil)
		if err != nil {
			t.Fatal(err)
		}
		bodies := map[string]string{}
		for _, k := range garbleKeys {
			res, err := l.Do(ctx, req(k, "x"), order("order-"+k, nil))
			if req(k, "x").Scope != scope {
				t.Fatal("the identity's layout below assumes the scope")
			}
			if err != nil {
				t.Fatal(err)
			}
			bodies[k] = string(res.Response.Body)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		bdb, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		changed, named := false, false // named: the damaged entry still names its key
		err = bdb.Update(func(tx *bolt.Tx) error {
			if err := recstore.FlushTail(kv.WrapTx(tx), recstore.Spec{Name: "ledger"}); err != nil {
				return err
			}
			log := tx.Bucket([]byte(record.ReservedPrefix + "ledger.log"))
			var keys, vals [][]byte
			c := log.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				keys, vals = append(keys, bytes.Clone(k)), append(vals, bytes.Clone(v))
			}
			i := int(which) % len(keys)
			v := kvtest.Damage(vals[i], mode, off, data)
			changed = !bytes.Equal(v, vals[i])
			// The entry's identity: a 3-byte header, then the scope and the
			// key, each behind a one-byte length.
			id := 3 + 1 + len(scope) + 1 + 1
			named = len(v) >= id && bytes.Equal(v[:id], vals[i][:id])
			return log.Put(keys[i], v)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := bdb.Close(); err != nil {
			t.Fatal(err)
		}
		if !changed {
			return
		}

		db, err = kv.Open(path, &kv.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		l, err = ledger.New(db, nil)
		if err != nil {
			return // refused with an error: allowed
		}
		problems, err := db.Check(ctx, ledger.RecordKind)
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) == 0 {
			t.Fatal("the check found nothing in a damaged log entry")
		}
		// A listing shows each record under its own key, or the damage:
		// never another key's record (a flipped bit in a stored key).
		listed, damaged := 0, 0
		err = db.View(ctx, func(tx kv.Tx) error {
			listed, damaged = 0, 0
			for r, err := range l.Records(tx, ledger.ListOptions{WithBody: true, IncludeExpired: true}) {
				if err != nil {
					if !errors.Is(err, kv.ErrCorrupt) {
						t.Fatalf("listing: %v, not kv.ErrCorrupt", err)
					}
					damaged++
					continue
				}
				if string(r.Response.Body) != bodies[r.Key] {
					t.Fatalf("listing shows %q with %q, not its own answer %q", r.Key, r.Response.Body, bodies[r.Key])
				}
				listed++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if listed+damaged != len(garbleKeys) {
			t.Fatalf("the listing shows %d records and %d damaged entries, of %d stored", listed, damaged, len(garbleKeys))
		}
		ran := map[string]bool{}
		for _, k := range garbleKeys {
			runs := 0
			res, err := l.Do(ctx, req(k, "x"), order("again-"+k, &runs))
			switch {
			case err != nil:
				if !errors.Is(err, kv.ErrCorrupt) {
					t.Fatalf("%q: %v, not kv.ErrCorrupt", k, err)
				}
			case res.Replayed:
				if got := string(res.Response.Body); got != bodies[k] {
					t.Fatalf("%q replayed %q, not its own answer %q", k, got, bodies[k])
				}
			default:
				ran[k] = true
			}
			if _, err := l.Get(ctx, scope, k); err != nil && !errors.Is(err, kv.ErrCorrupt) && !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("Get %q: %v", k, err)
			}
		}
		if len(ran) > 1 || named && len(ran) > 0 {
			t.Fatalf("damage to one entry (its key intact: %t) ran keys again: %v", named, ran)
		}
	})
}
