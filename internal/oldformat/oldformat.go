// Package oldformat writes databases the way earlier oncekv formats did, so
// tests can prove that a file written by older code is migrated, never
// misread.
package oldformat

import (
	"context"
	"testing"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
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
	l, err := ledger.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Stats().Layout != "keyed" {
		t.Fatalf("oldformat: the ledger keeps a %q layout, want keyed", l.Stats().Layout)
	}
	fill(l, in)
	if err := db.Update(context.Background(), func(tx kv.Tx) error { return keyspace.StampFormat(tx, 1) }); err != nil {
		t.Fatal(err)
	}
}
