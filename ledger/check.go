package ledger

import (
	"fmt"
	"time"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// RecordKind is the kind of the idempotency records: pass it to
// retention.Sweep to remove records past their retention, and to
// kv.DB.Check to verify them (every record decodes and sits where its
// expiry says, no key has two records, this process's directory finds
// every record, the tenants' usage counters match the records).
var RecordKind kv.RecordKind = &recstore.Kind[*Record]{
	Spec:     recordSpec,
	KindName: "idempotency",
	Decode:   decodeRecordAs,
	ExpiresAt: func(r *Record) time.Time {
		return r.ExpiresAt
	},
	// A retention is never shorter than the lease, but a clock step could
	// make a live claim look expired: it stays.
	Keep: func(r *Record, now time.Time) string {
		if r.Status == StatusInProgress && r.leaseLive(now) {
			return "live lease"
		}
		return ""
	},
	Removed: func(tx kv.Tx, scope string, r *Record, v []byte) error {
		return accountAround(tx, scope, r.Key, -1, -int64(len(v)))
	},
	CheckRecord: func(tx kv.Tx, scope, key string, r *Record, report func(string)) {
		if r.blob != nil {
			if ring := kv.CipherOf(tx); ring != nil {
				if _, err := ring.Open(nil, r.blob, responseAAD(scope, key)); err != nil {
					report(fmt.Sprintf("record %q/%q: sealed response does not open: %v", scope, key, err))
				}
			}
		}
		if r.Status == StatusInProgress && r.ExpiresAt.Before(r.LeaseExpiresAt) {
			report(fmt.Sprintf("record %q/%q: in progress with a lease (%s) outliving its retention (%s)", scope, key, r.LeaseExpiresAt, r.ExpiresAt))
		}
	},
	CheckMore: func(tx kv.Tx, report func(string)) {
		checkUsage(tx, recordedUsage(tx), report)
	},
}

// recordedUsage adds up each tenant's records in tx: what its usage
// counters should say. An entry that does not decode is no record.
func recordedUsage(tx kv.Tx) map[string]Usage {
	totals := map[string]Usage{}
	recstore.Scan(tx, recordSpec, "", func(_ recstore.Ref, scope, _ string, v []byte, ok bool) bool {
		if tenant, counts := countedTenant(scope); ok && counts {
			u := totals[tenant]
			u.Records, u.Bytes = u.Records+1, u.Bytes+int64(len(v))
			totals[tenant] = u
		}
		return true
	})
	return totals
}

// mends ends a usage finding: what repairs it.
const mends = " (ledger.RecountUsage, or oncekv recount, mends it)"

// checkUsage compares the usage counters with the records counted: in the
// log, this process's tally, when it counts tx's snapshot.
func checkUsage(tx kv.Tx, totals map[string]Usage, report func(string)) {
	if tally, logged := logTally(tx); logged {
		if counted, ok := loggedUsage(tx, tally); ok {
			compareUsage(counted, totals, "this process counts", report)
		}
		return
	}
	ub := usageNS.Bucket(tx)
	if ub == nil || ub.Get(usageComplete) == nil {
		if len(totals) > 0 && !tx.Writable() {
			return // a file from before usage was kept, opened read-only: counted at the next writable open
		}
		if len(totals) > 0 {
			report("tenant usage is not counted although records exist" + mends)
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
				report(fmt.Sprintf("usage of tenant %q: %v%s", usageTenant(k), err, mends))
			}
		}
	}
	compareUsage(stored, totals, "usage says", report)
}

// compareUsage reports each tenant whose usage (what says says) differs
// from its records' totals.
func compareUsage(usage, totals map[string]Usage, says string, report func(string)) {
	for tenant, want := range totals {
		if got := usage[tenant]; got != want {
			report(fmt.Sprintf("tenant %q: %s %d records, %d bytes; the records are %d, %d bytes%s", tenant, says, got.Records, got.Bytes, want.Records, want.Bytes, mends))
		}
	}
	for tenant, got := range usage {
		// Counters that add up to nothing (several writers' shards) agree
		// with no records.
		if _, ok := totals[tenant]; !ok && got != (Usage{}) {
			report(fmt.Sprintf("tenant %q: %s %d records, %d bytes, but it has none%s", tenant, says, got.Records, got.Bytes, mends))
		}
	}
}

// Reseal is the ledger's part of a rekey (inspect.Rekey): in tx, it visits
// up to limit records after the cursor after (nil: from the start) and
// rewrites those whose stored response is not sealed under ring's current
// key (responses stored in clear, before a Cipher was set, included). It
// returns the cursor to resume after (nil when done) and how many it
// rewrote; a response that does not open fails it with a *RecordError.
func Reseal(tx kv.Tx, ring *seal.Ring, after []byte, limit int) (next []byte, resealed int, err error) {
	return RecordKind.(*recstore.Kind[*Record]).Rewrite(tx, after, limit, func(scope, key string, v []byte) ([]byte, error) {
		r, err := decodeRecordWith(ring, scope, key, v, bodyRequired)
		if err != nil {
			return nil, &RecordError{Scope: scope, Key: key, Err: err}
		}
		if r.Response == nil || (r.Sealed && r.KeyID == ring.Current()) {
			return nil, nil
		}
		threshold := 0
		if r.Compressed {
			threshold = 1 // it was worth compressing: it still is
		}
		var e record.Encoder
		e.Grow(encodedSize(r))
		nv := encodeRecordWith(&e, ring, r, threshold)
		if d := int64(len(nv) - len(v)); d != 0 {
			if err := accountAround(tx, scope, key, 0, d); err != nil {
				return nil, err
			}
		}
		return nv, nil
	})
}
