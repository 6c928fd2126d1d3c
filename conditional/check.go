package conditional

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// Checker verifies every table in the database without knowing their value
// types, from what rows store: every row decodes, every index key a row
// stores has an entry pointing back to the row, and every index entry
// points to a row that stores that key. Pass it to kv.DB.Check.
var Checker kv.Checker = tablesChecker{}

type tablesChecker struct{}

func (tablesChecker) Name() string { return "conditional" }

func (tablesChecker) Check(tx kv.Tx, report func(string)) {
	for _, ns := range keyspace.List(tx, tablePrefix) {
		table := tableOf(ns.Bytes())
		if table == "" {
			continue
		}
		checkStructure(tx, table, report)
	}
}

func checkStructure(tx kv.Tx, table string, report func(string)) {
	rows := rowsNamespace(table).Bucket(tx)
	indexes := map[string]kv.Bucket{}
	for _, ns := range keyspace.List(tx, tablePrefix+table+"/idx/") {
		indexes[strings.TrimPrefix(ns.Name(), tablePrefix+table+"/idx/")] = ns.Bucket(tx)
	}
	stored := map[string]storedRow{}
	if rows != nil {
		c := rows.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := decodeRow(v)
			if err != nil {
				report(fmt.Sprintf("%s: row %q: %v", table, k, err))
				continue
			}
			stored[string(k)] = r
			for _, ik := range r.keys {
				ib := indexes[ik.index]
				var owner []byte
				if ib != nil {
					owner = ib.Get(ik.key)
				}
				if !bytes.Equal(owner, k) {
					report(fmt.Sprintf("%s: row %q: index %q entry for key %q points to %q", table, k, ik.index, ik.key, owner))
				}
			}
		}
	}
	for name, ib := range indexes {
		c := ib.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, ok := stored[string(v)]
			if !ok {
				report(fmt.Sprintf("%s: index %q key %q points to missing row %q", table, name, k, v))
				continue
			}
			if got, has := r.keyFor(name); !has || !bytes.Equal(got, k) {
				report(fmt.Sprintf("%s: index %q key %q points to row %q, which has key %q there", table, name, k, v, got))
			}
		}
	}
}

// Check verifies this table in tx, including what only the typed table
// knows: on top of the structural checks of Checker, every row's
// index keys recomputed from its decoded value match the stored keys (an
// index entry's field matches its row) and every indexed row has its entry.
// It returns one message per problem.
func (t *Table[T]) Check(tx kv.Tx) []string {
	var problems []string
	report := func(s string) { problems = append(problems, s) }
	checkStructure(tx, t.name, report)
	for r, err := range t.All(tx) {
		if err != nil {
			report(err.Error())
			continue
		}
		sr, _, _ := t.load(tx, r.ID)
		for _, ix := range t.indexes {
			want, ok := ix.Key(r.Value)
			got, has := sr.keyFor(ix.Name)
			if ok != has || (ok && !bytes.Equal(want, got)) {
				report(fmt.Sprintf("%s: row %q: index %q stores key %q but the value's key is %q", t.name, r.ID, ix.Name, got, want))
			}
		}
	}
	return problems
}
