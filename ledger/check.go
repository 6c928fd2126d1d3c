package ledger

import (
	"fmt"
	"time"

	"github.com/oncekv/oncekv/kv"
)

func init() { kv.RegisterChecker("ledger", checkTx) }

// checkTx verifies the ledger's invariants: every record decodes, every
// record has exactly the expiry-index entry for its ExpiresAt, and every
// index entry points to a record with that expiry.
func checkTx(tx kv.Tx, report func(string)) {
	b := recordsNS.Bucket(tx)
	expiries := map[string]time.Time{}
	totals := map[string]Usage{}
	corrupt := map[string]bool{} // already reported; their index entries are not
	if b != nil {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			scope, _, _ := splitRecordKey(k)
			u := totals[TenantOf(scope)]
			u.Records, u.Bytes = u.Records+1, u.Bytes+int64(len(v))
			totals[TenantOf(scope)] = u
			r, err := decodeRecord(k, v, true)
			if err != nil {
				report(fmt.Sprintf("record %q: %v", k, err))
				corrupt[string(k)] = true
				continue
			}
			if r.Status == StatusInProgress && r.ExpiresAt.Before(r.LeaseExpiresAt) {
				report(fmt.Sprintf("record %q: in progress with a lease (%s) outliving its retention (%s)", k, r.LeaseExpiresAt, r.ExpiresAt))
			}
			expiries[string(k)] = r.ExpiresAt
			if !expiryIdx.Has(tx, r.ExpiresAt, k) {
				report(fmt.Sprintf("record %q: no expiry-index entry at %s", k, r.ExpiresAt.Format(time.RFC3339Nano)))
			}
		}
	}
	_ = expiryIdx.ForEach(tx, func(at time.Time, rk []byte) error {
		exp, ok := expiries[string(rk)]
		switch {
		case corrupt[string(rk)]:
		case !ok:
			report(fmt.Sprintf("expiry-index entry %s %q: no such record", at.Format(time.RFC3339Nano), rk))
		case !exp.Equal(at):
			report(fmt.Sprintf("expiry-index entry %s %q: record expires at %s", at.Format(time.RFC3339Nano), rk, exp.Format(time.RFC3339Nano)))
		}
		return nil
	})
	checkUsage(tx, totals, report)
}

// checkUsage compares the usage counters with the records counted.
func checkUsage(tx kv.Tx, totals map[string]Usage, report func(string)) {
	ub := usageNS.Bucket(tx)
	if ub == nil || ub.Get(usageComplete) == nil {
		if len(totals) > 0 && !tx.Writable() {
			return // a file from before usage was kept, opened read-only: counted at the next writable open
		}
		if len(totals) > 0 {
			report("tenant usage is not counted although records exist")
		}
		return
	}
	stored := map[string]Usage{}
	for tenant, u := range UsageTx(tx) {
		stored[tenant] = u
	}
	c := ub.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) > 0 && k[0] != 0 {
			if _, err := decodeUsage(v); err != nil {
				report(fmt.Sprintf("usage of tenant %q: %v", k, err))
			}
		}
	}
	for tenant, want := range totals {
		if got := stored[tenant]; got != want {
			report(fmt.Sprintf("tenant %q: usage says %d records, %d bytes; the records are %d, %d bytes", tenant, got.Records, got.Bytes, want.Records, want.Bytes))
		}
	}
	for tenant, got := range stored {
		if _, ok := totals[tenant]; !ok {
			report(fmt.Sprintf("tenant %q: usage says %d records, %d bytes, but it has none", tenant, got.Records, got.Bytes))
		}
	}
}

func init() { kv.RegisterSweeper("idempotency", recordSweeper{}) }

// recordSweeper removes idempotency records past their retention. It keeps
// an in-progress record whose lease is still live (a retention can never be
// shorter than the lease, but a clock step could make it look so).
type recordSweeper struct{}

func (recordSweeper) Index() kv.TimeIndex { return expiryIdx }

func (recordSweeper) Expire(tx kv.Tx, at time.Time, key []byte, now time.Time, dryRun bool) (bool, string, error) {
	b := recordsNS.Bucket(tx)
	r, err := load(b, key, false)
	switch {
	case err != nil:
		return false, "corrupt", nil // reported by the consistency check; never deleted blindly
	case r == nil || !r.ExpiresAt.Equal(at):
		return false, "index mismatch", nil
	case !r.Expired(now):
		return false, "not expired", nil
	case r.Status == StatusInProgress && r.leaseLive(now):
		return false, "live lease", nil
	case dryRun:
		return true, "", nil
	}
	return true, "", remove(tx, b, key, r)
}
