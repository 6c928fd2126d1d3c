package ledger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/internal/txn"
	"github.com/oncekv/oncekv/kv"
)

// DefaultQuotaRetryAfter is the retry hint of a quota rejection.
const DefaultQuotaRetryAfter = time.Minute

// Quota bounds what one tenant may keep in the ledger: its records (live or
// expired and not yet swept) and their stored bytes. Usage is counted
// exactly, with the transaction that writes or deletes each record (in
// memory on bbolt, in counters beside the records on etcd), so a check
// never scans the records. A request that would start a new record for a
// tenant at its limit is rejected with *QuotaError before anything is
// written (HTTP 429); replays are always answered, and a claim already
// made may always complete. On bbolt the check is exact; on etcd, where
// several processes write, it is exact near the bound and relies on a
// recent count far from it (MaxCountAge).
type Quota struct {
	// MaxRecords bounds a tenant's records. 0 means no bound.
	MaxRecords int64
	// MaxBytes bounds a tenant's stored bytes (encoded records, compressed
	// bodies included). 0 means no bound.
	MaxBytes int64
	// For, if set, gives one tenant's limits instead (0 for no bound).
	For func(tenant string) (maxRecords, maxBytes int64)
	// RetryAfter is the hint given with a rejection: usage falls as
	// retention sweeps remove expired records. 0 means
	// DefaultQuotaRetryAfter.
	RetryAfter time.Duration
	// MaxCountAge matters only on a store several processes write (etcd;
	// on bbolt every check is exact and costs nothing). There, a check
	// that read the tenant's count in its transaction would conflict with
	// every other new request of the tenant, since each writes a part of
	// it: on etcd at 64 clients, 91-94 requests a second instead of
	// 1,868-1,974 (bench/README.md, "Quotas on etcd"). So a check relies
	// on the count it last read, plus what this process has added since,
	// for up to MaxCountAge after reading it, while that is more than an
	// eighth of each bound away from the bound (an older count is read
	// again first). Nearer the bound, a check reads the count in its
	// transaction, and the commit is refused if it changed meanwhile:
	// two processes cannot both take a tenant's last records. A tenant
	// can pass a bound only by what its requests through other processes
	// add, within MaxCountAge, beyond that eighth. 0 means
	// DefaultQuotaCountAge (a second); negative makes every check read the
	// count (exact, at the cost above).
	MaxCountAge time.Duration
}

func (q *Quota) limits(tenant string) (int64, int64) {
	if q.For != nil {
		return q.For(tenant)
	}
	return q.MaxRecords, q.MaxBytes
}

// ErrQuotaExceeded is returned (as a *QuotaError) when a tenant is at its
// quota of records or stored bytes; nothing is written.
var ErrQuotaExceeded = errors.New("ledger: tenant quota exceeded")

// QuotaError reports a tenant at its quota.
type QuotaError struct {
	Tenant     string
	Usage      Usage
	MaxRecords int64 // 0: no bound
	MaxBytes   int64 // 0: no bound
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("ledger: tenant %q is at its quota: %d records (limit %d), %d bytes (limit %d)",
		clip(e.Tenant), e.Usage.Records, e.MaxRecords, e.Usage.Bytes, e.MaxBytes)
}

// Unwrap returns ErrQuotaExceeded.
func (e *QuotaError) Unwrap() error { return ErrQuotaExceeded }

// Usage is what one tenant keeps in the ledger.
type Usage struct {
	Records int64 // records stored, expired ones included until swept
	Bytes   int64 // their encoded size
}

// TenantOf returns the tenant of a scope: the part before the first '|'
// (Scope builds "tenant|METHOD /route"), or the whole scope when it has
// none. Quotas and usage are kept per TenantOf(scope).
func TenantOf(scope string) string {
	if i := strings.IndexByte(scope, '|'); i >= 0 {
		return scope[:i]
	}
	return scope
}

var (
	usageNS       = keyspace.New("ledger.usage")
	usageComplete = []byte("\x00complete") // set once usage covers every record
)

const usageLayout = 1

func encodeUsage(u Usage) []byte {
	var e record.Encoder
	e.Grow(3 + 2*binary.MaxVarintLen64 + 4) // one allocation: the value bbolt keeps
	e.Reset(record.KindUsage, usageLayout)
	e.Varint(u.Records)
	e.Varint(u.Bytes)
	return e.Finish()
}

func decodeUsage(v []byte) (Usage, error) {
	var d record.Decoder
	layout, err := d.Reset(record.KindUsage, v)
	if err != nil {
		return Usage{}, err
	}
	if layout != usageLayout {
		return Usage{}, d.Fail(fmt.Sprintf("unknown usage layout %d", layout))
	}
	u := Usage{Records: d.Varint(), Bytes: d.Varint()}
	return u, d.Done()
}

// Where usage is kept depends on the records' layout:
//
//   - the log (bbolt: one writer process): in memory, in the record
//     store's tally (recstore.Tally), counted from the records when the
//     process opens the ledger and kept exact by every write after. No
//     counter is written: one per tenant cost a commit a page for each
//     counters' leaf its requests touched (two pages more a one-request
//     commit with a thousand tenants; bench/README.md, "Many tenants").
//     Counters an older version kept in the usage bucket are removed at
//     the first writable open, so that the older version, opening the file
//     again, counts usage afresh instead of trusting them.
//   - keyed (etcd: several writers): in the usage bucket, in up to
//     usageShards counters per tenant under the keys tenant+"\x00"+shard,
//     the shard in two bytes, big-endian (a scope never holds a NUL), each
//     record counted in the one its scope and key hash to: one counter per
//     tenant was a key every request of the tenant wrote, and their
//     transactions all conflicted on it. A counter alone may be negative
//     (a record counted in one and removed through another: versions
//     before 2026-12 kept 256 counters, their shard in one byte); only the
//     sum is a usage, so every key under the tenant's prefix counts.
//
// Two transactions in flight that hash to one counter conflict, and one
// runs again: with 64 in flight on one tenant, 256 counters refused 23% of
// the commits for it, 1,024 refuse 7% (oncekv bench --against-etcd, 64
// clients: 15-19% more operations a second; bench/README.md). More would
// lengthen what reads every counter of a tenant (Usage, a quota's check,
// the check), what a process reads before it knows them all, and what it
// must remember to guess them (etcdkv's memo, 4 MiB: the counters of some
// 80 busy tenants).
const usageShards = 1024

// usageKey is the key of the counter that counts the record scope/key,
// whose tenant is TenantOf(scope): the tenant's shard.
func usageKey(tenant, scope, key string) []byte {
	h := uint32(2166136261) // FNV-1a over scope, NUL, key
	for i := 0; i < len(scope); i++ {
		h = (h ^ uint32(scope[i])) * 16777619
	}
	h *= 16777619
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return shardKey(tenant, uint16(h%usageShards))
}

// shardKey is the key of tenant's counter number shard.
func shardKey(tenant string, shard uint16) []byte {
	k := make([]byte, 0, len(tenant)+3)
	k = append(k, tenant...)
	return append(k, 0, byte(shard>>8), byte(shard))
}

// usageTenant returns the tenant a usage key counts for.
func usageTenant(k []byte) []byte {
	if i := bytes.IndexByte(k, 0); i >= 0 {
		return k[:i]
	}
	return k
}

// usageOf sums a tenant's counters.
func usageOf(b kv.Bucket, tenant string) (Usage, error) {
	if b == nil {
		return Usage{}, nil
	}
	var sum Usage
	// The tenant's keys alone: tenant (a counter of the versions before
	// shards) and tenant+"\x00"+shard. A longer tenant name sorts at or
	// after tenant+"\x01" (no name holds a NUL). On etcd the check's
	// transaction compares what it read at its commit, and a scan past
	// them would have compared other tenants' counters too (a page of
	// them, or all that sort after it), which their every new record
	// writes: each check conflicted with every other tenant's writes
	// (TestDistinctWritesDoNotConflict).
	c := kv.RangeCursor(b, []byte(tenant), []byte(tenant+"\x01"))
	for k, v := c.First(); k != nil; k, v = c.Next() {
		u, err := decodeUsage(v)
		if err != nil {
			return Usage{}, usageErr(tenant, err)
		}
		sum = sum.plus(u)
	}
	return sum.clamped(), nil
}

func (u Usage) clamped() Usage { return Usage{Records: max(u.Records, 0), Bytes: max(u.Bytes, 0)} }

// countedTenant returns scope's tenant, and whether its records count in
// usage: all but those of a scope without a tenant. ValidateScope refuses
// such scopes, but etcd may hold records written before it did, and their
// counters' keys would begin with NUL, among the usage bucket's markers,
// where the check and the recount do not look.
func countedTenant(scope string) (string, bool) {
	tenant := TenantOf(scope)
	return tenant, tenant != ""
}

// tenantGroup is countedTenant for the record store's tally
// (recstore.Spec.Group): the tenant of scope, nil when it counts in none.
func tenantGroup(scope []byte) []byte {
	if i := bytes.IndexByte(scope, '|'); i >= 0 {
		scope = scope[:i]
	}
	if len(scope) == 0 {
		return nil
	}
	return scope
}

// account adds (records, bytes) to the usage of scope's tenant in tx: in
// tally when the records are in the log (recstore.Tally), else in the
// counter of the record scope/key (usageKey), the only one it reads and
// writes.
func account(tx kv.Tx, tally *recstore.Tally, scope, key string, records, bytes int64) error {
	tenant, counts := countedTenant(scope)
	if (records == 0 && bytes == 0) || !counts {
		return nil
	}
	if tally != nil {
		return tally.Add(tx, tenant, records, bytes)
	}
	b, err := usageNS.Create(tx)
	if err != nil {
		return err
	}
	return addUsage(b, usageKey(tenant, scope, key), tenant, records, bytes)
}

// addUsage adds (records, bytes) to tenant's counter k in b, removing it
// when it comes to zero.
func addUsage(b kv.Bucket, k []byte, tenant string, records, bytes int64) error {
	if records == 0 && bytes == 0 {
		return nil
	}
	var u Usage
	if v := b.Get(k); v != nil {
		var err error
		if u, err = decodeUsage(v); err != nil {
			return usageErr(tenant, err)
		}
	}
	u.Records, u.Bytes = u.Records+records, u.Bytes+bytes
	if u.Records == 0 && u.Bytes == 0 {
		return b.Delete(k)
	}
	return b.Put(k, encodeUsage(u))
}

// usageErr reports a counter of tenant that does not decode, and what
// mends it.
func usageErr(tenant string, err error) error { return &damagedUsageError{tenant: tenant, err: err} }

type damagedUsageError struct {
	tenant string
	err    error
}

func (e *damagedUsageError) Error() string {
	return fmt.Sprintf("ledger: usage of tenant %q (RecountUsage, or oncekv recount, counts it again): %v", clip(e.tenant), e.err)
}

func (e *damagedUsageError) Unwrap() error { return e.err }

// logTally returns this process's tally of the records behind tx (nil
// when it has not opened the ledger on them), and whether they are in the
// log, where usage is counted in memory: the tally exists (the log bucket
// itself comes with the first record), or the log holds records.
func logTally(tx kv.Tx) (tally *recstore.Tally, logged bool) {
	tally = recstore.TallyOf(tx, recordSpec)
	return tally, tally != nil || recstore.InLog(tx, recordSpec)
}

// accountAround is account for maintenance that removes or rewrites
// records (the sweep, a rekey, the check's mending), which has only a
// transaction. In the log, it counts in this process's tally; where this
// process has not opened the ledger there is none, and the next open
// counts the records as they are then (counters an older version left are
// removed, so that it counts afresh too). In the keyed layout, a counter
// that does not decode is left as it is, since its value is lost anyway
// and RecountUsage computes it from the records, and one damaged counter
// must not stop every tenant's retention. The tenant's own writes still
// fail on it, and the check reports it.
func accountAround(tx kv.Tx, scope, key string, records, bytes int64) error {
	if tally, logged := logTally(tx); tally != nil {
		return account(tx, tally, scope, key, records, bytes)
	} else if logged {
		return retireCounters(tx)
	}
	err := account(tx, nil, scope, key, records, bytes)
	if _, damaged := errors.AsType[*damagedUsageError](err); damaged {
		return nil
	}
	return err
}

// retireCounters removes the usage bucket of a file whose records are in
// the log: counters an older version kept, which it would trust again
// after this version's writes, which do not keep them.
func retireCounters(tx kv.Tx) error {
	bt := kv.BoltTx(tx) // the log is bbolt's layout
	if bt == nil || usageNS.Bucket(tx) == nil {
		return nil
	}
	return bt.DeleteBucket(usageNS.Bytes())
}

// usage returns scope's tenant's usage in tx.
func (l *Ledger) usage(tx kv.Tx, tenant string) (Usage, error) {
	if tally := l.records.Tally(); tally != nil {
		return Usage(tally.Get(tx, tenant)).clamped(), nil
	}
	return usageOf(usageNS.Bucket(tx), tenant)
}

// checkQuota rejects a new record for scope's tenant when it is at its
// quota. It reads one count, or none (quotaViews), and writes nothing.
func (l *Ledger) checkQuota(ctx context.Context, tx kv.Tx, scope string) error {
	q := l.cfg.Quota
	if q == nil {
		return nil
	}
	tenant := TenantOf(scope)
	maxRecords, maxBytes := q.limits(tenant)
	if maxRecords <= 0 && maxBytes <= 0 {
		return nil
	}
	if l.views != nil {
		if known, err := l.admitByView(ctx, tenant, farBelow(maxRecords, maxBytes)); known || err != nil {
			return err
		}
	}
	u, err := l.usage(tx, tenant)
	if err != nil {
		return err
	}
	if (maxRecords > 0 && u.Records >= maxRecords) || (maxBytes > 0 && u.Bytes >= maxBytes) {
		ra := q.RetryAfter
		if ra == 0 {
			ra = DefaultQuotaRetryAfter
		}
		return &QuotaError{Tenant: tenant, Usage: u, MaxRecords: maxRecords, MaxBytes: maxBytes, RetryAfter: ra}
	}
	if l.views != nil {
		l.views.add(tenant, Usage{Records: 1})
	}
	return nil
}

// farBelow says whether a usage is more than an eighth of each bound (at
// least one) below it, bounds of 0 or less being none: far enough that a
// check may go by a recent count without reading it (Quota.MaxCountAge).
func farBelow(maxRecords, maxBytes int64) func(Usage) bool {
	return func(u Usage) bool {
		return (maxRecords <= 0 || u.Records < maxRecords-max(maxRecords/8, 1)) &&
			(maxBytes <= 0 || u.Bytes < maxBytes-max(maxBytes/8, 1))
	}
}

// admitByView admits a new record of tenant, and counts it, when what the
// ledger knows of its usage (quotaViews) is recent and far from its
// bounds, reading the count again, apart from the caller's transaction,
// when that is due. false (and no error) leaves the check to the caller's
// transaction.
func (l *Ledger) admitByView(ctx context.Context, tenant string, far func(Usage) bool) (bool, error) {
	known, renew, wait := l.views.admit(tenant, l.now(), far)
	if wait != nil {
		// Another check is reading what this one lacks: one read, not a
		// transaction each that every other would conflict with.
		select {
		case <-wait:
			known, renew, _ = l.views.admit(tenant, l.now(), far)
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if renew {
		// Read apart from the transaction, so that its commit compares
		// none of it.
		var u Usage
		err := l.db.View(ctx, func(rtx kv.Tx) (err error) {
			u, err = usageOf(usageNS.Bucket(rtx), tenant)
			return err
		})
		l.views.renewed(tenant, u, err)
		if !known && err == nil && far(u) {
			l.views.add(tenant, Usage{Records: 1})
			known = true
		}
	}
	return known, nil
}

// loggedUsage returns every tenant's usage as tx sees it, where the
// records are in the log: tally's (this process's) when it can tell
// (counted says so), else the records counted (a read that began before
// more changes committed than the tally keeps, or a process without the
// ledger open: nil).
func loggedUsage(tx kv.Tx, tally *recstore.Tally) (usage map[string]Usage, counted bool) {
	if tally != nil {
		if at, ok := tally.At(tx); ok {
			usage = make(map[string]Usage, len(at))
			for tenant, c := range at {
				usage[tenant] = Usage(c)
			}
			return usage, true
		}
	}
	return recordedUsage(tx), false
}

// UsageTx iterates every tenant's usage inside tx, in tenant order. Where
// the records are in the log (bbolt) it is what this process counts, as
// of tx's snapshot (or, when more than 64 changes to usage committed after
// tx began, or this process has not opened the ledger, what the records in
// tx add up to: a read of every record).
func UsageTx(tx kv.Tx) iter.Seq2[string, Usage] {
	return func(yield func(string, Usage) bool) {
		if tally, logged := logTally(tx); logged {
			usage, _ := loggedUsage(tx, tally)
			for _, tenant := range slices.Sorted(maps.Keys(usage)) {
				if !yield(tenant, usage[tenant].clamped()) {
					return
				}
			}
			return
		}
		b := usageNS.Bucket(tx)
		if b == nil {
			return
		}
		// A tenant's counters are adjacent: NUL sorts before any byte.
		var tenant []byte
		var sum Usage
		c := b.Cursor()
		for k, v := c.First(); ; k, v = c.Next() {
			if len(k) > 0 && k[0] == 0 {
				continue // markers
			}
			if tenant != nil && (k == nil || !bytes.Equal(usageTenant(k), tenant)) {
				if !yield(string(tenant), sum.clamped()) {
					return
				}
				tenant = nil
			}
			if k == nil {
				return
			}
			u, err := decodeUsage(v)
			if err != nil {
				continue // reported by the consistency check
			}
			if tenant == nil {
				tenant, sum = bytes.Clone(usageTenant(k)), Usage{}
			}
			sum = sum.plus(u)
		}
	}
}

// Usage returns one tenant's usage.
func (l *Ledger) Usage(ctx context.Context, tenant string) (Usage, error) {
	if tenant == "" {
		return Usage{}, fmt.Errorf("%w: empty tenant: usage is kept per tenant", ErrInvalidScope)
	}
	u, err := txn.Run(ctx, l.db.View, func(tx kv.Tx) (Usage, error) { return l.usage(tx, tenant) })
	return u, err
}

// rebuildUsage makes usage count every record. In the log, the tally
// counted them at open, and counters an older version kept are removed.
// In the keyed layout, a file written before usage was kept gets its
// counters once; later writes keep them exact.
func (l *Ledger) rebuildUsage(ctx context.Context) error {
	db := l.db
	if db.ReadOnly() {
		return nil
	}
	var done bool
	logged := l.records.Tally() != nil
	if err := db.View(ctx, func(tx kv.Tx) error {
		b := usageNS.Bucket(tx)
		done = b == nil && logged || !logged && b != nil && b.Get(usageComplete) != nil
		return nil
	}); err != nil || done {
		return err
	}
	if logged {
		return db.Update(ctx, retireCounters)
	}
	return db.Update(ctx, func(tx kv.Tx) error {
		b, err := usageNS.Create(tx)
		if err != nil {
			return err
		}
		if b.Get(usageComplete) != nil {
			return nil
		}
		totals := map[string]Usage{}
		l.records.Scan(tx, "", func(_ recstore.Ref, scope, key string, v []byte, ok bool) bool {
			if tenant, counts := countedTenant(scope); ok && counts {
				k := string(usageKey(tenant, scope, key))
				u := totals[k]
				u.Records, u.Bytes = u.Records+1, u.Bytes+int64(len(v))
				totals[k] = u
			}
			return true
		})
		for k, u := range totals {
			if err := b.Put([]byte(k), encodeUsage(u)); err != nil {
				return err
			}
		}
		return b.Put(usageComplete, []byte{1})
	})
}
