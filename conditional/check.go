package conditional

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/sealing"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
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
	ring := kv.CipherOf(tx)
	if rows != nil {
		c := rows.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := decodeRow(v)
			if err != nil {
				report(fmt.Sprintf("%s: row %q: %v", table, k, err))
				continue
			}
			if r.sealed && ring != nil {
				if err := r.open(ring, table, string(k)); err != nil {
					report(fmt.Sprintf("%s: row %q: sealed value does not open: %v", table, k, err))
				}
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

// Reseal is the tables' part of a rekey (inspect.Rekey): in tx, it visits
// up to limit rows after the cursor after (nil: from the start), in every
// table, and rewrites the sealed values not sealed under ring's current
// key (rows stored in clear stay so: sealing is a table's choice,
// Options.Seal). Its cursor is a table's name and either a NUL and the
// last row ID visited, or 0x01 once that table is done (table names hold
// neither byte); nil when done.
func Reseal(tx kv.Tx, ring *seal.Ring, after []byte, limit int) (next []byte, resealed int, err error) {
	var afterTable string
	var afterID []byte
	tableDone := false
	if i := bytes.IndexByte(after, 0); i >= 0 {
		afterTable, afterID = string(after[:i]), after[i+1:]
	} else if n := len(after); n > 0 && after[n-1] == 1 {
		afterTable, tableDone = string(after[:n-1]), true
	}
	for _, ns := range keyspace.List(tx, tablePrefix) {
		table := tableOf(ns.Bytes())
		if table == "" || (after != nil && (table < afterTable || (table == afterTable && tableDone))) {
			continue
		}
		var from []byte
		if table == afterTable {
			from = afterID
		}
		next, n, err := sealing.Rewrite(ns.Bucket(tx), from, limit, func(k, v []byte) ([]byte, error) {
			r, err := decodeRow(v)
			if err != nil {
				return nil, fmt.Errorf("conditional: %s: row %q: %w", table, k, err)
			}
			if !r.sealed || !sealing.Stale(ring, r.value) {
				return nil, nil
			}
			if err := r.open(ring, table, string(k)); err != nil {
				return nil, fmt.Errorf("conditional: %s: row %q: %w", table, k, err)
			}
			r.value, r.sealed = ring.Seal(nil, r.value, rowAAD(table, string(k))), true
			var e record.Encoder
			return encodeRow(&e, r), nil
		})
		if err != nil {
			return nil, 0, err
		}
		if next == nil {
			return append([]byte(table), 1), n, nil
		}
		return append(append([]byte(table), 0), next...), n, nil
	}
	return nil, 0, nil
}
