package oldformat

import (
	"context"
	"testing"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// WriteFormat1 writes a database of format 1 at path: idempotency records
// and inbox marks under scope NUL key with expiry indexes, as oncekv kept
// them before the record log. A kv.DB over another DB (which the record
// store does not recognise as bbolt) keeps records in that keyed layout,
// byte for byte as the old code did; the format record is then set back to
// 1. fill writes the records.
func WriteFormat1(t testing.TB, path string, fill func(l *ledger.Ledger, in *inbox.Inbox)) {
	t.Helper()
	inner, err := kv.Open(path, &kv.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	db, err := kv.New(inner, nil) // closes inner
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	l, in := kinds(t, db)
	if l.Stats().Layout != "keyed" {
		t.Fatalf("oldformat: the ledger keeps a %q layout, want keyed", l.Stats().Layout)
	}
	fill(l, in)
	if err := db.Update(context.Background(), func(tx kv.Tx) error { return keyspace.StampFormat(tx, 1) }); err != nil {
		t.Fatal(err)
	}
}

// WriteFormat2 writes a database of format 2 at path: idempotency records
// and inbox marks in the log, none in its tail, as oncekv kept them before
// the tail. The records are written by today's code, the tails' entries
// then moved to the logs (where format 2 wrote every entry, at the same
// positions) and the format record set back to 2. fill writes the records.
func WriteFormat2(t testing.TB, path string, fill func(l *ledger.Ledger, in *inbox.Inbox)) {
	t.Helper()
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	fill(kinds(t, db))
	err = db.Update(context.Background(), func(tx kv.Tx) error {
		for _, name := range []string{"ledger", "inbox"} {
			if err := recstore.FlushTail(tx, recstore.Spec{Name: name}); err != nil {
				return err
			}
			bt, tail := kv.BoltTx(tx), recstore.TailBucket(recstore.Spec{Name: name})
			if bt.Bucket(tail) == nil {
				continue
			}
			if err := bt.DeleteBucket(tail); err != nil {
				return err
			}
		}
		return keyspace.StampFormat(tx, 2)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// kinds returns a ledger and an inbox over db.
func kinds(t testing.TB, db *kv.DB) (*ledger.Ledger, *inbox.Inbox) {
	t.Helper()
	l, err := ledger.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, in
}
