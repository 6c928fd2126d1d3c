package ledger

import (
	"bytes"
	"context"
	"maps"
	"slices"

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
// themselves and mends the counters that disagree with them, in one
// write transaction: a counter that does not decode (a damaged file:
// every write of its tenant fails until it is mended) is removed, and the
// difference between the records and what the remaining counters say is
// added to the tenant's first counter. It returns the tenants it changed,
// in tenant order (none when every counter was right), and marks usage as
// counted for a file that never had counters. kv.DB.Check (oncekv check)
// reports what it mends; oncekv recount runs it on a file or through a
// running service's admin endpoint.
//
// It reads every record, holding the writer for that long on bbolt (about
// half a second a million records). On a backend with several writers
// (etcd) the transaction's reads conflict with any write of a record
// meanwhile, so run it when writes are quiet; its writes are one or two
// for each tenant it changes, which must fit in the backend's transaction
// limit (kv.Traits.MaxTxOps).
func RecountUsage(ctx context.Context, db *kv.DB) ([]UsageRecount, error) {
	var out []UsageRecount
	err := db.Update(ctx, func(tx kv.Tx) error {
		var err error
		out, err = recountUsageTx(tx, !db.Traits().SingleWriter)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// recountUsageTx is RecountUsage inside tx; sharded says where a tenant's
// first counter is (adjustHome).
func recountUsageTx(tx kv.Tx, sharded bool) ([]UsageRecount, error) {
	b, err := usageNS.Create(tx)
	if err != nil {
		return nil, err
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
		s.Records, s.Bytes = s.Records+u.Records, s.Bytes+u.Bytes
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
	var out []UsageRecount
	for _, t := range slices.Sorted(maps.Keys(all)) {
		was, now := stored[t], found[t]
		if was == now && len(damaged[t]) == 0 {
			continue
		}
		for _, k := range damaged[t] {
			if err := b.Delete(k); err != nil {
				return nil, err
			}
		}
		if err := adjustHome(b, sharded, t, now.Records-was.Records, now.Bytes-was.Bytes); err != nil {
			return nil, err
		}
		out = append(out, UsageRecount{Tenant: t, Was: was, Damaged: len(damaged[t]), Now: now})
	}
	if b.Get(usageComplete) == nil {
		if err := b.Put(usageComplete, []byte{1}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// adjustHome adds (records, bytes) to tenant's first counter: its bare key
// with one writer, its shard 0 with several (a tenant's counters matter
// only as a sum).
func adjustHome(b kv.Bucket, sharded bool, tenant string, records, bytes int64) error {
	k := []byte(tenant)
	if sharded {
		k = append(k, 0, 0)
	}
	return addUsage(b, k, tenant, records, bytes)
}
