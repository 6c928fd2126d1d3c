package ledger

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
)

// UsageRecount is one tenant whose usage counters RecountUsage mended.
type UsageRecount struct {
	Tenant string
	// Was is what the tenant's counters that decode added up to.
	Was Usage
	// Damaged is how many of its counters did not decode; they are gone.
	Damaged int
	// Now is what its records add up to, and what its counters say now.
	Now Usage
}

// RecountUsage counts every tenant's usage again from the records
// themselves and mends what disagrees with them. It returns the tenants it
// changed, in tenant order (none when every count was right).
// kv.DB.Check (oncekv check) reports what it mends; oncekv recount runs it
// on a database or through a running service's admin endpoint.
//
// On bbolt usage is counted in memory, from the records, by the process
// that opened the ledger (Quota): RecountUsage mends this process's
// counts, and removes the counters an older version kept in the file.
// Where no ledger is open in the process there is nothing to mend.
//
// On etcd usage is kept in counters: a counter that does not decode
// (damage: every write of its tenant fails until it is mended) is
// removed, and the difference between the records and what the remaining
// counters say is added to the tenant's first counter; a database that
// never had counters is marked counted.
//
// Each transaction reads every record and mends what it finds, so a
// tenant's records and counters agree when it commits, whatever writes
// run beside it. On bbolt one transaction does it all, holding the writer
// while it reads (0.29 s for a million records on a 2-core machine,
// BenchmarkRecountUsage). On a backend that bounds a transaction's
// operations (kv.Traits.MaxTxOps: etcd) each transaction mends as many
// tenants as fit, and the next reads again; its reads conflict with any
// record written meanwhile, so run it when writes are quiet.
func RecountUsage(ctx context.Context, db *kv.DB) ([]UsageRecount, error) {
	budget := 0 // writes a transaction may carry, none but the bound of the backend
	if m := db.Traits().MaxTxOps; m > 0 {
		budget = max(1, m/2) // the rest for the reads' compares
	}
	var all []UsageRecount
	for {
		var mended []UsageRecount
		var more bool
		err := db.Update(ctx, func(tx kv.Tx) error {
			var err error
			mended, more, err = recountUsageTx(tx, budget)
			return err
		})
		if err != nil {
			return all, err
		}
		all = append(all, mended...)
		if !more {
			slices.SortFunc(all, func(a, b UsageRecount) int { return strings.Compare(a.Tenant, b.Tenant) })
			return all, nil
		}
	}
}

// recountUsageTx is RecountUsage's transaction: it mends, in tenant
// order, the tenants whose counters disagree with their records, until
// their writes would pass budget (0: no bound; the first tenant is mended
// whatever it costs), and reports whether some are left. In the log, it
// mends this process's tally (recountTally).
func recountUsageTx(tx kv.Tx, budget int) (mended []UsageRecount, more bool, err error) {
	if tally, logged := logTally(tx); logged {
		mended, err := recountTally(tx, tally)
		return mended, false, err
	}
	b, err := usageNS.Create(tx)
	if err != nil {
		return nil, false, err
	}
	found := recordedUsage(tx)
	stored := map[string]Usage{}     // what the counters that decode add up to (not clamped)
	damaged := map[string][][]byte{} // the keys of those that do not
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) > 0 && k[0] == 0 {
			continue // markers
		}
		tenant := string(usageTenant(k))
		u, err := decodeUsage(v)
		if err != nil {
			damaged[tenant] = append(damaged[tenant], bytes.Clone(k))
			continue
		}
		s := stored[tenant]
		s = s.plus(u)
		stored[tenant] = s
	}
	all := map[string]bool{} // every tenant with records or counters
	for t := range found {
		all[t] = true
	}
	for t := range stored {
		all[t] = true
	}
	for t := range damaged {
		all[t] = true
	}
	writes := 0
	for _, t := range slices.Sorted(maps.Keys(all)) {
		was, now := stored[t], found[t]
		if was == now && len(damaged[t]) == 0 {
			continue
		}
		cost := len(damaged[t]) + 1
		if budget > 0 && writes > 0 && writes+cost > budget {
			return mended, true, nil // the marker waits for the last transaction
		}
		writes += cost
		for _, k := range damaged[t] {
			if err := b.Delete(k); err != nil {
				return nil, false, err
			}
		}
		if err := addUsage(b, shardKey(t, 0), t, now.Records-was.Records, now.Bytes-was.Bytes); err != nil { // a tenant's counters matter only as a sum
			return nil, false, err
		}
		mended = append(mended, UsageRecount{Tenant: t, Was: was, Damaged: len(damaged[t]), Now: now})
	}
	if b.Get(usageComplete) == nil {
		if err := b.Put(usageComplete, []byte{1}); err != nil {
			return nil, false, err
		}
	}
	return mended, false, nil
}

// recountTally is recountUsageTx in the log: it adds to tally (this
// process's), in tx, what each tenant's records and its count differ by (the
// tally is exact in a write transaction). Without the ledger open in this
// process there is no tally, and nothing to mend: the next open counts the
// records.
func recountTally(tx kv.Tx, tally *recstore.Tally) ([]UsageRecount, error) {
	if err := retireCounters(tx); err != nil {
		return nil, err
	}
	if tally == nil {
		return nil, nil
	}
	found := recordedUsage(tx)
	counted, _ := tally.At(tx)
	var mended []UsageRecount
	for _, t := range slices.Sorted(maps.Keys(found)) {
		if was, now := Usage(counted[t]), found[t]; was != now {
			mended = append(mended, UsageRecount{Tenant: t, Was: was, Now: now})
		}
	}
	for t, c := range counted {
		if _, ok := found[t]; !ok {
			mended = append(mended, UsageRecount{Tenant: t, Was: Usage(c)})
		}
	}
	for _, m := range mended {
		if err := tally.Add(tx, m.Tenant, m.Now.Records-m.Was.Records, m.Now.Bytes-m.Was.Bytes); err != nil {
			return nil, err
		}
	}
	return mended, nil
}

// DropDamaged removes the idempotency record at log position entry when it
// is damaged, as kv.DB.Check reports it ("idempotency log entry ENTRY:
// damaged", or a record that does not decode), and counts the tenants'
// usage again in the same transaction. A damaged record that still names
// its key answers every request with that key with a *RecordError (its
// request never runs again, since whether it ran cannot be read); dropping
// it is the operator's decision that the key may run again: check the
// business state first. An intact record is refused (kv.ErrNotDamaged),
// as is a position without one (kv.ErrNoEntry) and a database that keeps
// records by key (etcd), which has no log positions. oncekv drop runs it on a file or
// through a running service's admin endpoint.
func DropDamaged(ctx context.Context, db *kv.DB, entry uint64) (kv.DroppedEntry, error) {
	var out kv.DroppedEntry
	err := db.Update(ctx, func(tx kv.Tx) error {
		var err error
		if out, err = RecordKind.(*recstore.Kind[*Record]).DropDamaged(tx, entry); err != nil {
			return err
		}
		// A damaged entry was counted by what it says, perhaps under a
		// damaged scope: counting again leaves usage exact.
		_, _, err = recountUsageTx(tx, 0)
		return err
	})
	if err != nil {
		return kv.DroppedEntry{}, err
	}
	return out, nil
}
