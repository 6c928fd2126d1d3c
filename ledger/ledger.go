package ledger

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
)

// Defaults used when the corresponding Config field is zero.
const (
	// DefaultRetention is how long a completed record is kept (and replayed)
	// after completion.
	DefaultRetention = keyspace.DefaultIdempotency

	// DefaultLease is how long a two-phase claim is protected from takeover.
	DefaultLease = 30 * time.Second

	// DefaultRetryAfter is the retry hint returned with an in-progress
	// conflict.
	DefaultRetryAfter = time.Second

	// DefaultMaxResponseBytes bounds a stored response body.
	DefaultMaxResponseBytes = 8 << 20
)

// Config configures a Ledger. A nil *Config means all defaults.
type Config struct {
	// Retention is how long a record counts after it completes. A retry that
	// arrives later runs again. 0 means DefaultRetention.
	Retention time.Duration

	// RetentionFor, if set, overrides Retention per scope (for example
	// retention.Policy.Func). A positive duration is the retention (never
	// less than Lease), 0 falls back to Retention, a negative one keeps
	// records forever.
	RetentionFor func(scope string) time.Duration

	// Lease is how long a two-phase claim is protected. After it expires a
	// retry takes the claim over with a new version. 0 means DefaultLease.
	Lease time.Duration

	// RetryAfter is the hint given with an in-progress conflict, capped by
	// the time left on the lease. 0 means DefaultRetryAfter.
	RetryAfter time.Duration

	// CompressThreshold is the body size above which stored responses are
	// zstd-compressed. 0 means record.DefaultCompressThreshold; negative disables
	// compression. A body over 64 MiB (which only a MaxResponseBytes above
	// the default lets through) is stored as it is: readers before this
	// release refuse to decompress more than that from one record.
	CompressThreshold int

	// MaxResponseBytes bounds the body of a stored response; larger responses
	// fail with ErrResponseTooLarge and nothing is stored. 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int

	// Quota, if set, bounds each tenant's records and stored bytes (see
	// Quota). Usage is kept whether or not a quota is set.
	Quota *Quota

	// RecoverOrphans lets a claim left by an earlier incarnation of the
	// database (a process that has since died) be taken over at once instead
	// of after its lease. Set it only when the caller verifies the outside
	// work before redoing it after a takeover, as the sideeffect executor
	// does by asking the provider.
	RecoverOrphans bool
}

func (c *Config) withDefaults() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.Retention == 0 {
		r.Retention = DefaultRetention
	}
	if r.Lease == 0 {
		r.Lease = DefaultLease
	}
	if r.RetryAfter == 0 {
		r.RetryAfter = DefaultRetryAfter
	}
	if r.CompressThreshold == 0 {
		r.CompressThreshold = record.DefaultCompressThreshold
	}
	if r.MaxResponseBytes == 0 {
		r.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return r
}

func (c *Config) validate() error {
	switch {
	case c.Retention < 0:
		return fmt.Errorf("%w: Retention %s is negative", ErrInvalidConfig, c.Retention)
	case c.Retention > keyspace.MaxRetention:
		return fmt.Errorf("%w: Retention %s exceeds 100 years; stored times would wrap round", ErrInvalidConfig, c.Retention)
	case c.Lease > keyspace.MaxRetention || c.RetryAfter > keyspace.MaxRetention:
		return fmt.Errorf("%w: Lease %s or RetryAfter %s exceeds 100 years", ErrInvalidConfig, c.Lease, c.RetryAfter)
	case c.Lease < 0:
		return fmt.Errorf("%w: Lease %s is negative", ErrInvalidConfig, c.Lease)
	case c.Retention < c.Lease:
		return fmt.Errorf("%w: Retention %s is shorter than Lease %s: a record could expire while its claim is live",
			ErrInvalidConfig, c.Retention, c.Lease)
	case c.RetryAfter < 0:
		return fmt.Errorf("%w: RetryAfter %s is negative", ErrInvalidConfig, c.RetryAfter)
	case c.MaxResponseBytes < 0:
		return fmt.Errorf("%w: MaxResponseBytes %d is negative", ErrInvalidConfig, c.MaxResponseBytes)
	case c.Quota != nil && (c.Quota.MaxRecords < 0 || c.Quota.MaxBytes < 0 || c.Quota.RetryAfter < 0 || c.Quota.RetryAfter > keyspace.MaxRetention):
		return fmt.Errorf("%w: Quota limits and RetryAfter must not be negative", ErrInvalidConfig)
	}
	return nil
}

// Ledger stores idempotency-key records in a kv.DB. It is safe for
// concurrent use; create one per database and share it.
type Ledger struct {
	db      *kv.DB
	cfg     Config
	records recstore.Store
	waiters waiters
	waited  atomic.Int64 // calls of Wait: how often a duplicate waited
	// entrySize is the room the last stored entry needed (entryBuffer).
	entrySize atomic.Int64
	// directory: the records have a key directory (the log, on bbolt).
	// Do then looks a request up before its write transaction
	// (Ledger.do); without one (etcd), a write transaction prefetches what
	// it reads (Ledger.prefetch).
	directory bool
	// views: what the quota checks know of tenants' usage, on a store
	// several processes write (nil elsewhere, and without a quota).
	views *quotaViews
}

// recordSpec names the records' buckets: the log "ledger.log" (bbolt), or
// "ledger" with its index "ledger.expiry" (etcd, and files of format 1).
var recordSpec = recstore.Spec{Name: "ledger", Group: tenantGroup}

// New returns a Ledger over db. cfg may be nil for defaults.
func New(db *kv.DB, cfg *Config) (*Ledger, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: nil *kv.DB (open one with kv.Open)", ErrInvalidConfig)
	}
	records, err := recstore.Open(context.Background(), db, recordSpec)
	if err != nil {
		return nil, fmt.Errorf("ledger: open the records: %w", err)
	}
	l := &Ledger{db: db, cfg: c, records: records, directory: records.Layout() == "log"}
	if q := c.Quota; q != nil && q.MaxCountAge >= 0 && records.Tally() == nil && !db.Traits().SingleWriter {
		l.views = newQuotaViews(cmp.Or(q.MaxCountAge, DefaultQuotaCountAge))
	}
	if err := l.rebuildUsage(context.Background()); err != nil {
		return nil, fmt.Errorf("ledger: count tenant usage: %w", err)
	}
	return l, nil
}

// DB returns the database the ledger writes to.
func (l *Ledger) DB() *kv.DB { return l.db }

// Config returns the ledger's configuration with defaults applied.
func (l *Ledger) Config() Config { return l.cfg }

func (l *Ledger) now() time.Time { return l.db.Clock().Now() }

// expiry returns when a record of scope written at t stops counting.
func (l *Ledger) expiry(scope string, t time.Time) time.Time {
	d := l.cfg.Retention
	if l.cfg.RetentionFor != nil {
		if r := l.cfg.RetentionFor(scope); r != 0 {
			d = r
		}
	}
	if d > 0 {
		d = max(d, l.cfg.Lease) // never shorter than a claim's lease
	}
	return keyspace.ExpiryAt(t, d)
}

func validate(scope, key string) error {
	if err := ValidateScope(scope); err != nil {
		return err
	}
	return ValidateKey(key)
}

// load reads and decodes the record of (scope, key); nil if absent.
func (l *Ledger) load(tx kv.Tx, scope, key string, withBody bool) (recstore.Ref, *Record, error) {
	ref, v, err := l.records.Get(tx, scope, key)
	if err != nil {
		return ref, nil, &RecordError{Scope: scope, Key: key, Err: err}
	}
	if v == nil {
		return ref, nil, nil
	}
	mode := statusOnly
	if withBody {
		mode = bodyRequired
	}
	r, err := decodeRecordWith(l.db.Cipher(), scope, key, v, mode)
	if err != nil {
		return ref, nil, &RecordError{Scope: scope, Key: key, Err: err}
	}
	return ref, r, nil
}

// store writes r in place of prev (at ref; nil and a zero ref for a new
// record): the record, at its place in expiry order, and its tenant's
// usage. buf, if not nil, is an empty buffer allocated before the
// transaction (entryBuffer) that the stored entry is encoded into when it
// is large enough: the writer then allocates nothing for it while it holds
// the lock (and pays no garbage collector's assist for it there).
func (l *Ledger) store(ctx context.Context, tx kv.Tx, ref recstore.Ref, r *Record, prev *Record, buf []byte) error {
	if r.Response != nil && len(r.Response.Body) > l.cfg.MaxResponseBytes {
		return fmt.Errorf("%w: body of %d bytes, limit %d", ErrResponseTooLarge, len(r.Response.Body), l.cfg.MaxResponseBytes)
	}
	if r.Response != nil && r.Response.Status != 0 {
		switch st := r.Response.Status; {
		case st < 100 || st > 999:
			// Stored, it would fail every replay as corrupt (issue 13, item 5).
			return fmt.Errorf("%w: status %d is outside 100-999 (0 for a response that is not HTTP)", ErrInvalidResponse, st)
		case st < 200:
			// Replayed, a 1xx is sent as an interim response and the client
			// still waits for the answer (net/http then makes one up: 200).
			return fmt.Errorf("%w: status %d is informational, not a final answer (stored statuses are 200-999, or 0 for a response that is not HTTP)", ErrInvalidResponse, st)
		}
	}
	var prevExpiry time.Time
	var records, prevBytes int64 = 1, 0
	if prev != nil {
		prevExpiry, records, prevBytes = prev.ExpiresAt, 0, int64(prev.StoredBytes)
	}
	// A fresh buffer per record: bbolt keeps the value slice until commit.
	// The store's head (the log entry's) and the record go in one buffer:
	// buf as it is (the record is appended, reallocated only if it is
	// larger than buf's room), or one allocated here as large as the
	// record can be.
	room := 0
	if buf == nil {
		room = encodedSize(r) + 4 // and the entry's trailer
	}
	head := l.records.Frame(buf, r.Scope, r.Key, room)
	var e record.Encoder
	e.Append(head)
	v := encodeRecordWith(&e, l.db.Cipher(), r, l.cfg.CompressThreshold)
	if r.Status == StatusCompleted {
		// Sized after the records Do stores (completed ones): a claim's
		// record, without a response, would leave the next Do a short
		// buffer to grow under the lock.
		l.entrySize.Store(int64(len(v) + 4))
	}
	if _, err := l.records.PutFramed(ctx, tx, r.Scope, r.Key, ref, prevExpiry, r.ExpiresAt, v); err != nil {
		return err
	}
	added := int64(r.StoredBytes) - prevBytes
	if err := account(tx, l.records.Tally(), r.Scope, r.Key, records, added); err != nil {
		return err
	}
	if l.views != nil && added > 0 {
		l.views.add(TenantOf(r.Scope), Usage{Bytes: added})
	}
	return nil
}

// entryBuffer returns an empty buffer for the next stored entry, as large
// as the last entry stored and a little more (a response of a few more
// bytes), or nil before the first. Allocated by the caller before its
// transaction, it keeps the record's allocation out of the writer's
// critical section (store).
func (l *Ledger) entryBuffer() []byte {
	n := l.entrySize.Load()
	if n <= 0 || n > maxEntryBuffer {
		return nil
	}
	return make([]byte, 0, n+entrySlack)
}

const (
	entrySlack     = 64
	maxEntryBuffer = 64 << 10 // larger entries are allocated where they are encoded
)

// remove deletes the record cur at ref with its usage.
func (l *Ledger) remove(tx kv.Tx, ref recstore.Ref, cur *Record) error {
	if err := l.records.Delete(tx, cur.Scope, cur.Key, ref, cur.ExpiresAt); err != nil {
		return err
	}
	return account(tx, l.records.Tally(), cur.Scope, cur.Key, -1, -int64(cur.StoredBytes))
}

// managed runs fn, a Tx form, under group commit with a journal of the
// directory entries it adds: a run that does not commit (the batch re-ran
// without it, or it failed) leaves none behind.
func (l *Ledger) managed(ctx context.Context, fn func(ctx context.Context, tx kv.Tx) error) error {
	j := &recstore.Journal{}
	jctx := recstore.WithJournal(ctx, j)
	err := l.batch(jctx, func(tx kv.Tx) error {
		j.Undo() // an earlier run of this call that did not commit
		return fn(jctx, tx)
	})
	if err != nil {
		j.Undo()
	} else {
		j.Committed()
	}
	return err
}

// managedRun is managed for a Tx form with a result.
func managedRun[T any](ctx context.Context, l *Ledger, fn func(ctx context.Context, tx kv.Tx) (T, error)) (T, error) {
	var out T
	err := l.managed(ctx, func(ctx context.Context, tx kv.Tx) error {
		var err error
		out, err = fn(ctx, tx)
		return err
	})
	return out, err
}

func (l *Ledger) inProgress(r *Record, now time.Time) *InProgressError {
	ra := l.cfg.RetryAfter
	if left := r.LeaseExpiresAt.Sub(now); left < ra {
		ra = max(left, time.Millisecond)
	}
	return &InProgressError{Scope: r.Scope, Key: r.Key, Version: r.Version, LeaseExpiresAt: r.LeaseExpiresAt, RetryAfter: ra}
}

// takeable reports whether an in-progress record may be taken over now.
func (l *Ledger) takeable(r *Record, now time.Time) bool {
	if !r.leaseLive(now) {
		return true
	}
	// Another incarnation's claim is a dead process's only where one
	// process owns the store; with several writers it is another
	// replica's, live until its lease ends.
	return l.cfg.RecoverOrphans && l.db.Traits().SingleWriter && r.Owner != l.db.Incarnation()
}

// Stats describes the ledger's record store in this process.
type Stats struct {
	// Layout is "log" on bbolt (records in expiry order, an in-memory key
	// directory) and "keyed" on a backend with several writers.
	Layout string
	// Records is the number of record positions the directory holds (log
	// layout): one per record, plus briefly a second one for a record being
	// moved, plus stale hints left by callers' own rolled-back transactions.
	Records int
	// DirectoryBytes estimates the directory's heap: about
	// DirectoryBytesPerRecord per position.
	DirectoryBytes int64
	// Rebuilt is the number of records the directory was rebuilt from when
	// this process first opened the database, and RebuildTime how long that
	// took.
	Rebuilt     int
	RebuildTime time.Duration
	// Waited counts the calls of Wait (duplicates that waited).
	Waited int64
	// Cached is the number of records in the cache of recent records
	// (log layout), and CachedBytes their size. Records this process
	// committed are kept there, up to kv.Options.RecentCacheBytes (16 MiB
	// by default), so that a retry is answered without a read transaction.
	Cached      int
	CachedBytes int64
	// CacheHits counts the look-ups the cache answered since the process
	// opened the database, and CacheMisses those of a key the directory
	// holds that read the file instead (a record written before the
	// process started, or evicted, or every one with the cache off). Many
	// misses for retries mean the cache is too small for how long your
	// clients take to retry: raise kv.Options.RecentCacheBytes.
	CacheHits, CacheMisses uint64
	// Tenants is the number of tenants with records whose usage this
	// process counts in memory (log layout; Quota).
	Tenants int
}

// DirectoryBytesPerRecord is the directory's measured heap per record: a Go
// map of two 64-bit words takes 19 to 38 bytes per entry depending on where
// its fill stands between two growths; 38 is the figure at a million
// records (internal/recstore BenchmarkDirectoryHeap, bench/README.md).
const DirectoryBytesPerRecord = 38

// Stats returns the record store's figures.
func (l *Ledger) Stats() Stats {
	st := l.records.Stats()
	return Stats{Layout: st.Layout, Records: st.Positions, DirectoryBytes: int64(st.Positions) * DirectoryBytesPerRecord,
		Rebuilt: st.Rebuilt, RebuildTime: st.RebuildTime, Waited: l.waited.Load(),
		Cached: st.Cached, CachedBytes: int64(st.CachedBytes), CacheHits: st.CacheHits, CacheMisses: st.CacheMisses,
		Tenants: st.Groups}
}
