package recstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

// A log position is the record's expiry second (34 bits: to the year 2514)
// followed by a counter (30 bits), stored big-endian: positions sort by
// expiry, and the records one batch writes share the log's tail leaf.
const (
	ctrBits = 30
	ctrMask = 1<<ctrBits - 1
	maxSec  = 1<<(64-ctrBits) - 1
)

func expirySec(t time.Time) uint64 {
	s := t.Unix()
	switch {
	case s < 0:
		return 0
	case s > maxSec:
		return maxSec
	}
	return uint64(s)
}

func posKey(pos uint64) []byte { return binary.BigEndian.AppendUint64(nil, pos) }

// posSec returns the expiry second of a position.
func posSec(pos uint64) uint64 { return pos >> ctrBits }

// logStore is the log layout of one kind in one open database.
type logStore struct {
	spec Spec
	log  keyspace.Namespace
	tail keyspace.Namespace // tail.go
	// budget is the bytes of entries the tail holds at most (tailBudget);
	// movedIn is the last write transaction that moved it to the log (the
	// transaction itself: a rolled-back one's ID is the next one's, which
	// would then skip the tail for nothing), under the writer lock as
	// tailTx is.
	budget  int
	movedIn *bolt.Tx
	// tailTx and tailUsed remember what appendEntry found and added in
	// the tail during the write transaction tailTx (closed transactions
	// hold nothing), so that a batch's later entries do not walk the tail
	// again. Only a writable transaction uses them: bbolt's writer lock
	// orders every use. Other writes to the tail in the same transaction
	// (an overwrite, a delete) leave tailUsed an estimate, which only
	// decides when the tail moves: a page early or late, never a record.
	tailTx   *bolt.Tx
	tailUsed int
	dir      *directory
	// tally counts the records by group (Spec.Group), nil when the spec
	// counts none.
	tally *Tally
	// hints are the directory entries the Tx forms added in a caller's
	// own transactions, whose outcome oncekv never sees: the next write
	// removes those that came to nothing (settleHints).
	hints hints
	// ctr numbers new positions. The rebuild starts it above every counter
	// in the log, so until it wraps (2^30 allocations in one process) a new
	// position cannot exist yet and is not looked up first.
	ctr     atomic.Uint64
	wrapped atomic.Bool

	rebuilt     int
	rebuildTime time.Duration
	unreadable  atomic.Int64

	// open is false once the database is closed: the cache of recent
	// entries stops answering, so callers meet kv.ErrClosed as before.
	open *openFlag
}

// openFlag is attached to the database (kv.DB.Attachment), which closes it.
type openFlag struct{ closed atomic.Bool }

func (f *openFlag) Close() error { f.closed.Store(true); return nil }

type openFlagKey struct{}

var _ Store = (*logStore)(nil)

func (s *logStore) Layout() string { return "log" }

func (s *logStore) Stats() Stats {
	n, extra := s.dir.len()
	cached, cachedBytes, hits, misses := s.dir.recentStats()
	return Stats{Layout: "log", Positions: n, Extra: extra, Rebuilt: s.rebuilt, RebuildTime: s.rebuildTime, Unreadable: int(s.unreadable.Load()),
		Cached: cached, CachedBytes: cachedBytes, CacheHits: hits, CacheMisses: misses, Groups: s.tally.groups()}
}

func (s *logStore) Tally() *Tally { return s.tally }

// ErrDamagedRecord is returned (wrapped) when a look-up meets a record whose
// checksum fails where its key should be.
var ErrDamagedRecord = record.ErrCorrupt

func (s *logStore) Get(tx kv.Tx, scope, key string) (Ref, []byte, error) {
	return s.GetProbed(tx, scope, key, Probe{})
}

func (s *logStore) GetProbed(tx kv.Tx, scope, key string, p Probe) (Ref, []byte, error) {
	var b lookup
	var damage error
	if p.pos != 0 {
		if b = s.lookup(tx); b.log == nil {
			return Ref{}, nil, nil
		}
		if ref, v, ok, err := s.at(&b, p.pos, scope, key); ok {
			return ref, v, nil
		} else if err != nil {
			damage = err
		}
	}
	// Not where the probe pointed (swept, moved, rolled back, another
	// key's), or no probe: look afresh, the directory may have changed.
	// The hash is taken again rather than from p: a probe of another key
	// must not turn into a miss (which would run the work again).
	h := s.dir.hash(scope, key)
	if p.made && p.pos == 0 && p.h == h && s.dir.unchanged(h, p.adds) {
		// The probe missed, and nothing has been added under h since:
		// still a miss (the directory is authoritative for misses).
		return Ref{}, nil, nil
	}
	var buf [4]uint64
	for _, pos := range s.dir.candidates(h, buf[:0]) {
		if pos == p.pos {
			continue // looked at already
		}
		if b.log == nil {
			// Opened only now: a key the directory has never seen, the
			// common case in a write transaction, costs no bucket look-up.
			if b = s.lookup(tx); b.log == nil {
				return Ref{}, nil, nil
			}
		}
		if ref, v, ok, err := s.at(&b, pos, scope, key); ok {
			return ref, v, nil
		} else if err != nil && damage == nil {
			damage = err
		}
	}
	// A damaged entry where the directory points may be this record's:
	// its key cannot be trusted either way, so the answer is an error,
	// never a miss (which would run the work again).
	return Ref{}, nil, damage
}

// at looks for the record of (scope, key) at pos: ok reports that it is
// there, intact. err reports a damaged entry there (framing or checksum),
// which may be this record's: its identity cannot be trusted, whatever it
// says. The checksum is checked on a match too: one flipped bit in a
// stored key could otherwise answer another key's request with its
// record (found by FuzzGarbledLogEntry).
func (s *logStore) at(b *lookup, pos uint64, scope, key string) (Ref, []byte, bool, error) {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], pos)
	v := b.get(k[:])
	if v == nil {
		return Ref{}, nil, false, nil // a stale hint: rolled back, swept or moved
	}
	sc, k2, payload, ok := unwrap(v)
	if why := "unreadable framing"; !ok || !intact(v) {
		if ok {
			why = "checksum mismatch"
		}
		return Ref{}, nil, false, fmt.Errorf("%w: the %s record at log position %016x is damaged (%s) where record %q/%q was expected", ErrDamagedRecord, s.spec.Name, pos, why, scope, key)
	}
	if string(sc) == scope && string(k2) == key {
		return Ref{pos: pos}, payload, true, nil
	}
	return Ref{}, nil, false, nil // another key with the same hash
}

// both returns the log and its tail as one bucket (tail.go), or nil when
// the log does not exist.
func (s *logStore) both(tx kv.Tx) kv.Bucket { return union(tx, s.log, s.tail) }

// lookup is both for the look-ups, without an allocation: its log is nil
// when the log does not exist. It reads the log first (a look-up that
// reaches the file is most often of a record older than the tail's few)
// and opens the tail only when the log does not hold the position.
type lookup struct {
	s      *logStore
	tx     kv.Tx
	log    kv.Bucket
	tail   kv.Bucket
	opened bool // tail looked up
}

func (s *logStore) lookup(tx kv.Tx) lookup { return lookup{s: s, tx: tx, log: s.log.Bucket(tx)} }

func (l *lookup) get(k []byte) []byte {
	if v := l.log.Get(k); v != nil {
		return v
	}
	if !l.opened {
		l.tail, l.opened = l.s.tail.Bucket(l.tx), true
	}
	if l.tail == nil {
		return nil
	}
	return l.tail.Get(k)
}

// newPos returns a position unused in tx for a record expiring at expiry.
func (s *logStore) newPos(tx kv.Tx, expiry time.Time) uint64 {
	sec := expirySec(expiry) << ctrBits
	var b kv.Bucket
	for {
		n := s.ctr.Add(1)
		if n > ctrMask {
			s.wrapped.Store(true)
		}
		pos := sec | (n & ctrMask)
		if pos == 0 {
			continue
		}
		if !s.wrapped.Load() {
			return pos
		}
		if b == nil {
			b = s.both(tx) // the log exists: Put created it
		}
		if b.Get(posKey(pos)) == nil {
			return pos
		}
	}
}

// packedLog returns the log bucket log of the writable tx, packed full:
// records are appended at the tail, so leaves split at 100% instead of
// bbolt's 50%, and a batch writes half as many leaf pages.
func packedLog(tx kv.Tx, log keyspace.Namespace) (kv.Bucket, error) {
	b, err := log.Create(tx)
	if err != nil {
		return nil, err
	}
	if bt := kv.BoltTx(tx); bt != nil {
		if bb := bt.Bucket(log.Bytes()); bb != nil {
			bb.FillPercent = 1.0 // the same *bbolt.Bucket as b: bbolt caches a tx's buckets
		}
	}
	return b, nil
}

// Probe reports whether (scope, key) may have a record: false is final
// (the directory is authoritative for misses), so a caller can skip a read
// transaction for a key never seen.
func (s *logStore) Probe(scope, key string) (Probe, bool) {
	h := s.dir.hash(scope, key)
	pos, extra, ok, adds := s.dir.first(h)
	return Probe{pos: pos, h: h, extra: extra, made: true, adds: adds}, ok
}

func (s *logStore) Put(ctx context.Context, tx kv.Tx, scope, key string, prev Ref, prevExpiry, expiry time.Time, value []byte) (Ref, error) {
	return s.PutFramed(ctx, tx, scope, key, prev, prevExpiry, expiry, framed(scope, key, value))
}

// Frame returns buf[:0] with the head of (scope, key)'s log entry, and
// room bytes of room after it.
func (s *logStore) Frame(buf []byte, scope, key string, room int) []byte {
	return frame(buf, scope, key, room)
}

func (s *logStore) PutFramed(ctx context.Context, tx kv.Tx, scope, key string, prev Ref, prevExpiry, expiry time.Time, framed []byte) (Ref, error) {
	if s.hints.n.Load() > 0 {
		s.settleHints(tx)
	}
	b, err := packedLog(tx, s.log)
	if err != nil {
		return Ref{}, err
	}
	h := s.dir.hash(scope, key)
	entry := record.AppendChecksum(framed)
	pos := prev.pos // same place in expiry order: overwritten in place
	if prev.IsZero() || posSec(prev.pos) != expirySec(expiry) {
		pos = s.newPos(tx, expiry)
		err = s.appendEntry(tx, b, pos, entry)
	} else {
		err = s.both(tx).Put(posKey(pos), entry) // where it is, log or tail
	}
	if err != nil {
		return Ref{}, err
	}
	if pos == prev.pos {
		s.dir.forget(h, pos) // the old value leaves the cache before the commit
	} else {
		s.dir.add(h, pos) // visible to the next writer before this one releases the lock
		if j := journalFrom(ctx); j != nil {
			j.note(s.dir, h, pos)
		} else {
			s.hints.add(tx, h, pos)
		}
		failpoint.Inject(failpoint.RecstoreDirectoryAdded)
		if !prev.IsZero() {
			if err := s.both(tx).Delete(posKey(prev.pos)); err != nil {
				return Ref{}, err
			}
			s.retire(tx, h, prev.pos)
		}
	}
	s.rememberOnCommit(ctx, tx, h, pos, entry) // the shard's count taken after this transaction's own changes
	return Ref{pos: pos}, nil
}

// retire follows the deletion of the entry at pos in tx: the cache forgets
// it at once (before the commit), the directory after the commit.
func (s *logStore) retire(tx kv.Tx, h, pos uint64) {
	s.dir.forget(h, pos)
	if s.hints.n.Load() > 0 {
		s.hints.retired(kv.BoltTx(tx), pos)
	}
	tx.OnCommit(func() { s.dir.remove(h, pos) })
}

// hints holds the directory entries added by writes without a Journal
// (the Tx forms, in a caller's own transaction), up to maxHints, by
// transaction, until a later write transaction settles them. Only write
// transactions use it, ordered by bbolt's writer lock; the mutex keeps
// that from being the only guard (and orders the commits' marks).
type hints struct {
	n      atomic.Int32 // the entries held: the writes check it alone
	mu     sync.Mutex
	groups []*hintGroup
	// tx is the write transaction that used hints last; settled reports
	// that it has settled them (once is enough: no other transaction adds
	// any while it runs), gone the positions it deleted (retire) before:
	// its own view no longer shows them, though the last commit does.
	tx      *bolt.Tx
	settled bool
	gone    []uint64
}

// hintGroup is the entries one transaction added.
type hintGroup struct {
	tx *bolt.Tx
	// committed is set when tx commits (OnCommit): its entries are then
	// live records', and need no look.
	committed atomic.Bool
	entries   []hintEntry
}

type hintEntry struct{ h, pos uint64 }

// maxHints bounds the entries kept to settle: past it, a caller's rolled-back
// write leaves its entry until the next open, as every one did before.
const maxHints = 1 << 16

// in makes tx the transaction hs follows. hs.mu is held.
func (hs *hints) in(tx *bolt.Tx) {
	if hs.tx != tx {
		hs.tx, hs.settled, hs.gone = tx, false, hs.gone[:0]
	}
}

// add notes the entry (h, pos) that tx added. A transaction bbolt does not
// back cannot be told from another: its entries stay until the next open.
func (hs *hints) add(tx kv.Tx, h, pos uint64) {
	bt := kv.BoltTx(tx)
	if bt == nil {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.n.Load() >= maxHints {
		return
	}
	var g *hintGroup
	if n := len(hs.groups); n > 0 && hs.groups[n-1].tx == bt {
		g = hs.groups[n-1]
	} else {
		g = &hintGroup{tx: bt}
		hs.groups = append(hs.groups, g)
		tx.OnCommit(func() { g.committed.Store(true) })
	}
	g.entries = append(g.entries, hintEntry{h, pos})
	hs.n.Add(1)
}

// retired notes that tx deleted the entry at pos.
func (hs *hints) retired(tx *bolt.Tx, pos uint64) {
	hs.mu.Lock()
	hs.in(tx)
	if !hs.settled {
		hs.gone = append(hs.gone, pos)
	}
	hs.mu.Unlock()
}

// settleHints settles, in the write transaction tx, the entries that
// earlier transactions added without a Journal. Those transactions have
// ended (bbolt has one writer). One whose commit has been seen added live
// records' entries. For the others, what tx sees of their positions is
// what they left, for good (positions are not reused): a record there
// means the transaction committed (its mark comes after bbolt releases the
// writer lock, so it can be late) and the entry is a live record's; no
// record means it rolled back (or the record has gone since, by a commit
// that removes the entry too), and the entry points at nothing for ever:
// it is removed. A position tx itself deleted is not judged by what tx
// sees, which its rollback would undo: that entry waits for the next
// write. Neither decision depends on tx committing. A transaction settles
// once, at its first write: a caller's import of many records in one
// transaction does not walk the entries at each.
func (s *logStore) settleHints(tx kv.Tx) {
	bt := kv.BoltTx(tx)
	hs := &s.hints
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.in(bt)
	if hs.settled || bt == nil {
		return
	}
	hs.settled = true
	gone := func(pos uint64) bool { return slices.Contains(hs.gone, pos) }
	if len(hs.gone) > 16 {
		set := make(map[uint64]struct{}, len(hs.gone))
		for _, p := range hs.gone {
			set[p] = struct{}{}
		}
		gone = func(pos uint64) bool { _, ok := set[pos]; return ok }
	}
	var b kv.Bucket
	kept, n := hs.groups[:0], 0
	for _, g := range hs.groups {
		if g.tx == bt {
			kept, n = append(kept, g), n+len(g.entries) // this transaction's own
			continue
		}
		if g.committed.Load() {
			continue
		}
		if b == nil {
			b = s.both(tx)
		}
		left := g.entries[:0]
		for _, e := range g.entries {
			switch {
			case gone(e.pos):
				left = append(left, e) // deleted by this transaction: not judged by its view
			case b != nil && b.Get(posKey(e.pos)) != nil:
				// Committed: a live record's entry.
			default:
				s.dir.remove(e.h, e.pos)
			}
		}
		if len(left) > 0 {
			g.entries = left
			kept, n = append(kept, g), n+len(left)
		}
	}
	clear(hs.groups[len(kept):])
	hs.groups = kept
	hs.gone = hs.gone[:0]
	hs.n.Store(int32(n))
}

// rememberOnCommit caches entry, written at pos in tx, once tx commits
// (recent.go): through the managed call's Journal in ctx, or OnCommit.
func (s *logStore) rememberOnCommit(ctx context.Context, tx kv.Tx, h, pos uint64, entry []byte) {
	if s.dir.recentOff() {
		return
	}
	gen := s.dir.generation(h)
	if j := journalFrom(ctx); j != nil {
		j.remember(s.dir, h, pos, gen, entry)
		return
	}
	tx.OnCommit(func() { s.dir.remember(h, pos, gen, entry) })
}

// Cached returns the value of (scope, key)'s record from the cache of
// recent entries, when the position p found is cached: no transaction is
// needed. ok is false when the cache cannot say (look in the log), and
// when ctx is done or the database closed, so that the read transaction
// answers with the error as it would without the cache.
func (s *logStore) Cached(ctx context.Context, p Probe, scope, key string) (Ref, []byte, bool) {
	if p.pos == 0 || ctx.Err() != nil || s.open.closed.Load() {
		return Ref{}, nil, false // the read transaction reports it
	}
	h := p.h // a probe of another key can only miss here: entries are verified
	r := &s.dir.shard(h).recent
	if s.dir.recentOff() {
		r.misses.Add(1)
		return Ref{}, nil, false
	}
	if v, ok := s.cachedAt(h, p.pos, scope, key); ok {
		r.hits.Add(1)
		return Ref{pos: p.pos}, v, true
	}
	if !p.extra {
		r.misses.Add(1)
		return Ref{}, nil, false
	}
	// The first position may be a stale hint (a caller's rolled-back
	// transaction) in front of the live one. A cached position is one
	// committed and unchanged since, so whichever is found is the record.
	var buf [4]uint64
	for _, pos := range s.dir.candidates(h, buf[:0]) {
		if pos == p.pos {
			continue
		}
		if v, ok := s.cachedAt(h, pos, scope, key); ok {
			r.hits.Add(1)
			return Ref{pos: pos}, v, true
		}
	}
	r.misses.Add(1)
	return Ref{}, nil, false
}

func (s *logStore) cachedAt(h, pos uint64, scope, key string) ([]byte, bool) {
	e := s.dir.cached(h, pos)
	if e == nil {
		return nil, false
	}
	sc, k, payload, ok := unwrap(e)
	if !ok || string(sc) != scope || string(k) != key {
		return nil, false // another key with the same hash
	}
	return payload, true
}

func (s *logStore) Delete(tx kv.Tx, scope, key string, ref Ref, _ time.Time) error {
	b := s.both(tx)
	if b == nil {
		return nil
	}
	if err := b.Delete(posKey(ref.pos)); err != nil {
		return err
	}
	s.retire(tx, s.dir.hash(scope, key), ref.pos)
	return nil
}

func (s *logStore) Scan(tx kv.Tx, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	scanLog(tx, s.log, s.tail, prefix, false, fn)
}

func (s *logStore) List(tx kv.Tx, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	scanLog(tx, s.log, s.tail, prefix, true, fn)
}

// scanLog is Scan over the log and its tail; with verify, it is List.
func scanLog(tx kv.Tx, log, tail keyspace.Namespace, prefix string, verify bool, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	b := union(tx, log, tail)
	if b == nil {
		return
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 {
			if !fn(Ref{key: k}, "", "", v, false) {
				return
			}
			continue
		}
		sc, ky, payload, ok := unwrap(v)
		switch {
		case ok && verify && !intact(v):
			// Its scope and key may be the damaged bytes: shown as
			// damage, never as another record.
			ok, payload = false, v
		case !ok:
			payload = v
			if verify {
				sc, ky, _ = identity(v)
			}
		}
		if ok && !strings.HasPrefix(string(sc), prefix) {
			continue
		}
		if !fn(Ref{pos: binary.BigEndian.Uint64(k)}, string(sc), string(ky), payload, ok) {
			return
		}
	}
}

// rebuild fills the directory from the log as tx sees it.
func (s *logStore) rebuild(tx kv.Tx) {
	start := time.Now()
	n := 0
	if s.tally != nil {
		s.tally.counts = map[string]*Count{} // a read run again (kv's rerun build) counts afresh
		s.tally.nRecent = 0
	}
	s.unreadable.Store(0)
	var found gathered
	if b := s.both(tx); b != nil {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 8 {
				s.unreadable.Add(1)
				continue
			}
			// Every position counts, a damaged entry's too: a new
			// position must not be one in use, or its Put would write over
			// the damaged entry, and the check could no longer report it.
			pos := binary.BigEndian.Uint64(k)
			if c := pos & ctrMask; c > s.ctr.Load() {
				s.ctr.Store(c)
			}
			sc, ky, val, ok := unwrap(v) // the checksum is the look-up's to check (at)
			if !ok {
				s.unreadable.Add(1) // reported by the consistency check
				if sc, ky, ok = identity(v); !ok {
					continue
				}
			}
			if ok && s.tally != nil {
				s.tally.count(sc, len(val)) // counted by what it says, as Scan gives it
			}
			found.add(s.dir.hashBytes(sc, ky), pos)
			if n++; n%rebuildChunk == 0 {
				s.dir.load(&found)
				found.reset()
			}
		}
	}
	s.dir.load(&found)
	if s.tally != nil {
		s.tally.at = s.tally.stampIn(tx)
	}
	failpoint.Inject(failpoint.RecstoreRebuilt)
	s.rebuilt, s.rebuildTime = n, time.Since(start)
	s.wrapped.Store(s.ctr.Load() >= ctrMask) // the counter now starts above every position
}

// rebuildChunk bounds the positions a rebuild gathers before it loads
// them into the directory (16 bytes each: 64 MiB, and append's slack,
// beside the directory while a large log is read). A log of more loads in
// several chunks, the shards' maps sized for the first and growing after.
var rebuildChunk = 1 << 22

// The log stores of every open bbolt database, by handle and kind: every
// Ledger (and every inbox) over one database shares one directory, and the
// kinds' sweepers find it from a transaction. The handle is held weakly:
// when a closed database is collected, its entry goes with it.
var registry struct {
	mu     sync.Mutex
	stores map[weak.Pointer[bolt.DB]]map[string]*slot
}

// slot is one kind's log store in one database, built once. The registry's
// lock is never held while a store is built (that takes the writer lock,
// which a sweeping transaction holding... would wait for).
type slot struct {
	once  sync.Once
	store atomic.Pointer[logStore]
	err   error
}

// logOf returns the log store of name in the database behind tx, if this
// process has opened (and finished building) it. It never blocks on a
// build.
func logOf(tx kv.Tx, name string) *logStore {
	bt := kv.BoltTx(tx)
	if bt == nil {
		return nil
	}
	registry.mu.Lock()
	sl := registry.stores[weak.Make(bt.DB())][name]
	registry.mu.Unlock()
	if sl == nil {
		return nil
	}
	return sl.store.Load()
}

// Open returns the store of spec over db: the log with its directory on
// bbolt (migrating records of the keyed layout first, when db is
// writable), the keyed layout elsewhere. The directory is rebuilt the first
// time a process opens the kind, under the writer lock (a read-only
// database: in a read transaction, no writer can exist), and shared after
// that. Do not call it inside a transaction of db.
func Open(ctx context.Context, db *kv.DB, spec Spec) (Store, error) {
	bdb := db.Bolt()
	if bdb == nil {
		return Keyed(spec), nil
	}
	wk := weak.Make(bdb)
	registry.mu.Lock()
	if registry.stores == nil {
		registry.stores = map[weak.Pointer[bolt.DB]]map[string]*slot{}
	}
	if registry.stores[wk] == nil {
		registry.stores[wk] = map[string]*slot{}
		runtime.AddCleanup(bdb, func(wk weak.Pointer[bolt.DB]) {
			registry.mu.Lock()
			delete(registry.stores, wk)
			registry.mu.Unlock()
		}, wk)
	}
	sl := registry.stores[wk][spec.Name]
	if sl == nil {
		sl = &slot{}
		registry.stores[wk][spec.Name] = sl
	}
	registry.mu.Unlock()

	sl.once.Do(func() {
		// Until openLog returns: a panic in it (bbolt on a damaged page)
		// reaches this caller, and leaves the slot failed, not empty.
		sl.err = errBuildPanicked
		s, err := openLog(ctx, db, spec, newDirectory(0))
		if sl.err = err; err == nil {
			sl.store.Store(s)
		}
	})
	if sl.err != nil {
		registry.mu.Lock()
		if registry.stores[wk][spec.Name] == sl {
			delete(registry.stores[wk], spec.Name) // the next Open tries again
		}
		registry.mu.Unlock()
		return nil, sl.err
	}
	return sl.store.Load(), nil
}

// openLog builds the log store of spec over db (bbolt) with dir, empty:
// it migrates records of the keyed layout, then rebuilds dir from the log.
func openLog(ctx context.Context, db *kv.DB, spec Spec, dir *directory) (*logStore, error) {
	s := &logStore{spec: spec, log: spec.logNS(), tail: spec.tailNS(),
		budget: tailBudget(db.PageSize()), dir: dir,
		open: db.Attachment(openFlagKey{}, func() any { return new(openFlag) }).(*openFlag)}
	if spec.Group != nil {
		s.tally = newTally(spec)
	}
	dir.setRecentBytes(db.RecentCacheBytes())
	// Until the rebuild has seen every counter in the log, a new position
	// is looked up before it is used: a migration cut short by a crash left
	// records at positions this process's counter would reach again (found
	// by TestCrashDuringMigration).
	s.wrapped.Store(true)
	if err := migrateKeyed(ctx, db, s); err != nil {
		return nil, err
	}
	if err := removeOldStamp(ctx, db, spec); err != nil {
		return nil, err
	}
	if err := rebuildIn(ctx, db, s); err != nil {
		return nil, fmt.Errorf("recstore: rebuild the %s directory: %w", spec.Name, err)
	}
	return s, nil
}

// errBuildPanicked is the error of a store whose build panicked, for the
// Open calls that waited for it; the next Open builds it again.
var errBuildPanicked = errors.New("recstore: building the store panicked (see the first caller's panic); the next open tries again")

// rebuildIn rebuilds s from the log in a kv transaction, where a page
// the disk cannot read is kv.ErrReadFailed, not the end of the process.
// On a writable database it holds the writer (kv.DB.Hold: a write
// transaction rolled back), so no record is committed while the directory
// and the tally are filled.
func rebuildIn(ctx context.Context, db *kv.DB, s *logStore) error {
	if db.ReadOnly() {
		return db.View(ctx, func(tx kv.Tx) error { s.rebuild(tx); return nil })
	}
	return db.Hold(ctx, func(tx kv.Tx) error { s.rebuild(tx); return nil })
}

// OldTallyBucket is the name of the bucket where earlier builds kept
// spec's tally stamp (tally.go), for tests.
func OldTallyBucket(spec Spec) []byte { return spec.oldTallyNS().Bytes() }

// LogBucket is the name of spec's log bucket, for tests and tools.
func LogBucket(spec Spec) []byte { return spec.logNS().Bytes() }

// TailBucket is the name of spec's tail bucket (tail.go), for tests and
// tools.
func TailBucket(spec Spec) []byte { return spec.tailNS().Bytes() }

// positionOf returns the expiry second and counter of a log key.
func positionOf(k []byte) (sec uint64, ok bool) {
	if len(k) != 8 {
		return 0, false
	}
	return posSec(binary.BigEndian.Uint64(k)), true
}

func secTime(sec uint64) time.Time {
	if sec > math.MaxInt64 {
		sec = math.MaxInt64
	}
	return time.Unix(int64(sec), 0).UTC()
}
