package inspect

import (
	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
)

// RecordKinds returns every kind of record oncekv keeps with a retention,
// for tools that handle any database (the CLI's sweep): idempotency
// records, inbox IDs, published outbox events and finished intents. A
// service passes only the kinds it writes.
func RecordKinds() []kv.RecordKind {
	return []kv.RecordKind{ledger.RecordKind, inbox.RecordKind, outbox.RecordKind, sideeffect.RecordKind}
}

// Checkers returns every consistency check oncekv has: the record kinds'
// and conditional's tables, for kv.DB.Check over any database (the CLI's
// check).
func Checkers() []kv.Checker {
	var out []kv.Checker
	for _, k := range RecordKinds() {
		out = append(out, k)
	}
	return append(out, conditional.Checker)
}
